"""Serial tests of the compressors: round trips, payload sizes, state, errors."""
import numpy as np
import pytest

from hpcdist import kernels
from hpcdist.compression import (
    BF16Compressor,
    ErrorFeedback,
    FP16Compressor,
    NoCompression,
    PowerSGDCompressor,
    QSGDCompressor,
    RandomKCompressor,
    SignCompressor,
    TopKCompressor,
)
from hpcdist.compression.base import call_seed
from hpcdist.compression.powersgd import initial_q
from tests.compression.reference import PowerSGDReference, rank_input, topk_dense
from tests.reference import BFLOAT16

FLOATS = [np.float32, np.float64]
SHAPES = [(0,), (1,), (7,), (33, 5), (4, 3, 10)]


def all_compressors():
    return [NoCompression(), FP16Compressor(), BF16Compressor(), TopKCompressor(0.1),
            RandomKCompressor(0.2, seed=3), QSGDCompressor(16), SignCompressor(8),
            PowerSGDCompressor(2), ErrorFeedback(TopKCompressor(0.3))]


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_shape_dtype(shape, dtype):
    x = rank_input(0, shape, dtype)
    for c in all_compressors():
        payload, meta = c.compress(x, "t")
        assert isinstance(payload, tuple) and all(isinstance(a, np.ndarray) for a in payload)
        out = c.decompress(payload, meta)
        assert out.shape == x.shape and out.dtype == x.dtype, c
        assert c.collective in ("allreduce", "allgather")


@pytest.mark.parametrize("dtype", FLOATS)
def test_lossless_and_casts(dtype):
    x = rank_input(0, (50, 3), dtype)
    c = NoCompression()
    np.testing.assert_array_equal(c.decompress(*c.compress(x, "a")), x)
    h = FP16Compressor()
    payload, meta = h.compress(x, "a")
    assert payload[0].dtype == np.float16 and payload[0].nbytes == x.size * 2
    np.testing.assert_allclose(h.decompress(payload, meta), x.astype(np.float16), rtol=0)
    b = BF16Compressor()
    payload, meta = b.compress(x, "a")
    assert payload[0].dtype == BFLOAT16 and payload[0].nbytes == x.size * 2
    np.testing.assert_allclose(b.decompress(payload, meta), x, rtol=2 ** -8)


def test_no_compression_integers():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    c = NoCompression()
    np.testing.assert_array_equal(c.decompress(*c.compress(x, "i")), x)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ratio,n,k", [(0.01, 1000, 10), (0.1, 7, 1), (1.0, 9, 9), (0.5, 1, 1)])
def test_topk(ratio, n, k, dtype):
    x = rank_input(1, (n,), dtype)
    c = TopKCompressor(ratio)
    (indices, values), meta = c.compress(x, "w")
    assert indices.dtype == np.int64 and indices.shape == (k,) and values.shape == (k,)
    np.testing.assert_array_equal(c.decompress((indices, values), meta), topk_dense(x, k))


@pytest.mark.parametrize("dtype", FLOATS)
def test_randomk_indices_advance_per_call(dtype):
    x = rank_input(2, (6, 50), dtype)
    c = RandomKCompressor(0.1, seed=5)
    (v1,), m1 = c.compress(x, "w")
    (v2,), m2 = c.compress(x, "w")
    assert v1.shape == (30,) and m1["indices"].dtype == np.int64
    for step, (v, m) in enumerate([(v1, m1), (v2, m2)]):
        expected = kernels.randomk_indices(300, 30, call_seed(5, "w", step))
        np.testing.assert_array_equal(m["indices"], expected)
        np.testing.assert_array_equal(v, x.reshape(-1)[expected])
        dense = np.zeros(300, dtype)
        dense[expected] = x.reshape(-1)[expected]
        np.testing.assert_array_equal(c.decompress((v,), m), dense.reshape(x.shape))
    assert not np.array_equal(m1["indices"], m2["indices"])
    # a second compressor with the same seed draws the same indices (as another rank would)
    other = RandomKCompressor(0.1, seed=5)
    np.testing.assert_array_equal(other.compress(x + 1, "w")[1]["indices"], m1["indices"])


