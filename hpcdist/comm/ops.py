"""Reduction operations: names, MPI operations and local NumPy equivalents."""

import enum

import numpy as np
from mpi4py import MPI

from .dtypes import is_sixteen_bit_float

__all__ = ["ReduceOp", "parse_op", "mpi_op", "local_reducer"]


class ReduceOp(str, enum.Enum):
    """How a reduction combines the ranks' values.

    The members compare equal to their lower-case names, so ``"sum"`` and
    ``ReduceOp.SUM`` are interchangeable everywhere.
    """

    SUM = "sum"
    MEAN = "mean"
    MIN = "min"
    MAX = "max"
    PROD = "prod"

    def __str__(self):
        return self.value


_BY_NAME = {op.value: op for op in ReduceOp}
_NUMPY_UFUNCS = {ReduceOp.SUM: np.add, ReduceOp.MEAN: np.add, ReduceOp.PROD: np.multiply,
                 ReduceOp.MIN: np.minimum, ReduceOp.MAX: np.maximum}
_BOOL_UFUNCS = {ReduceOp.SUM: np.logical_or, ReduceOp.PROD: np.logical_and,
                ReduceOp.MIN: np.logical_and, ReduceOp.MAX: np.logical_or}
_MPI_OPS = {ReduceOp.SUM: MPI.SUM, ReduceOp.MEAN: MPI.SUM, ReduceOp.PROD: MPI.PROD,
            ReduceOp.MIN: MPI.MIN, ReduceOp.MAX: MPI.MAX}
_MPI_BOOL_OPS = {ReduceOp.SUM: MPI.LOR, ReduceOp.PROD: MPI.LAND, ReduceOp.MIN: MPI.LAND,
                 ReduceOp.MAX: MPI.LOR}
_USER_OPS = {}


def parse_op(op):
    """Turn ``op`` (a :class:`ReduceOp` or its name) into a :class:`ReduceOp`.

    Raises
    ------
    ValueError
        When ``op`` names no reduction.
    """
    try:
        return _BY_NAME[op]
    except (KeyError, TypeError):
        pass
    if isinstance(op, str) and op.lower() in _BY_NAME:
        return _BY_NAME[op.lower()]
    raise ValueError(f"op={op!r} is not a reduction; use one of "
                     f"{', '.join(repr(o.value) for o in ReduceOp)} or hpcdist.ReduceOp")


def _check_op_for_dtype(op, dtype):
    kind = dtype.kind
    if op is ReduceOp.MEAN and kind in "biu":
        raise TypeError(f"op='mean' is not defined for {dtype} (the mean of integers or "
                        f"booleans is not of their dtype); use op='sum' and divide, or cast "
                        f"to a floating dtype first")
    if kind == "c" and op in (ReduceOp.MIN, ReduceOp.MAX):
        raise TypeError(f"op={op.value!r} is not defined for complex dtype {dtype}; "
                        f"use 'sum', 'mean' or 'prod', or reduce the real parts")


def local_reducer(op, dtype):
    """The NumPy ufunc that combines two arrays of ``dtype`` the way ``op`` does.

    Parameters
    ----------
    op : ReduceOp
    dtype : numpy.dtype

    Returns
    -------
    numpy.ufunc
        Called as ``ufunc(a, b, out=b)``.
    """
    _check_op_for_dtype(op, dtype)
    if dtype.kind == "b":
        return _BOOL_UFUNCS[op]
    return _NUMPY_UFUNCS[op]


def mpi_op(op, dtype):
    """The MPI operation that reduces ``dtype`` the way ``op`` does.

    ``MEAN`` maps to a sum; the caller divides by the number of ranks.
    16-bit floats get user-defined operations that compute in floating
    point.

    Raises
    ------
    TypeError
        When ``op`` is not defined for ``dtype`` (mean of integers, min of
        complex numbers).
    """
    _check_op_for_dtype(op, dtype)
    if dtype.kind == "b":
        return _MPI_BOOL_OPS[op]
    if is_sixteen_bit_float(dtype):
        return _sixteen_bit_op(op, dtype)
    return _MPI_OPS[op]


def _sixteen_bit_op(op, dtype):
    key = (op, dtype)
    mpi_operation = _USER_OPS.get(key)
    if mpi_operation is None:
        ufunc = _NUMPY_UFUNCS[op]

        def combine(inbuf, inoutbuf, datatype):
            incoming = np.frombuffer(inbuf, dtype=dtype)
            accumulated = np.frombuffer(inoutbuf, dtype=dtype)
            ufunc(incoming, accumulated, out=accumulated)

        mpi_operation = MPI.Op.Create(combine, commute=True)
        _USER_OPS[key] = mpi_operation
    return mpi_operation
