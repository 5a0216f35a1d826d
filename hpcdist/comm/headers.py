"""Small fixed-size headers that describe arrays between ranks.

Collectives whose receivers do not know the incoming shape (broadcast to
None, point-to-point receives) send a header first: a status word, the
dtype code, the number of dimensions, the kind of object (array, Python or
NumPy scalar, device array), one free word, and the shape. Headers are
packed with :mod:`struct` straight into the message buffer, which costs far
less than NumPy element assignments on the small-message path.
"""

import struct

from ..exceptions import InvalidArgumentError
from .dtypes import dtype_code, dtype_from_code

__all__ = ["HEADER_BYTES", "MAX_DIMS", "OK", "NO_INPUT", "BAD_INPUT", "pack_header",
           "unpack_header", "SCALAR_TYPES"]

MAX_DIMS = 32
_FIXED = struct.Struct("<5q")
_SHAPES = [struct.Struct(f"<{ndim}q") for ndim in range(MAX_DIMS + 1)]
HEADER_BYTES = _FIXED.size + _SHAPES[MAX_DIMS].size
# status words
OK, NO_INPUT, BAD_INPUT = 0, 1, 2
#: Python scalar types by code (index), so a receiver can rebuild the sender's scalar
SCALAR_TYPES = (bool, int, float, complex)


def pack_header(buffer, status, array=None, kind=0, scalar_code=-1, extra=0):
    """Write a header describing ``array`` at the start of ``buffer``.

    Parameters
    ----------
    buffer : writable buffer of at least HEADER_BYTES bytes
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
    """
    if array is None:
        _FIXED.pack_into(buffer, 0, status, 0, 0, 0, extra)
        return
    shape = array.shape
    if len(shape) > MAX_DIMS:
        raise InvalidArgumentError(f"arrays of more than {MAX_DIMS} dimensions are not supported "
                                   f"(got {len(shape)}); reshape first")
    _FIXED.pack_into(buffer, 0, status, dtype_code(array.dtype), len(shape),
                     kind * 16 + scalar_code + 1, extra)
    _SHAPES[len(shape)].pack_into(buffer, _FIXED.size, *shape)


def unpack_header(buffer):
    """``(status, shape, dtype, kind, scalar_type, extra)`` from a header."""
    status, code, ndim, kind_code, extra = _FIXED.unpack_from(buffer, 0)
    kind, scalar_code = divmod(kind_code, 16)
    shape = _SHAPES[ndim].unpack_from(buffer, _FIXED.size)
    scalar_type = SCALAR_TYPES[scalar_code - 1] if scalar_code > 0 else None
    return status, shape, dtype_from_code(code), kind, scalar_type, extra
