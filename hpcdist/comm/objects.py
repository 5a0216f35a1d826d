"""Collectives on picklable Python objects (small metadata, not bulk arrays)."""

from .checks import agree
from .ops import parse_op, predefined_op
from .reductions import check_root

__all__ = ["allreduce_object", "broadcast_object", "allgather_object", "gather_object"]



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
    result = _run(ctx, "allreduce_object",
                  lambda: ctx.comm.allreduce(obj, op=predefined_op(op)), f"op={op}")
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
