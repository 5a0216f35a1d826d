"""hpcdist._hdf5_blocks: datasets written in blocks of at most BLOCK_BYTES."""

import h5py
import numpy as np

from hpcdist import _hdf5_blocks
from hpcdist._hdf5_blocks import blocks_of, write_block


def test_blocks_cover_the_axis_in_order_within_the_byte_limit(monkeypatch):
    monkeypatch.setattr(_hdf5_blocks, "BLOCK_BYTES", 100)
    blocks = blocks_of((7, 3), 0, 8)  # 24-byte rows: 4 per block
    assert blocks == [(0, 4), (4, 7)]
    assert blocks_of((2, 40), 0, 8) == [(0, 1), (1, 2)]  # a row larger than a block
    assert blocks_of((0, 3), 0, 8) == [] and blocks_of((), None, 8) == [(None, None)]


def test_blocks_written_at_an_offset_along_any_axis(tmp_path, monkeypatch):
    monkeypatch.setattr(_hdf5_blocks, "BLOCK_BYTES", 16)
    source = np.arange(12, dtype=np.int32).reshape(3, 4)
    with h5py.File(tmp_path / "blocks.h5", "w") as h5file:
        dataset = h5file.create_dataset("x", shape=(3, 6), dtype=np.int32, fillvalue=-1)
        for block in blocks_of(source.shape, 1, source.dtype.itemsize):
            write_block(dataset, source, 1, 2, block)
        scalar = h5file.create_dataset("s", shape=(), dtype=np.float64)
        write_block(scalar, np.array(2.5), None, None, (None, None))
        assert dataset[:, :2].tolist() == [[-1, -1]] * 3
        assert np.array_equal(dataset[:, 2:], source) and scalar[()] == 2.5
