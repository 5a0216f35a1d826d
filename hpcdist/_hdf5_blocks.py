"""HDF5 helpers shared by the writers and the reader (h5py is imported on first use)."""

import numpy as np

__all__ = ["h5py_module", "h5py_is_parallel", "BLOCK_BYTES", "blocks_of", "create_leaf_dataset",
           "write_block", "write_empty", "collective_dxpl"]

#: the most bytes one H5Dwrite call gets (keeps MPI-IO counts small, lets other
#: threads run between calls, and sets how often a write-behind flush starts:
#: see :class:`~hpcdist.checkpoint.commit.WriteBehind`)
BLOCK_BYTES = 64 << 20


def h5py_module():
    """``h5py``, or an ImportError saying how to install it."""
    try:
        import h5py
    except ImportError as error:  # pragma: no cover - h5py is a dependency
        raise ImportError("hpcdist.checkpoint needs h5py: pip install h5py") from error
    return h5py


def h5py_is_parallel():
    """Whether h5py was built against parallel HDF5 (``driver="mpio"`` works)."""
    return bool(h5py_module().get_config().mpi)


def blocks_of(shape, axis, itemsize):
    """``[(i, j), ...]``: ``range(shape[axis])`` cut into blocks of at most ``BLOCK_BYTES``."""
    if axis is None:
        return [(None, None)]
    length = shape[axis]
    row = itemsize * int(np.prod(shape, dtype=np.int64)) // max(length, 1)
    per_block = max(1, BLOCK_BYTES // max(row, 1))
    return [(i, min(i + per_block, length)) for i in range(0, length, per_block)]


def create_leaf_dataset(group, path, entry, storage, shape):
    """Create the dataset of a leaf (contiguous, no fill) with its ``hpcdist_*`` attributes."""
    h5py = h5py_module()
    if entry["kind"] == "none":
        dataset = group.create_dataset(path, data=h5py.Empty("i1"))
    else:
        dataset = group.create_dataset(path, shape=tuple(shape), dtype=storage,
                                       fill_time="never")
    _describe(dataset, entry)
    return dataset


def _describe(dataset, entry):
    dataset.attrs["hpcdist_kind"] = entry["kind"]
    if entry.get("storage") == "opaque":
        dataset.attrs["hpcdist_dtype"] = entry["dtype"]["str"]
    if entry["kind"] in ("str", "bytes"):
        dataset.attrs["hpcdist_nbytes"] = entry["nbytes"]


def collective_dxpl():
    """A transfer property list for collective MPI-IO writes."""
    h5py = h5py_module()
    dxpl = h5py.h5p.create(h5py.h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5py.h5fd.MPIO_COLLECTIVE)
    return dxpl


def _hyperslab(space, shape, axis, start, count):
    offsets = [0] * len(shape)
    counts = list(shape)
    offsets[axis], counts[axis] = start, count
    space.select_hyperslab(tuple(offsets), tuple(counts))


def write_block(dataset, source, axis, offset, block, dxpl=None):
    """Write rows ``block = (i, j)`` (along ``axis``) of ``source`` at ``offset + i``.

    ``source`` is C-contiguous in the dataset's storage dtype; ``axis`` None
    writes a 0-d source whole.
    """
    h5py = h5py_module()
    file_space = dataset.id.get_space()
    if axis is None:
        memory_space = h5py.h5s.create(h5py.h5s.SCALAR)
    else:
        i, j = block
        memory_space = h5py.h5s.create_simple(source.shape)
        _hyperslab(memory_space, source.shape, axis, i, j - i)
        _hyperslab(file_space, dataset.shape, axis, offset + i, j - i)
    dataset.id.write(memory_space, file_space, source, dxpl=dxpl)


def write_empty(dataset, dxpl):
    """Take part in a collective write while writing nothing."""
    h5py = h5py_module()
    file_space = dataset.id.get_space()
    file_space.select_none()
    memory_space = h5py.h5s.create_simple((1,))
    memory_space.select_none()
    dataset.id.write(memory_space, file_space, np.zeros(1, dtype=dataset.dtype), dxpl=dxpl)
