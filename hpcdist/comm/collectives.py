"""The collectives as module-level functions: ``hpcdist.allreduce(x, ctx=None)``.

Each calls the same implementation as the :class:`~hpcdist.comm.context.Context`
method of the same name, on ``ctx`` or else the default context.
"""

from . import movement, neighbors, objects, p2p, reductions, requests
from .context import documented_by
from .default import resolve_context
from .faults import raise_if_rank_failed
from .mpi import MPI

__all__ = ["allreduce", "reduce", "reduce_scatter", "broadcast", "allgather", "gather",
           "scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce", "ibroadcast",
           "iallgather", "allreduce_object", "broadcast_object", "allgather_object",
           "gather_object", "neighbor_allgather"]


@documented_by(reductions.allreduce)
def allreduce(x, op="sum", *, out=None, algorithm="auto", ctx=None):
    ctx = resolve_context(ctx)
    try:
        return reductions.allreduce(x, op, out=out, algorithm=algorithm, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "allreduce")
        raise


@documented_by(reductions.reduce)
def reduce(x, op="sum", *, root=0, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return reductions.reduce(x, op, root=root, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "reduce")
        raise


@documented_by(reductions.reduce_scatter)
def reduce_scatter(x, op="sum", counts=None, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return reductions.reduce_scatter(x, op, counts, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "reduce_scatter")
        raise


@documented_by(movement.broadcast)
def broadcast(x, root=0, *, shape_known=False, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return movement.broadcast(x, root, shape_known=shape_known, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "broadcast")
        raise


@documented_by(movement.allgather)
def allgather(x, axis=0, *, counts=None, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return movement.allgather(x, axis, counts=counts, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "allgather")
        raise


@documented_by(movement.gather)
def gather(x, root=0, axis=0, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return movement.gather(x, root, axis, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "gather")
        raise


@documented_by(movement.scatter)
def scatter(x, root=0, axis=0, counts=None, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return movement.scatter(x, root, axis, counts, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "scatter")
        raise


@documented_by(movement.alltoall)
def alltoall(x, counts=None, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return movement.alltoall(x, counts, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "alltoall")
        raise


@documented_by(neighbors.neighbor_allgather)
def neighbor_allgather(x, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return neighbors.neighbor_allgather(x, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "neighbor_allgather")
        raise


@documented_by(p2p.send)
def send(x, dest, tag=0, *, shape_known=False, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return p2p.send(x, dest, tag, shape_known=shape_known, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "send")
        raise


@documented_by(p2p.recv)
def recv(source=p2p.ANY_SOURCE, tag=p2p.ANY_TAG, out=None, *, shape_known=False, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return p2p.recv(source, tag, out, shape_known=shape_known, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "recv")
        raise


@documented_by(p2p.isend)
def isend(x, dest, tag=0, *, shape_known=False, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return p2p.isend(x, dest, tag, shape_known=shape_known, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "isend")
        raise


@documented_by(p2p.irecv)
def irecv(source=p2p.ANY_SOURCE, tag=p2p.ANY_TAG, out=None, *, shape_known=False, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return p2p.irecv(source, tag, out, shape_known=shape_known, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "irecv")
        raise


@documented_by(requests.iallreduce)
def iallreduce(x, op="sum", *, out=None, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return requests.iallreduce(x, op, out=out, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "iallreduce")
        raise


@documented_by(requests.ibroadcast)
def ibroadcast(x, root=0, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return requests.ibroadcast(x, root, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "ibroadcast")
        raise


@documented_by(requests.iallgather)
def iallgather(x, axis=0, *, counts=None, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return requests.iallgather(x, axis, counts=counts, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "iallgather")
        raise


@documented_by(objects.allreduce_object)
def allreduce_object(obj, op="sum", *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return objects.allreduce_object(obj, op, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "allreduce_object")
        raise


@documented_by(objects.broadcast_object)
def broadcast_object(obj, root=0, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return objects.broadcast_object(obj, root, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "broadcast_object")
        raise


@documented_by(objects.allgather_object)
def allgather_object(obj, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return objects.allgather_object(obj, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "allgather_object")
        raise


@documented_by(objects.gather_object)
def gather_object(obj, root=0, *, ctx=None):
    ctx = resolve_context(ctx)
    try:
        return objects.gather_object(obj, root, ctx=ctx)
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, "gather_object")
        raise