@pytest.mark.parametrize("levels,qtype", [(1, np.int8), (16, np.int8), (256, np.int16)])
def test_qsgd_payload_and_bound(levels, qtype):
    x = rank_input(3, (1001,), np.float32)
    c = QSGDCompressor(levels)
    (norm, q), meta = c.compress(x, "g")
    assert norm.shape == (1,) and q.dtype == qtype and q.shape == x.shape
    assert np.all(np.abs(q.astype(np.int64)) <= levels)
    out = c.decompress((norm, q), meta)
    np.testing.assert_allclose(out, norm[0] * q / levels, rtol=1e-5, atol=1e-7)
    # stochastic rounding: each element within one level of x
    assert np.all(np.abs(out - x) <= norm[0] / levels * (1 + 1e-5))


def test_qsgd_unbiased():
    x = rank_input(4, (64,), np.float64)
    c = QSGDCompressor(4)
    mean = np.mean([c.decompress(*c.compress(x, "g")) for _ in range(4000)], axis=0)
    step = np.linalg.norm(x) / 4
    assert np.max(np.abs(mean - x)) < 6 * step / np.sqrt(4 * 4000)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n,chunk", [(1, 4), (17, 4), (1000, 1024), (4096, 1024)])
def test_sign_payload_and_values(n, chunk, dtype):
    x = rank_input(5, (n,), dtype)
    c = SignCompressor(chunk)
    (packed, scales), meta = c.compress(x, "s")
    assert packed.dtype == np.uint8 and packed.shape == (-(-n // 8),)
    assert scales.dtype == np.float32 and scales.shape == (-(-n // chunk),)
    out = c.decompress((packed, scales), meta)
    np.testing.assert_array_equal(np.sign(out), np.sign(x))
    for i in range(0, n, chunk):
        block, mags = np.abs(x[i:i + chunk]), np.abs(out[i:i + chunk])
        assert np.ptp(mags) == 0
        assert block.min() * (1 - 1e-6) <= mags[0] <= block.max() * (1 + 1e-6)


def test_sign_default_chunk():
    assert SignCompressor().chunk_size == 1024


def test_powersgd_single_rank_matches_reference():
    rng_inputs = [rank_input(0, (12, 20), np.float64, seed=s) for s in range(3)]
    c = PowerSGDCompressor(2, seed=4)
    ref = PowerSGDReference(initial_q(4, "m", 20, 2, np.float64), 1)
    for x in rng_inputs:
        payload, meta = c.compress(x, "m")
        assert payload[0].shape == (12, 2)
        np.testing.assert_allclose(c.decompress(payload, meta), ref.step([x]), rtol=1e-10,
                                   atol=1e-12)
        np.testing.assert_allclose(c.residual("m"), ref.errors[0], rtol=1e-10, atol=1e-12)


def test_powersgd_dense_cases():
    c = PowerSGDCompressor(1)
    for shape in [(10,), (2, 2), (3, 1)]:
        x = rank_input(0, shape, np.float32)
        payload, meta = c.compress(x, f"d{shape}")
        assert meta["stage"] == "dense" and payload[0].size == x.size
        np.testing.assert_array_equal(c.decompress(payload, meta), x)


def test_powersgd_exact_for_low_rank_input():
    u, v = rank_input(0, (30, 1), np.float64), rank_input(1, (1, 40), np.float64)
    c = PowerSGDCompressor(1)
    np.testing.assert_allclose(c.decompress(*c.compress(u @ v, "r")), u @ v, rtol=1e-9)


@pytest.mark.parametrize("make", [lambda: TopKCompressor(0.1), lambda: RandomKCompressor(0.25, 3),
                                  lambda: SignCompressor(8), lambda: FP16Compressor()],
                         ids=["topk", "randomk", "sign", "fp16"])
@pytest.mark.parametrize("dtype", FLOATS + [np.float16])
def test_error_feedback_keeps_exactly_what_was_not_sent(make, dtype):
    """In place (subtract_sent: top-k, random-k, sign) and dense (fp16, any half input)."""
    c = ErrorFeedback(make())
    work = np.float64 if dtype == np.float64 else np.float32
    residual = np.zeros(40, work)
    for seed in range(3):
        x = rank_input(0, (5, 8), dtype, seed=seed)
        corrected = x.reshape(-1).astype(work) + residual
        payload, meta = c.compress(x, "g")
        sent = np.asarray(c.decompress(payload, meta)).reshape(-1).astype(work)
        residual = corrected - sent
        np.testing.assert_array_equal(c.residual("g"), residual)


class _Halving:
    """A compressor by duck typing only (no Compressor base): sends x / 2."""
    collective = "allreduce"

    def compress(self, x, name):
        return (np.asarray(x) / 2,), {"shape": np.shape(x)}

    def decompress(self, payload, meta):
        return payload[0]


def test_error_feedback_wraps_a_duck_typed_compressor():
    c = ErrorFeedback(_Halving())
    x = np.arange(6, dtype=np.float64).reshape(2, 3)
    payload, meta = c.compress(x, "g")
    np.testing.assert_array_equal(payload[0], x / 2)
    np.testing.assert_array_equal(c.residual("g"), x.reshape(-1) / 2)


@pytest.mark.parametrize("dtype", FLOATS)
def test_error_feedback_residual_math(dtype):
    c = ErrorFeedback(TopKCompressor(0.1))
    xs = [rank_input(0, (5, 8), dtype, seed=s) for s in range(4)]
    residual = np.zeros(40, dtype)
    sent = np.zeros(40, dtype)
    for x in xs:
        corrected = x.reshape(-1) + residual
        expected = topk_dense(corrected, 4)
        out = c.decompress(*c.compress(x, "g"))
        np.testing.assert_allclose(out.reshape(-1), expected, rtol=1e-6)
        residual = corrected - expected
        np.testing.assert_allclose(c.residual("g"), residual, rtol=1e-6, atol=1e-6)
        sent += out.reshape(-1)
    # nothing is lost: what was sent plus the residual is what came in
    np.testing.assert_allclose(sent + c.residual("g"), sum(x.reshape(-1) for x in xs),
                               rtol=1e-5, atol=1e-5)
    assert c.collective == "allgather"
    assert ErrorFeedback(RandomKCompressor(0.5)).collective == "allreduce"


# -- bad input --------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio", [0, -0.5, 1.5, float("nan")])
@pytest.mark.parametrize("cls", [TopKCompressor, RandomKCompressor])
def test_bad_ratio(cls, ratio):
    with pytest.raises(ValueError, match=r"ratio=" + repr(ratio).replace(".", r"\.")):
        cls(ratio)


@pytest.mark.parametrize("levels", [0, -3])
def test_bad_levels(levels):
    with pytest.raises(ValueError, match=f"levels={levels}"):
        QSGDCompressor(levels)


def test_bad_chunk_and_rank():
    with pytest.raises(ValueError, match="chunk_size=0"):
        SignCompressor(0)
    with pytest.raises(ValueError, match="rank=0"):
        PowerSGDCompressor(0)


@pytest.mark.parametrize("make", [FP16Compressor, BF16Compressor, lambda: TopKCompressor(0.5),
                                  lambda: RandomKCompressor(0.5), QSGDCompressor, SignCompressor,
                                  PowerSGDCompressor, lambda: ErrorFeedback(TopKCompressor(0.5))])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.bool_, np.complex64])
def test_non_float_dtype(make, dtype):
    with pytest.raises(TypeError, match=np.dtype(dtype).name):
        make().compress(np.ones((4, 4), dtype=dtype), "x")


@pytest.mark.parametrize("make", [NoCompression, lambda: TopKCompressor(0.5), SignCompressor,
                                  PowerSGDCompressor, lambda: ErrorFeedback(SignCompressor())])
def test_name_reused_with_other_shape(make):
    c = make()
    c.compress(np.ones((4, 5), np.float32), "layer1.weight")
    with pytest.raises(ValueError, match=r"layer1\.weight") as info:
        c.compress(np.ones((5, 4), np.float32), "layer1.weight")
    assert "(4, 5)" in str(info.value) and "(5, 4)" in str(info.value)
    with pytest.raises(ValueError, match="float64"):
        c.compress(np.ones((4, 5), np.float64), "layer1.weight")
    c.compress(np.ones((5, 4), np.float32), "other")  # other names are free


def test_error_feedback_refuses_powersgd():
    with pytest.raises(TypeError, match="own error feedback"):
        ErrorFeedback(PowerSGDCompressor())


@pytest.mark.parametrize("dtype", [np.float16, BFLOAT16], ids=["float16", "bfloat16"])
def test_round_trip_16_bit_inputs(dtype):
    """16-bit inputs are computed on in float32 and come back in their own dtype."""
    x = rank_input(0, (12, 9), np.float32).astype(dtype)
    for c in all_compressors():
        out = c.decompress(*c.compress(x, "t"))
        assert out.shape == x.shape and out.dtype == x.dtype, c
    np.testing.assert_array_equal(NoCompression().decompress(*NoCompression().compress(x, "t")), x)
