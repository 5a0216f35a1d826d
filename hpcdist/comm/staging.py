"""Reusable page-locked host buffers for staging device arrays through MPI."""

import math

import numpy as np

__all__ = ["StagingPool"]


class StagingPool:
    """Host buffers, one per slot, grown on demand and reused across calls.

    A collective that cannot hand device memory to MPI copies its input into
    the ``"send"`` slot, lets MPI fill the ``"recv"`` slot, and copies that
    back to the device: one copy each way, no allocation once the buffers
    are large enough.

    Attributes
    ----------
    allocations : int
        How many host buffers have been allocated so far.
    """

    def __init__(self):
        self._buffers = {}
        self.allocations = 0

    def view(self, slot, shape, dtype, backend):
        """A C-contiguous array of ``shape`` and ``dtype`` over the slot's buffer.

        Parameters
        ----------
        slot : str or None
            Which buffer (``"send"``, ``"recv"``, ...); None gives a fresh
            buffer that is not pooled (for nonblocking operations, whose
            buffers stay in use after the call returns).
        shape : tuple of int
        dtype : numpy.dtype
        backend : DeviceBackend
            Allocates page-locked memory when the buffer must grow.
        """
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if slot is None:
            return backend.pinned_empty(nbytes).view(dtype).reshape(shape)
        backend.wait_for_uploads()  # the buffer may still be the source of a device copy
        buffer = self._buffers.get(slot)
        if buffer is None or buffer.nbytes < nbytes:
            # grow geometrically so a slowly growing message does not reallocate every call
            capacity = max(nbytes, 2 * (buffer.nbytes if buffer is not None else 0), 4096)
            buffer = backend.pinned_empty(capacity)
            self._buffers[slot] = buffer
            self.allocations += 1
        return buffer[:nbytes].view(dtype).reshape(shape)

    def clear(self):
        """Release every buffer."""
        self._buffers.clear()
