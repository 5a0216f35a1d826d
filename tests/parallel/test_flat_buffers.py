"""FlatBuffers, the coalesced buffers of the strategies: defined contents from the start."""
import numpy as np

from hpcdist.parallel.replica import FlatBuffers


def test_buffers_and_extras_start_at_zero():
    # FedAvg scales the whole first buffer, extras included, before it writes them: memory
    # left as np.empty gave "overflow encountered in multiply" on a 4-rank benchmark run
    arrays = [np.full((3, 2), 7.0, np.float32), np.ones(4, np.float64), np.ones(2, np.float32)]
    buffers = FlatBuffers(arrays, extra=3)
    assert [flat.dtype for flat in buffers.flats] == [np.float32, np.float64]
    assert [flat.size for flat in buffers.flats] == [6 + 2 + 3, 4]
    for flat in buffers.flats:
        assert not flat.any()
    with np.errstate(all="raise"):
        for flat in buffers.pack(arrays):
            flat *= 50_000.0
    assert not buffers.extras().any()


def test_pack_and_unpack_round_trip():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 2)), rng.standard_normal(5).astype(np.float32)]
    buffers = FlatBuffers(arrays, extra=1)
    buffers.pack(arrays)
    restored = [np.zeros_like(array) for array in arrays]
    buffers.unpack(restored)
    for before, after in zip(arrays, restored):
        np.testing.assert_array_equal(before, after)
