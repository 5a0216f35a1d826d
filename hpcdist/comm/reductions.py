"""Reductions: allreduce, reduce and reduce_scatter."""

import math
from time import perf_counter as _perf_counter

import numpy as np

from .._partition import balanced_counts, validate_counts
from .algorithms import ALGORITHMS
from .buffers import DEVICE_DIRECT, HOST, describe, mpi_buffer, output_for, wrap
from .checks import agree
from .dtypes import is_sixteen_bit_float
from .mpi import MPI
from .ops import mpi_op, parse_op

__all__ = ["allreduce", "reduce", "reduce_scatter", "check_root"]

_ALGORITHM_NAMES = ("auto",) + tuple(ALGORITHMS)


def check_root(root, ctx, name):
    """Return ``root`` as an int, or raise ``ValueError`` when it is not a rank."""
    if type(root) is int and 0 <= root < ctx.size:
        return root
    if isinstance(root, (int, np.integer)) and 0 <= root < ctx.size:
        return int(root)
    raise ValueError(f"{name}: root={root!r} is not a rank of this context; "
                     f"use 0..{ctx.size - 1}")


def _divide_for_mean(result, payload, size):
    if payload.kind == DEVICE_DIRECT:
        payload.backend.divide_(result, size)
    else:
        np.true_divide(result, size, out=result)


def allreduce(x, op="sum", *, out=None, algorithm="auto", ctx):
    """Combine ``x`` from every rank; every rank gets the result.

    Parameters
    ----------
    x : array or scalar
        This rank's contribution (NumPy or device array, Python or NumPy scalar).
    op : {"sum", "mean", "min", "max", "prod"} or ReduceOp, default="sum"
    out : array, optional
        Where to put the result (same shape and dtype as ``x``); ``out=x``
        reduces in place.
    algorithm : {"auto", "ring", "tree", "hierarchical"}, default="auto"
        ``"auto"`` uses the MPI library's own allreduce; the others are
        hpcdist's implementations (equal up to floating-point reassociation).
    ctx : Context

    Returns
    -------
    array or scalar
        The same kind of object as ``x``: ``out`` when given, else a new array.

    Examples
    --------
    >>> total = hpcdist.allreduce(np.ones(4), op="sum")   # doctest: +SKIP
    """
    if type(x) is np.ndarray and algorithm == "auto" and not ctx.check:
        # fast path: a combination the general path below has already validated
        try:
            fast = _FAST_PATHS[op][x.dtype]
        except (KeyError, TypeError):  # not validated yet, or an unhashable op
            fast = None
        if fast is not None and x.flags.c_contiguous:
            if out is None:
                result = np.empty_like(x)
            elif (type(out) is np.ndarray and out.dtype is x.dtype and out.shape == x.shape
                  and out.flags.c_contiguous):
                result = out
            else:
                result = None  # the general path handles (or rejects) this out
            if result is not None:
                datatype, mpi_operation, mean = fast
                ctx._inflight_name = "allreduce"  # ctx._begin, inlined on this hot path
                ctx._inflight_since = start = _perf_counter()
                if ctx.size > 1:
                    ctx.comm.Allreduce(MPI.IN_PLACE if result is x else (x, datatype),
                                       (result, datatype), mpi_operation)
                    if mean:
                        np.true_divide(result, ctx.size, out=result)
                elif result is not x:
                    result[...] = x
                ctx._end("allreduce", start, x.nbytes, x.nbytes)
                return result
    op = parse_op(op)
    if algorithm not in _ALGORITHM_NAMES:
        raise ValueError(f"allreduce: algorithm={algorithm!r} is unknown; use one of "
                         f"{', '.join(map(repr, _ALGORITHM_NAMES))}")
    payload = wrap(x, ctx, "allreduce")
    data = payload.data
    mpi_operation = mpi_op(op, data.dtype)
    result, in_place = output_for(payload, x, out, "allreduce")
    if ctx.check:
        agree(ctx, "allreduce", describe(data), f"op={op}", f"algorithm={algorithm}")
    start = ctx._begin("allreduce")
    size = ctx.size
    if size == 1:
        if not in_place:
            payload.copy_into(result, data)
    elif algorithm == "auto":
        ctx.comm.Allreduce(MPI.IN_PLACE if in_place else mpi_buffer(data),
                           mpi_buffer(result), mpi_operation)
    else:
        _explicit_allreduce(ctx, payload, data, result, op, algorithm)
    if op == "mean" and size > 1:
        _divide_for_mean(result, payload, size)
    ctx._end("allreduce", start, data.nbytes, data.nbytes)
    if payload.kind == HOST and not is_sixteen_bit_float(data.dtype):
        _FAST_PATHS.setdefault(op, {})[data.dtype] = (mpi_buffer(data)[1], mpi_operation,
                                                      op == "mean")
    return payload.deliver(result, out)


