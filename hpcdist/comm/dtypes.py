"""NumPy dtypes as MPI datatypes.

Every NumPy dtype hpcdist supports maps to one MPI datatype. The 16-bit
floats (``float16`` and ml_dtypes' ``bfloat16``) have no portable predefined
MPI type, so they travel as private 2-byte types and are reduced by the
user-defined operations of :mod:`hpcdist.comm.ops`, never as integers.
"""

import numpy as np
from ml_dtypes import bfloat16

from ..exceptions import InvalidArgumentTypeError
from .mpi import MPI

__all__ = ["mpi_datatype", "SIXTEEN_BIT_FLOATS", "is_sixteen_bit_float", "check_dtype",
           "dtype_code", "dtype_from_code", "load_datatypes", "PREDEFINED_DATATYPES"]

#: dtypes reduced by hpcdist's own MPI operations
SIXTEEN_BIT_FLOATS = (np.dtype(np.float16), np.dtype(bfloat16))

# A table of every supported dtype; the index is the code sent in headers.
_SUPPORTED = [np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
    np.uint64, np.float16, np.float32, np.float64, np.longdouble, np.complex64,
    np.complex128, np.clongdouble, bfloat16)]
_CODES = {dt: i for i, dt in enumerate(_SUPPORTED)}
_PREDEFINED_NAMES = (
    (np.bool_, "C_BOOL"), (np.int8, "INT8_T"), (np.int16, "INT16_T"), (np.int32, "INT32_T"),
    (np.int64, "INT64_T"), (np.uint8, "UINT8_T"), (np.uint16, "UINT16_T"),
    (np.uint32, "UINT32_T"), (np.uint64, "UINT64_T"), (np.float32, "FLOAT"),
    (np.float64, "DOUBLE"), (np.longdouble, "LONG_DOUBLE"), (np.complex64, "C_FLOAT_COMPLEX"),
    (np.complex128, "C_DOUBLE_COMPLEX"), (np.clongdouble, "C_LONG_DOUBLE_COMPLEX"))
#: the predefined MPI type of every dtype MPI knows (16-bit floats get private types);
#: empty until :func:`load_datatypes` (every new Context calls it; MPI is loaded by then)
PREDEFINED_DATATYPES = {}
_DATATYPES = {}


def load_datatypes():
    """Fill :data:`PREDEFINED_DATATYPES` from MPI (once; loads MPI)."""
    if not PREDEFINED_DATATYPES:
        PREDEFINED_DATATYPES.update((np.dtype(numpy_type), getattr(MPI, name))
                                    for numpy_type, name in _PREDEFINED_NAMES)
        _DATATYPES.update(PREDEFINED_DATATYPES)


def check_dtype(dtype):
    """Raise ``TypeError`` unless hpcdist can communicate ``dtype``.

    Parameters
    ----------
    dtype : numpy.dtype
        The dtype to check.
    """
    if dtype not in _CODES:
        native = dtype.newbyteorder("=")
        if native != dtype and native in _CODES:
            raise InvalidArgumentTypeError(
                f"dtype {dtype.str} is {native} in the byte order opposite to this "
                f"machine's; convert with x.astype({native.name!r})")
        raise InvalidArgumentTypeError(
            f"dtype {dtype} is not supported by hpcdist collectives; use bool, an integer, "
            f"floating (float16, bfloat16, float32, float64, longdouble) or complex dtype "
            f"(convert with x.astype(...), or use the *_object collectives for Python objects)")


def is_sixteen_bit_float(dtype):
    """Whether ``dtype`` is float16 or bfloat16 (reduced by hpcdist's own ops)."""
    return dtype in SIXTEEN_BIT_FLOATS


def mpi_datatype(dtype):
    """The MPI datatype of one element of ``dtype``.

    Parameters
    ----------
    dtype : numpy.dtype
        A supported dtype (see :func:`check_dtype`).

    Returns
    -------
    mpi4py.MPI.Datatype
    """
    datatype = _DATATYPES.get(dtype)
    if datatype is None and not PREDEFINED_DATATYPES:
        load_datatypes()
        datatype = _DATATYPES.get(dtype)
    if datatype is None:
        check_dtype(dtype)
        # a private committed copy of a 2-byte type: only hpcdist's own operations reduce it
        datatype = MPI.UINT16_T.Dup().Commit()
        _DATATYPES[dtype] = datatype
    return datatype


def dtype_code(dtype):
    """A small integer naming ``dtype`` in message headers."""
    code = _CODES.get(dtype)
    if code is None:
        check_dtype(dtype)
    return code


def dtype_from_code(code):
    """The dtype named by :func:`dtype_code`."""
    return _SUPPORTED[code]
