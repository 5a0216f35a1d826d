"""Reduction operations: names, MPI operations and local NumPy equivalents."""

import enum

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .dtypes import is_sixteen_bit_float
from .mpi import MPI
from .sixteen_bit_floats import half_sum_into

__all__ = ["ReduceOp", "parse_op", "predefined_op", "mpi_op", "local_reducer", "check_op_for_dtype",
           "reduction_of"]


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


# Internally an operation is its plain lower-case name: hashing a str is cheaper
# than hashing an Enum member, and this runs on every collective.
_BY_NAME = {op.value: op.value for op in ReduceOp}
_NUMPY_UFUNCS = {"sum": np.add, "mean": np.add, "prod": np.multiply, "min": np.minimum,
                 "max": np.maximum}
_BOOL_UFUNCS = {"sum": np.logical_or, "prod": np.logical_and, "min": np.logical_and,
                "max": np.logical_or}
# the names of MPI's own operations (looked up on first use: MPI loads then)
_MPI_OP_NAMES = {"sum": "SUM", "mean": "SUM", "prod": "PROD", "min": "MIN", "max": "MAX"}
_MPI_BOOL_OP_NAMES = {"sum": "LOR", "prod": "LAND", "min": "LAND", "max": "LOR"}
_USER_OPS = {}
_MPI_OP_CACHE = {}  # (op, dtype) -> MPI.Op, filled on first use


def predefined_op(op):
    """MPI's own operation for the :func:`parse_op` name ``op`` (``mean`` is ``MPI.SUM``)."""
    return getattr(MPI, _MPI_OP_NAMES[op])


def parse_op(op):
    """Turn ``op`` (a :class:`ReduceOp` or its name) into the operation's plain name.

    Raises
    ------
    ValueError
        When ``op`` names no reduction.
    """
    if type(op) is str and op in _BY_NAME:
        return op
    if isinstance(op, str) and op.lower() in _BY_NAME:  # ReduceOp members, "SUM"
        return _BY_NAME[op.lower()]
    raise InvalidArgumentError(f"op={op!r} is not a reduction; use one of "
                               f"{', '.join(repr(o.value) for o in ReduceOp)} or hpcdist.ReduceOp")


def check_op_for_dtype(op, dtype):
    """Raise ``TypeError`` when reduction ``op`` (a :func:`parse_op` name) has no meaning
    for ``dtype``."""
    kind = dtype.kind
    if op == "mean" and kind in "biu":
        raise InvalidArgumentTypeError(
            f"op='mean' is not defined for {dtype} (the mean of integers or "
            f"booleans is not of their dtype); use op='sum' and divide, or cast "
            f"to a floating dtype first")
    if kind == "c" and op in ("min", "max"):
        raise InvalidArgumentTypeError(f"op={op!r} is not defined for complex dtype {dtype}; "
                                       f"use 'sum', 'mean' or 'prod', or reduce the real parts")


def local_reducer(op, dtype):
    """The NumPy ufunc that combines two arrays of ``dtype`` the way ``op`` does.

    Parameters
    ----------
    op : str
        A name returned by :func:`parse_op`.
    dtype : numpy.dtype

    Returns
    -------
    numpy.ufunc
        Called as ``ufunc(a, b, out=b)``.
    """
    check_op_for_dtype(op, dtype)
    if dtype.kind == "b":
        return _BOOL_UFUNCS[op]
    return _NUMPY_UFUNCS[op]


def mpi_op(op, dtype):
    """The MPI operation that reduces ``dtype`` the way ``op`` does.

    ``op`` is a name returned by :func:`parse_op`. ``"mean"`` maps to a sum; the caller
    divides by the number of ranks.
    16-bit floats get user-defined operations that compute in floating
    point.

    Raises
    ------
    TypeError
        When ``op`` is not defined for ``dtype`` (mean of integers, min of
        complex numbers).
    """
    key = (op, dtype)
    mpi_operation = _MPI_OP_CACHE.get(key)
    if mpi_operation is None:
        check_op_for_dtype(op, dtype)
        if dtype.kind == "b":
            mpi_operation = getattr(MPI, _MPI_BOOL_OP_NAMES[op])
        elif is_sixteen_bit_float(dtype):
            mpi_operation = _sixteen_bit_op(op, dtype)
        else:
            mpi_operation = predefined_op(op)
        _MPI_OP_CACHE[key] = mpi_operation
    return mpi_operation


#: op as passed -> dtype -> (op name, MPI operation, whether to divide by the size)
_REDUCTIONS = {}


def reduction_of(op, dtype):
    """How a reduction ``op`` (a :class:`ReduceOp` or its name) reduces ``dtype``.

    Returns
    -------
    (str, mpi4py.MPI.Op, bool)
        The operation's plain name, the MPI operation, and whether the
        result is divided by the number of ranks (``mean``). Cached per
        ``(op, dtype)``.

    Raises
    ------
    ValueError
        When ``op`` names no reduction.
    TypeError
        When ``op`` is not defined for ``dtype``.
    """
    try:
        return _REDUCTIONS[op][dtype]
    except (KeyError, TypeError):  # not resolved yet, or an unhashable op
        pass
    name = parse_op(op)
    reduction = (name, mpi_op(name, dtype), name == "mean")
    _REDUCTIONS.setdefault(op, {})[dtype] = reduction
    return reduction


def _sixteen_bit_op(op, dtype):
    key = (op, dtype)
    mpi_operation = _USER_OPS.get(key)
    if mpi_operation is None:
        if op in ("sum", "mean"):  # the common case: a compiled kernel, same bits as NumPy's
            kind = "float16" if dtype == np.float16 else "bfloat16"

            def combine(inbuf, inoutbuf, datatype):
                half_sum_into(np.frombuffer(inbuf, dtype=np.uint16),
                              np.frombuffer(inoutbuf, dtype=np.uint16), kind)
        else:
            ufunc = _NUMPY_UFUNCS[op]

            def combine(inbuf, inoutbuf, datatype):
                incoming = np.frombuffer(inbuf, dtype=dtype)
                accumulated = np.frombuffer(inoutbuf, dtype=dtype)
                ufunc(incoming, accumulated, out=accumulated)

        mpi_operation = MPI.Op.Create(combine, commute=True)
        _USER_OPS[key] = mpi_operation
    return mpi_operation