# op name -> dtype -> (MPI datatype, MPI op, divide by size) for host arrays: filled by
# the general path, so the fast path only ever repeats a combination validated there
_FAST_PATHS = {}


def _explicit_allreduce(ctx, payload, data, result, op, algorithm):
    if payload.kind != DEVICE_DIRECT:
        ALGORITHMS[algorithm](ctx, data, result, op)
        return
    # hpcdist's algorithms reduce with NumPy: run them on a host copy
    host = np.empty(data.shape, dtype=data.dtype)
    payload.backend.to_host(data, host)
    ALGORITHMS[algorithm](ctx, host, host, op)
    payload.backend.from_host(host, out=result)


def reduce(x, op="sum", *, root=0, ctx):
    """Combine ``x`` from every rank onto ``root``.

    Parameters
    ----------
    x : array or scalar
    op : {"sum", "mean", "min", "max", "prod"} or ReduceOp, default="sum"
    root : int, default=0
    ctx : Context

    Returns
    -------
    array, scalar or None
        The result on ``root``; None on the other ranks.
    """
    op = parse_op(op)
    root = check_root(root, ctx, "reduce")
    payload = wrap(x, ctx, "reduce")
    data = payload.data
    mpi_operation = mpi_op(op, data.dtype)
    is_root = ctx.rank == root
    result = payload.new_output(data.shape, data.dtype) if is_root else None
    if ctx.check:
        agree(ctx, "reduce", describe(data), f"op={op}", f"root={root}")
    start = ctx._begin("reduce")
    if ctx.size == 1:
        payload.copy_into(result, data)
    else:
        ctx.comm.Reduce(mpi_buffer(data), mpi_buffer(result) if is_root else None,
                        mpi_operation, root=root)
        if is_root and op == "mean":
            _divide_for_mean(result, payload, ctx.size)
    ctx._end("reduce", start, data.nbytes, data.nbytes if is_root else 0)
    return payload.deliver(result)


def reduce_scatter(x, op="sum", counts=None, *, ctx):
    """Reduce ``x`` over ranks and give rank ``r`` block ``r`` along axis 0.

    Parameters
    ----------
    x : array of shape (n, ...)
        The same shape on every rank.
    op : {"sum", "mean", "min", "max", "prod"} or ReduceOp, default="sum"
    counts : sequence of int, optional
        Rows of each rank's block (default: balanced, the first ``n % size``
        ranks get one more).
    ctx : Context

    Returns
    -------
    array of shape (counts[rank], ...)
    """
    op = parse_op(op)
    payload = wrap(x, ctx, "reduce_scatter")
    data = payload.data
    if data.ndim == 0:
        raise ValueError("reduce_scatter: x must have at least one dimension to split along axis 0")
    mpi_operation = mpi_op(op, data.dtype)
    rows = data.shape[0]
    counts = (balanced_counts(rows, ctx.size) if counts is None
              else validate_counts(counts, ctx.size, rows, "reduce_scatter"))
    row_size = math.prod(data.shape[1:])
    result = payload.new_output((counts[ctx.rank],) + data.shape[1:], data.dtype)
    if ctx.check:
        agree(ctx, "reduce_scatter", describe(data), f"op={op}", f"counts={counts}")
    start = ctx._begin("reduce_scatter")
    if ctx.size == 1:
        payload.copy_into(result, data)
    else:
        ctx.comm.Reduce_scatter(mpi_buffer(data), mpi_buffer(result),
                                [c * row_size for c in counts], mpi_operation)
        if op == "mean":
            _divide_for_mean(result, payload, ctx.size)
    ctx._end("reduce_scatter", start, data.nbytes, result.nbytes)
    return payload.deliver(result)
