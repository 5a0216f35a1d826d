"""Small headers that describe arrays between ranks.

Collectives whose receivers do not know the incoming shape (broadcast to
None, point-to-point receives) send a header first: a status word, the
dtype code, the number of dimensions, the kind of object (array, Python or
NumPy scalar, device array), one free word, and the shape: 40 bytes and 8
per dimension. A header is packed and unpacked with one :mod:`struct` call
straight into the message buffer, the cheapest way on the small-message path.
"""

import struct

import numpy as np

from ..exceptions import InvalidArgumentError
from .dtypes import dtype_code, dtype_from_code

__all__ = ["HEADER_BYTES", "MAX_DIMS", "OK", "NO_INPUT", "BAD_INPUT", "pack_header",
           "unpack_header", "write_inline", "read_inline", "SCALAR_TYPES"]

MAX_DIMS = 32
#: a header of an ndim-dimensional array: the five fixed words, then the shape
_HEADERS = [struct.Struct(f"<{5 + ndim}q") for ndim in range(MAX_DIMS + 1)]
_NDIM_OFFSET = 16  # the low byte of the third word (little-endian; ndim <= MAX_DIMS)
#: the longest header (a MAX_DIMS-dimensional array)
HEADER_BYTES = _HEADERS[MAX_DIMS].size
# status words
OK, NO_INPUT, BAD_INPUT = 0, 1, 2
#: Python scalar types by code (index), so a receiver can rebuild the sender's scalar
SCALAR_TYPES = (bool, int, float, complex)


def pack_header(buffer, status, array=None, kind=0, scalar_code=-1, extra=0):
    """Write a header describing ``array`` at the start of ``buffer``.

    Parameters
    ----------
    buffer : writable buffer of at least HEADER_BYTES bytes
        A memoryview or bytearray (cheaper to pack into than a NumPy array).
    status : int
        ``OK``, ``NO_INPUT`` or ``BAD_INPUT``.
    array : array, optional
        The array described (shape and dtype).
    kind : int
        The :class:`~hpcdist.comm.calls.Call` kind of the sender's object.
    scalar_code : int
        Index into :data:`SCALAR_TYPES` for a Python scalar, else -1.
    extra : int
        One free word for the caller (e.g. whether data follows inline).

    Returns
    -------
    int
        The header's length in bytes: where data packed after it starts.
    """
    if array is None:
        _HEADERS[0].pack_into(buffer, 0, status, 0, 0, 0, extra)
        return _HEADERS[0].size
    shape = array.shape
    ndim = len(shape)
    if ndim > MAX_DIMS:
        raise InvalidArgumentError(f"arrays of more than {MAX_DIMS} dimensions are not supported "
                                   f"(got {ndim}); reshape first")
    header = _HEADERS[ndim]
    header.pack_into(buffer, 0, status, dtype_code(array.dtype), ndim,
                     kind * 16 + scalar_code + 1, extra, *shape)
    return header.size


def unpack_header(buffer):
    """``(status, shape, dtype, kind, scalar_type, extra, length)`` from a header.

    ``buffer`` is a memoryview or bytes; ``length`` is the header's length
    in bytes (where data packed after it starts).
    """
    header = _HEADERS[buffer[_NDIM_OFFSET]]
    words = header.unpack_from(buffer)
    kind, scalar_code = divmod(words[3], 16)
    scalar_type = SCALAR_TYPES[scalar_code - 1] if scalar_code > 0 else None
    return words[0], words[5:], dtype_from_code(words[1]), kind, scalar_type, words[4], header.size


def write_inline(buffer, offset, data):
    """Copy the bytes of host array ``data`` into ``buffer`` at ``offset`` (after its
    header); returns where they end."""
    end = offset + data.nbytes
    buffer[offset:end] = data.tobytes()  # the cheapest copy for a few KiB
    return end


def read_inline(buffer, offset, data):
    """Fill ``data`` (a C-contiguous host array) with the bytes at ``offset`` of ``buffer``."""
    end = offset + data.nbytes
    if end == offset:
        return  # (no memoryview of an empty array can be cast)
    try:
        memoryview(data).cast("B")[:] = buffer[offset:end]  # the cheapest copy
    except ValueError:  # a 16-bit float has no buffer-protocol format: through NumPy
        data.reshape(-1).view(np.uint8)[...] = buffer[offset:end]
