"""load_hdf5 / save_hdf5: each rank reads its balanced hyperslab, writes its block."""
import os
from pathlib import Path

import h5py
import numpy as np
import pytest

import hpcdist
from hpcdist.data import DataPartitioner, load_hdf5, save_hdf5
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin

PARALLEL_H5PY = bool(h5py.get_config().mpi)


@pytest.fixture
def shared(tmp_path, ctx):
    """Rank 0's tmp_path on every rank."""
    return Path(hpcdist.broadcast_object(str(tmp_path), ctx=ctx))


def _block(full, counts, rank, axis):
    start = sum(counts[:rank])
    index = [slice(None)] * full.ndim
    index[axis] = slice(start, start + counts[rank])
    return full[tuple(index)]


def _balanced(full, rank, size, axis):
    start, stop = DataPartitioner(full.shape[axis], size).get_partition(rank)
    index = [slice(None)] * full.ndim
    index[axis] = slice(start, stop)
    return full[tuple(index)]


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.int16, np.bool_, np.complex128])
def test_save_then_load_balanced_blocks(ctx, shared, axis, dtype):
    counts = [(3 * rank + 1) % 4 for rank in range(ctx.size)]  # uneven, empty blocks
    total = sum(counts)
    full = (np.arange(total * 3 * 2).reshape((total, 3, 2) if axis == 0 else (3, total, 2))
            % 7).astype(dtype)
    path = shared / "data.h5"
    save_hdf5(path, "group/X", _block(full, counts, ctx.rank, axis), ctx=ctx, axis=axis)
    save_hdf5(path, "Y", np.full(2, ctx.rank), ctx=ctx)  # a second dataset in the same file
    local = load_hdf5(path, "group/X", ctx=ctx, axis=axis)
    with all_ranks("load_hdf5 gives the DataPartitioner block"):
        check_array(local, _balanced(full, ctx.rank, ctx.size, axis))
        check_array(load_hdf5(str(path), "Y", ctx=ctx), _balanced(
            np.repeat(np.arange(ctx.size), 2), ctx.rank, ctx.size, 0))
        if ctx.rank == 0:
            with h5py.File(path, "r") as h5file:
                check_array(h5file["group/X"][...], full)
            parts = sorted(name for name in os.listdir(shared) if ".rank_" in name)
            if ctx.size == 1 or PARALLEL_H5PY:
                assert parts == [], parts
            else:  # one file per rank (every rank has a block of Y), virtual datasets
                assert parts == [f"data.rank_{r:05d}.h5" for r in range(ctx.size)], parts


test_save_then_load_balanced_blocks_mpi = mpi_twin(test_save_then_load_balanced_blocks)


def test_save_replaces_a_dataset_and_keeps_the_others(ctx, shared):
    path = shared / "replace.h5"
    save_hdf5(path, "A", np.ones((2, 2)), ctx=ctx)
    save_hdf5(path, "B", np.arange(3), ctx=ctx)
    save_hdf5(path, "A", np.zeros((1, 5), np.int8), ctx=ctx)
    with all_ranks("replaced"):
        check_array(load_hdf5(path, "A", ctx=ctx, axis=1),
                    _balanced(np.zeros((ctx.size, 5), np.int8), ctx.rank, ctx.size, 1))
        check_array(load_hdf5(path, "B", ctx=ctx),
                    _balanced(np.tile(np.arange(3), ctx.size), ctx.rank, ctx.size, 0))


test_save_replaces_a_dataset_and_keeps_the_others_mpi = mpi_twin(
    test_save_replaces_a_dataset_and_keeps_the_others)


def test_load_reads_only_its_hyperslab(ctx, shared, monkeypatch):
    path = shared / "big.h5"
    full = np.arange(50 * 4, dtype=np.float64).reshape(50, 4)
    if ctx.rank == 0:
        with h5py.File(path, "w") as h5file:
            h5file["X"] = full
    hpcdist.barrier(ctx=ctx)
    selections = []
    real = h5py.Dataset.__getitem__

    def recording(self, args, *rest, **kwargs):
        selections.append(args)
        return real(self, args, *rest, **kwargs)

    monkeypatch.setattr(h5py.Dataset, "__getitem__", recording)
    local = load_hdf5(path, "X", ctx=ctx)
    start, stop = DataPartitioner(50, ctx.size).get_partition(ctx.rank)
    with all_ranks("one hyperslab read"):
        assert selections == [(slice(start, stop), slice(None))], selections
        check_array(local, full[start:stop])


