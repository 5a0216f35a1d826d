"""Nonblocking operations: the :class:`Request` handle and the nonblocking collectives."""

import math

import numpy as np

from .calls import describe, resolve
from .checks import agree, watched
from .faults import raise_if_rank_failed
from .headers import BAD_INPUT, NO_INPUT
from .movement import (
    _describe_except,
    _exchange_rows,
    _from_rows,
    _raise_root_failure,
    _rows_first,
    _vector_spec,
    broadcast,
    gather_counts,
)
from .mpi import MPI
from .ops import reduction_of
from .reductions import _divide_for_mean, check_root

__all__ = ["Request", "iallreduce", "ibroadcast", "iallgather"]

# an ibroadcast receiver's status in the first exchange (the root's is below 0 when
# its input is bad: minus the header's NO_INPUT or BAD_INPUT)
_NEEDS_SHAPE, _HAS_SHAPE = 0, 1


class Request:
    """A pending operation.

    Call :meth:`wait` for its result, or poll :meth:`test`. Buffers stay
    referenced by the request until it completes.

    Parameters
    ----------
    ctx : Context
    name : str
        The operation, for statistics and the stall watchdog.
    requests : list of mpi4py.MPI.Request
    finish : callable
        Called once when the MPI requests are done; returns the result.
    nbytes : (int, int)
        Bytes sent and received, for statistics.
    """

    def __init__(self, ctx, name, requests, finish, nbytes=(0, 0)):
        self._ctx = ctx
        self._name = name
        self._requests = requests
        self._finish = finish
        self._nbytes = nbytes
        self._done = False
        self._result = None

    def _complete(self):
        self._result = self._finish()
        self._done = True
        self._requests = self._finish = None

    def test(self):
        """Whether the operation has completed (never blocks)."""
        try:
            if not self._done and MPI.Request.Testall(self._requests):
                self._complete()
        except MPI.Exception as exc:
            raise_if_rank_failed(self._ctx, exc, self._name)
            raise
        return self._done

    def wait(self):
        """Block until the operation has completed and return its result."""
        if not self._done:
            ctx = self._ctx
            start = ctx._begin(self._name)
            try:
                MPI.Request.Waitall(self._requests)
                self._complete()
            except MPI.Exception as exc:
                raise_if_rank_failed(ctx, exc, self._name)
                raise
            finally:
                ctx._end(self._name, start, *self._nbytes)
        return self._result

    @property
    def done(self):
        """Whether :meth:`wait` or :meth:`test` has seen the operation complete."""
        return self._done


class CompletedRequest(Request):
    """A request whose result is already known (size-1 contexts, sends to self)."""

    def __init__(self, ctx, name, result):
        super().__init__(ctx, name, [], lambda: result)
        self._complete()


def iallreduce(x, op="sum", *, out=None, ctx):
    """Start an allreduce; returns a :class:`Request` whose ``wait()`` gives the result.

    Parameters are those of :func:`hpcdist.allreduce` (the MPI library's
    algorithm is used). Do not touch ``x`` or ``out`` until the request
    completes.
    """
    call = resolve(x, ctx, "iallreduce", slot=None)
    data = call.data
    op, mpi_operation, mean = reduction_of(op, data.dtype)
    result, in_place = call.output_for(x, out, "iallreduce")
    if ctx.check:
        agree(ctx, "iallreduce", call.describe(), f"op={op}")
    if ctx.size == 1:
        if not in_place:
            call.copy_into(result, data)
        return CompletedRequest(ctx, "iallreduce", call.deliver(result, out))
    request = ctx.comm.Iallreduce(MPI.IN_PLACE if in_place else call.spec, call.spec_of(result),
                                  mpi_operation)

    def finish():
        if mean:
            _divide_for_mean(result, call, ctx.size)
        return call.deliver(result, out)

    return Request(ctx, "iallreduce", [request], finish, (data.nbytes, data.nbytes))


