"""Small fixed-size integer headers that describe arrays between ranks.

Collectives whose receivers do not know the incoming shape (broadcast to
None, gathers of uneven sizes, point-to-point receives) first exchange one
header per array: a status word, the dtype code, the kind of object
(array, Python or NumPy scalar, device array) and the shape.
"""

import numpy as np

from .dtypes import dtype_code, dtype_from_code

__all__ = ["HEADER_WORDS", "MAX_DIMS", "OK", "NO_INPUT", "BAD_INPUT", "pack_header",
           "unpack_header", "header_array", "SCALAR_TYPES"]

MAX_DIMS = 32
HEADER_WORDS = 5 + MAX_DIMS
# status words
OK, NO_INPUT, BAD_INPUT = 0, 1, 2
#: Python scalar types by code (index), so a receiver can rebuild the sender's scalar
SCALAR_TYPES = (bool, int, float, complex)


def header_array():
    """An empty header buffer."""
    return np.zeros(HEADER_WORDS, dtype=np.int64)


def pack_header(out, status, array=None, kind=0, scalar_code=-1, extra=0):
    """Fill header ``out`` describing ``array``.

    Parameters
    ----------
    out : ndarray of int64, shape (HEADER_WORDS,)
    status : int
        ``OK``, ``NO_INPUT`` or ``BAD_INPUT``.
    array : array, optional
        The array described (shape and dtype).
    kind : int
        The :class:`~hpcdist.comm.buffers.Payload` kind of the sender's object.
    scalar_code : int
        Index into :data:`SCALAR_TYPES` for a Python scalar, else -1.
    extra : int
        One free word for the caller (e.g. whether data follows inline).
    """
    if array is None:
        out[:5] = (status, 0, 0, 0, 0)
        return out
    ndim = array.ndim
    if ndim > MAX_DIMS:
        raise ValueError(f"arrays of more than {MAX_DIMS} dimensions are not supported "
                         f"(got {ndim}); reshape first")
    out[:5 + ndim] = (status, dtype_code(array.dtype), ndim, kind * 16 + scalar_code + 1,
                      extra) + tuple(array.shape)
    return out


def unpack_header(header):
    """``(status, shape, dtype, kind, scalar_type, extra)`` from a header."""
    status, code, ndim, kind_code, extra = header[:5].tolist()
    kind, scalar_code = divmod(kind_code, 16)
    shape = tuple(header[5:5 + ndim].tolist())
    scalar_type = SCALAR_TYPES[scalar_code - 1] if scalar_code > 0 else None
    return status, shape, dtype_from_code(code), kind, scalar_type, extra
