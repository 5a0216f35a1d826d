"""HDF5 block I/O: datasets written in blocks of bounded size, collectively or not.

Shared by the checkpoint writers and :func:`hpcdist.data.save_hdf5`. A block
is a range of rows along one axis of at most :data:`BLOCK_BYTES`; with
parallel HDF5 every rank takes part in each collective write, writing a
block or nothing (:func:`write_empty`).
"""

import h5py
import numpy as np

__all__ = ["BLOCK_BYTES", "h5py_is_parallel", "blocks_of", "collective_dxpl", "write_block",
           "write_empty"]

#: the most bytes one H5Dwrite call gets (keeps MPI-IO counts small, lets other
#: threads run between calls, and sets how often a checkpoint's write-behind
#: flush starts)
BLOCK_BYTES = 64 << 20


def h5py_is_parallel():
    """Whether h5py was built against parallel HDF5 (``driver="mpio"`` works)."""
    return bool(h5py.get_config().mpi)


def blocks_of(shape, axis, itemsize):
    """``range(shape[axis])`` cut into blocks of at most :data:`BLOCK_BYTES`.

    Parameters
    ----------
    shape : sequence of int
        The array's shape.
    axis : int or None
        The axis to cut; None for a 0-d array (one block, ``(None, None)``).
    itemsize : int
        Bytes per element.

    Returns
    -------
    list of (int, int)
        Half-open row ranges ``(i, j)``, in order.
    """
    if axis is None:
        return [(None, None)]
    length = shape[axis]
    row = itemsize * int(np.prod(shape, dtype=np.int64)) // max(length, 1)
    per_block = max(1, BLOCK_BYTES // max(row, 1))
    return [(i, min(i + per_block, length)) for i in range(0, length, per_block)]


def collective_dxpl():
    """A transfer property list for collective MPI-IO writes."""
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

    Parameters
    ----------
    dataset : h5py.Dataset
    source : ndarray
        C-contiguous, in the dataset's storage dtype.
    axis : int or None
        None writes a 0-d ``source`` whole.
    offset : int
        Where ``source`` begins along ``axis`` in the dataset.
    block : (int, int)
        One of :func:`blocks_of`'s ranges of ``source``.
    dxpl : h5py.h5p.PropDXID, optional
        :func:`collective_dxpl` for a collective write.
    """
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
    file_space = dataset.id.get_space()
    file_space.select_none()
    memory_space = h5py.h5s.create_simple((1,))
    memory_space.select_none()
    dataset.id.write(memory_space, file_space, np.zeros(1, dtype=dataset.dtype), dxpl=dxpl)