def ibroadcast(x, root=0, *, ctx):
    """Start a broadcast; returns a :class:`Request` whose ``wait()`` gives the result.

    Receivers passing an array get it filled in place. Receivers passing
    None learn the shape first, in the short blocking exchange where every
    rank also learns whether the root's input is good (bad input raises on
    every rank); then the data moves without blocking.
    """
    root = check_root(root, ctx, "ibroadcast")
    if ctx.size == 1:
        return CompletedRequest(ctx, "ibroadcast", broadcast(x, root, ctx=ctx))
    is_root = ctx.rank == root
    call = failure = None
    if is_root:
        try:
            if x is None:
                _raise_root_failure(NO_INPUT, root, "ibroadcast")
            call = resolve(x, ctx, "ibroadcast", slot=None)
            status = _HAS_SHAPE
        except (TypeError, ValueError) as error:
            failure = error
            status = -(NO_INPUT if x is None else BAD_INPUT)  # below every receiver's
    else:
        status = _HAS_SHAPE if x is not None else _NEEDS_SHAPE
    # every rank learns whether the root's input is good and whether some receiver
    # needs the shape, in one buffer allreduce (mpi4py's object allreduce would keep
    # the GIL while it waits)
    least = np.array([status], dtype=np.int8)
    with watched(ctx, "ibroadcast"):
        ctx._private_comm.Allreduce(MPI.IN_PLACE, least, op=MPI.MIN)
        if least[0] < 0:  # the root's input is bad: it tells every rank
            if is_root:
                raise failure
            _raise_root_failure(-least[0], root, "ibroadcast")
        if least[0] == _NEEDS_SHAPE:
            header = (call.data.shape, call.data.dtype.str) if is_root else None
            shape, dtype_str = ctx._private_comm.bcast(header, root=root)
            if x is None:
                x = np.empty(shape, dtype=np.dtype(dtype_str))
    if call is None:
        call = resolve(x, ctx, "ibroadcast", slot=None)
    data = call.data
    if ctx.check:
        agree(ctx, "ibroadcast", describe(data), f"root={root}")
    request = ctx.comm.Ibcast(call.spec, root=root)

    def finish():
        if is_root:
            return x
        delivered = call.deliver(data, out=None if isinstance(x, np.ndarray) else x)
        if isinstance(x, np.ndarray) and delivered is not x:
            x[...] = delivered
            return x
        return delivered

    nbytes = (data.nbytes, 0) if is_root else (0, data.nbytes)
    return Request(ctx, "ibroadcast", [request], finish, nbytes)


def iallgather(x, axis=0, *, counts=None, ctx):
    """Start an allgather; returns a :class:`Request` whose ``wait()`` gives the result.

    Without ``counts`` the sizes along ``axis`` are exchanged first (a
    short blocking step); the data itself moves without blocking.
    """
    call = resolve(x, ctx, "iallgather", slot=None)
    data, axis = _rows_first(call, axis, "iallgather")
    if counts is not None:
        counts = gather_counts(counts, data.shape[0], axis, ctx, "iallgather")
    if ctx.check:
        agree(ctx, "iallgather", _describe_except(data, axis), f"axis={axis}")
    if counts is None:
        counts = _exchange_rows(ctx, data, "iallgather", axis, ctx._begin("iallgather"))
        ctx._inflight = None  # only the size exchange blocked; wait() times the rest
    result = call.new_output((sum(counts),) + data.shape[1:], slot=None)
    if ctx.size == 1:
        call.copy_into(result, data)
        return CompletedRequest(ctx, "iallgather", call.deliver(_from_rows(result, axis)))
    row_size = math.prod(data.shape[1:])
    request = ctx.comm.Iallgatherv(call.spec, _vector_spec(result, counts, row_size))
    return Request(ctx, "iallgather", [request],
                   lambda: call.deliver(_from_rows(result, axis)),
                   (data.nbytes, result.nbytes))