test_load_reads_only_its_hyperslab_mpi = mpi_twin(test_load_reads_only_its_hyperslab)


def test_load_errors_name_what_exists(ctx, shared):
    path = shared / "have.h5"
    if ctx.rank == 0:
        with h5py.File(path, "w") as h5file:
            h5file["train/X"] = np.zeros((4, 2))
            h5file["y"] = np.zeros(4)
            h5file["s"] = 1.0
    hpcdist.barrier(ctx=ctx)
    expect_error(hpcdist.DataFileNotFoundError, load_hdf5, shared / "nope.h5", "X", ctx=ctx,
                 match=r"no file .*nope.h5.*HDF5 files in .*: 'have.h5'")
    expect_error(hpcdist.MissingDatasetError, load_hdf5, path, "X", ctx=ctx,
                 match=r"has no such dataset at 'X'; its datasets: 's', 'train/X', 'y'")
    expect_error(KeyError, load_hdf5, path, "train", ctx=ctx, match=r"has a group at 'train'")
    expect_error(ValueError, load_hdf5, path, "y", ctx=ctx, axis=1,
                 match=r"axis=1 is out of range for 1 dimensions")
    expect_error(ValueError, load_hdf5, path, "s", ctx=ctx, match=r"0-d dataset")
    expect_error(TypeError, load_hdf5, path, "", ctx=ctx, match=r"dataset='' should be")
    expect_error(hpcdist.DataFileError, load_hdf5, shared, "X", ctx=ctx,
                 match=r"load_hdf5: '.*' is a folder; pass one HDF5 file \(HDF5 files in it: "
                       r"'have.h5'\)")
    for function, args in ((load_hdf5, ("X",)), (save_hdf5, ("X", np.zeros(2)))):
        expect_error(TypeError, function, None, *args, ctx=ctx,
                     match=rf"{function.__name__}: path=None should be a str or path-like")


test_load_errors_name_what_exists_mpi = mpi_twin(test_load_errors_name_what_exists)


def test_file_errors_name_the_file_and_are_public(ctx, shared):
    text = shared / "notes.h5"
    if ctx.rank == 0:
        text.write_text("not HDF5\n")
    hpcdist.barrier(ctx=ctx)
    error = expect_error(hpcdist.DataFileError, load_hdf5, text, "X", ctx=ctx,
                         match=r"load_hdf5: '.*notes\.h5' cannot be read as an HDF5 file")
    assert isinstance(error, OSError) and isinstance(error, hpcdist.HpcdistError)
    missing = shared / "notes.h5" / "out.h5"  # a file where a directory should be
    expect_error(hpcdist.DataFileNotFoundError, save_hdf5, missing, "X", np.zeros(2), ctx=ctx,
                 match=r"save_hdf5: no directory .*notes\.h5' to write .*out\.h5' in; create")
    expect_error(hpcdist.DataFileError, save_hdf5, text, "X", np.zeros(2), ctx=ctx,
                 match=r"save_hdf5: writing 'X' to '.*notes\.h5' failed")
    with all_ranks("nothing overwritten"):
        assert text.read_text() == "not HDF5\n"


test_file_errors_name_the_file_and_are_public_mpi = mpi_twin(
    test_file_errors_name_the_file_and_are_public)


def test_save_errors(ctx, shared):
    expect_error(TypeError, save_hdf5, shared / "u.h5", "U", np.array(["a", "b"]), ctx=ctx,
                 match=r"HDF5 cannot store dtype <U1")
    expect_error(ValueError, save_hdf5, shared / "s.h5", "S", np.float64(1), ctx=ctx,
                 match=r"0-d dataset cannot be split")


test_save_errors_mpi = mpi_twin(test_save_errors)


@pytest.mark.mpi(min_size=2)
def test_save_blocks_that_disagree_raise_on_every_rank(ctx, shared):
    dtype = np.float32 if ctx.rank == 1 else np.float64
    expect_error(hpcdist.ConfigMismatchError, save_hdf5, shared / "x.h5", "X",
                 np.zeros(3, dtype), ctx=ctx,
                 match=r"ranks passed different dtypes: <f8 on rank")
    shape = (2, 3) if ctx.rank == 0 else (2, 4)
    expect_error(hpcdist.ConfigMismatchError, save_hdf5, shared / "x.h5", "X",
                 np.zeros(shape), ctx=ctx, match=r"shapes must agree apart from axis 0")
