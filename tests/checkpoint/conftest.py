"""Fixtures of the checkpoint tests: a directory every rank shares, the backends."""
from pathlib import Path

import h5py
import numpy as np
import pytest

import hpcdist
from hpcdist.data import DataPartitioner

PARALLEL_H5PY = bool(h5py.get_config().mpi)
NO_MPIO = ("h5py is not built against parallel HDF5 (h5py.get_config().mpi is False): the mpio "
           "backend is tested in the system environment (scripts/test --mpi system)")
needs_mpio = pytest.mark.skipif(not PARALLEL_H5PY, reason=NO_MPIO)
BACKENDS = ["sharded", pytest.param("mpio", marks=needs_mpio)]


@pytest.fixture
def shared_dir(tmp_path, ctx):
    """``<rank 0's tmp_path>/ckpt``, the same path on every rank."""
    return Path(hpcdist.broadcast_object(str(tmp_path), ctx=ctx)) / "ckpt"


def uneven_counts(size):
    """Block lengths per rank: uneven, with empty blocks from 2 ranks up."""
    return [(3 * rank + 1) % 4 for rank in range(size)]


def local_block(global_array, counts, rank, axis=0):
    """Rank ``rank``'s block of ``global_array`` when split into ``counts`` along ``axis``."""
    start = sum(counts[:rank])
    index = [slice(None)] * global_array.ndim
    index[axis] = slice(start, start + counts[rank])
    return global_array[tuple(index)]


def balanced_block(global_array, rank, size, axis=0):
    """What restore gives rank ``rank`` of ``size``: the DataPartitioner block."""
    start, stop = DataPartitioner(global_array.shape[axis], size).get_partition(rank)
    index = [slice(None)] * global_array.ndim
    index[axis] = slice(start, stop)
    return global_array[tuple(index)]


def same_bits(actual, expected, what="array"):
    """Raise AssertionError unless ``actual`` is an ndarray bit-identical to ``expected``."""
    assert isinstance(actual, np.ndarray), f"{what}: {type(actual).__name__} is no ndarray"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes(), \
        f"{what}: bytes differ"
