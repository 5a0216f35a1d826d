"""Collectives on picklable Python objects (small metadata, not bulk arrays).

Each is one of mpi4py's pickling collectives, except ``allreduce_object``:
mpi4py's ``comm.allreduce`` of objects keeps the GIL while it waits for the
other ranks, which would stop every other thread of the rank (the stall
watchdog, an RPC service) for as long as a slow rank takes. It gathers the
values instead (mpi4py's ``allgather`` waits without the GIL) and combines
them in rank order, so every rank computes the same result.
"""

import functools
import operator

from .checks import agree
from .ops import parse_op
from .reductions import check_root

__all__ = ["allreduce_object", "broadcast_object", "allgather_object", "gather_object"]

_COMBINE = {"sum": operator.add, "mean": operator.add, "prod": operator.mul,
            "min": lambda a, b: b if b < a else a, "max": lambda a, b: b if b > a else a}


def _run(ctx, name, call, *fields):
    if ctx.check:
        agree(ctx, name, *fields)
    start = ctx._begin(name)
    try:
        return call()
    finally:
        ctx._end(name, start, 0, 0)


def allreduce_object(obj, op="sum", *, ctx):
    """Combine Python objects with ``+``, ``*``, ``min`` or ``max``; ``mean`` divides the sum.

    Parameters
    ----------
    obj : object
        Numbers, or anything whose ``+`` / ``*`` / comparison combine values.
    op : {"sum", "mean", "min", "max", "prod"} or ReduceOp, default="sum"
    ctx : Context
    """
    op = parse_op(op)
    if ctx.size == 1:
        return obj / 1 if op == "mean" else obj
    values = _run(ctx, "allreduce_object", lambda: ctx.comm.allgather(obj), f"op={op}")
    result = functools.reduce(_COMBINE[op], values)
    return result / ctx.size if op == "mean" else result


def broadcast_object(obj, root=0, *, ctx):
    """``root``'s ``obj`` on every rank (others pass anything, e.g. None)."""
    root = check_root(root, ctx, "broadcast_object")
    if ctx.size == 1:
        return obj
    return _run(ctx, "broadcast_object", lambda: ctx.comm.bcast(obj, root=root), f"root={root}")


def allgather_object(obj, *, ctx):
    """Every rank's ``obj`` as a list in rank order, on every rank."""
    if ctx.size == 1:
        return [obj]
    return _run(ctx, "allgather_object", lambda: ctx.comm.allgather(obj))


def gather_object(obj, root=0, *, ctx):
    """Every rank's ``obj`` as a list on ``root``; None elsewhere."""
    root = check_root(root, ctx, "gather_object")
    if ctx.size == 1:
        return [obj]
    return _run(ctx, "gather_object", lambda: ctx.comm.gather(obj, root=root), f"root={root}")
