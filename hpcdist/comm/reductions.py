"""Reductions: allreduce, reduce and reduce_scatter."""

import math

import numpy as np

from .._checks import is_integer
from .._partition import balanced_counts, validate_counts
from ..exceptions import InvalidArgumentError
from .algorithms import ALGORITHMS
from .calls import DEVICE_DIRECT, HOST, resolve
from .checks import agree
from .mpi import MPI
from .ops import reduction_of

__all__ = ["allreduce", "reduce", "reduce_scatter", "check_root"]

_ALGORITHM_NAMES = ("auto",) + tuple(ALGORITHMS)


def check_root(root, ctx, name):
    """Return ``root`` as an int, or raise ``ValueError`` when it is not a rank."""
    if type(root) is int and 0 <= root < ctx.size:
        return root
    if is_integer(root) and 0 <= root < ctx.size:
        return int(root)
    raise InvalidArgumentError(f"{name}: root={root!r} is not a rank of this context; "
                               f"use 0..{ctx.size - 1}")


def _divide_for_mean(result, call, size):
    if call.kind == DEVICE_DIRECT:
        call.backend.divide_(result, size)
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
    call = resolve(x, ctx, "allreduce")
    data = call.data
    op, mpi_operation, mean = reduction_of(op, data.dtype)
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise InvalidArgumentError(f"allreduce: algorithm={algorithm!r} is unknown; use one of "
                                   f"{', '.join(map(repr, _ALGORITHM_NAMES))}")
    if out is None and call.kind == HOST:
        result, in_place = np.empty(data.shape, data.dtype), False
    else:
        result, in_place = call.output_for(x, out, "allreduce")
    if ctx.check:
        agree(ctx, "allreduce", call.describe(), f"op={op}", f"algorithm={algorithm}")
    start = ctx._begin("allreduce", call)
    size = ctx.size
    if size == 1:
        if not in_place:
            call.copy_into(result, data)
    elif algorithm == "auto":
        spec = call.spec
        ctx.comm.Allreduce(MPI.IN_PLACE if in_place else spec,
                           (result, spec[1]) if spec[0] is data else call.spec_of(result),
                           mpi_operation)
    else:
        _explicit_allreduce(ctx, call, data, result, op, algorithm)
    if mean and size > 1:
        _divide_for_mean(result, call, size)
    ctx._end("allreduce", start, data.nbytes, data.nbytes)
    return result if call.kind == HOST and out is None else call.deliver(result, out)


def _explicit_allreduce(ctx, call, data, result, op, algorithm):
    if call.kind != DEVICE_DIRECT:
        ALGORITHMS[algorithm](ctx, data, result, op)
        return
    # hpcdist's algorithms reduce with NumPy: run them on a host copy
    host = np.empty(data.shape, dtype=data.dtype)
    call.backend.to_host(data, host)
    ALGORITHMS[algorithm](ctx, host, host, op)
    call.backend.from_host(host, out=result)


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
    root = check_root(root, ctx, "reduce")
    call = resolve(x, ctx, "reduce")
    data = call.data
    op, mpi_operation, mean = reduction_of(op, data.dtype)
    is_root = ctx.rank == root
    result = call.new_output(data.shape) if is_root else None
    if ctx.check:
        agree(ctx, "reduce", call.describe(), f"op={op}", f"root={root}")
    start = ctx._begin("reduce", call, root)
    if ctx.size == 1:
        call.copy_into(result, data)
    else:
        ctx.comm.Reduce(call.spec, call.spec_of(result) if is_root else None, mpi_operation,
                        root=root)
        if is_root and mean:
            _divide_for_mean(result, call, ctx.size)
    ctx._end("reduce", start, data.nbytes, data.nbytes if is_root else 0)
    return call.deliver(result)


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
    call = resolve(x, ctx, "reduce_scatter")
    data = call.data
    if data.ndim == 0:
        raise InvalidArgumentError(
            "reduce_scatter: x must have at least one dimension to split along axis 0")
    op, mpi_operation, mean = reduction_of(op, data.dtype)
    rows = data.shape[0]
    counts = (balanced_counts(rows, ctx.size) if counts is None
              else validate_counts(counts, ctx.size, rows, "reduce_scatter"))
    row_size = math.prod(data.shape[1:])
    result = call.new_output((counts[ctx.rank],) + data.shape[1:])
    if ctx.check:
        agree(ctx, "reduce_scatter", call.describe(), f"op={op}", f"counts={counts}")
    start = ctx._begin("reduce_scatter", call)
    if ctx.size == 1:
        call.copy_into(result, data)
    else:
        ctx.comm.Reduce_scatter(call.spec, call.spec_of(result), [c * row_size for c in counts],
                                mpi_operation)
        if mean:
            _divide_for_mean(result, call, ctx.size)
    ctx._end("reduce_scatter", start, data.nbytes, result.nbytes)
    return call.deliver(result)
