"""Point-to-point messages: send, recv, isend and irecv of arrays of any shape.

Each message is a header (dtype, shape, kind) followed by the data. Arrays
of up to 4 KiB ride inside the header's message, so a small send is one
MPI message; larger ones follow in a second message straight into the
receiver's buffer. With ``shape_known=True`` on both sides (the receiver
passes ``out`` of the sender's shape and dtype) the raw buffer travels alone:
one ``Send``/``Recv``, no header and no probe. Check mode keeps the header
then, and the receiver verifies the promise.
"""

import math

import numpy as np

from .._checks import is_integer
from ..exceptions import CollectiveMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from .calls import (
    DEVICE_DIRECT,
    describe,
    describe_shape,
    refuse_read_only,
    resolve,
    resolve_receiver,
    spec_of,
)
from .headers import HEADER_BYTES, OK, pack_header, read_inline, unpack_header, write_inline
from .mpi import MPI
from .requests import Request

__all__ = ["send", "recv", "isend", "irecv", "ANY_SOURCE", "ANY_TAG"]


class _Wildcard:
    """``ANY_SOURCE`` or ``ANY_TAG``: MPI's wildcard, whose value each MPI library
    chooses, named without loading MPI."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"hpcdist.{self.name}"

    def __reduce__(self):
        return self.name


ANY_SOURCE = _Wildcard("ANY_SOURCE")
ANY_TAG = _Wildcard("ANY_TAG")
_INLINE_BYTES = 4096  # larger payloads go in a message of their own: copying them costs more
_FIRST_BYTES = HEADER_BYTES + _INLINE_BYTES  # the largest first message
_MAX_TAG = 32767  # the least upper bound MPI guarantees


class _Packets:
    """A context's reusable buffers for blocking self-describing messages: the first
    message (header and inline data) sent and received, and a status."""

    __slots__ = ("send", "receive", "status")

    def __init__(self):
        self.send = memoryview(bytearray(_FIRST_BYTES))
        self.receive = memoryview(bytearray(_FIRST_BYTES))
        self.status = MPI.Status()


def _packets_of(ctx):
    packets = ctx._p2p_packets
    if packets is None:
        packets = ctx._p2p_packets = _Packets()
    return packets


def _check_peer(peer, ctx, name, argument):
    """``peer`` as an int, or raise naming it when it is not a rank of ``ctx``."""
    if is_integer(peer) and 0 <= peer < ctx.size:
        return int(peer)
    raise InvalidArgumentError(f"{name}: {argument}={peer!r} is not a rank of this context; "
                               f"use 0..{ctx.size - 1}")


def _check_tag(tag, name):
    """``tag`` as an int, or raise naming it when MPI does not take it."""
    if is_integer(tag) and 0 <= tag <= _MAX_TAG:
        return int(tag)
    raise InvalidArgumentError(f"{name}: tag={tag!r} should be an integer in 0..{_MAX_TAG}")


def _pack_first(buffer, call):
    """Pack ``call``'s first message into ``buffer``: its header and, for small host
    data, the data. Returns the message's length and whether the data rode inline."""
    data = call.data
    inline = call.kind != DEVICE_DIRECT and data.nbytes <= _INLINE_BYTES
    end = pack_header(buffer, OK, data, call.kind, call.scalar_code, inline)
    return (write_inline(buffer, end, data) if inline else end), inline


#: what a ``shape_known=True`` sender and receiver pass
_SEND_FIX = ("pass an array of the shape and dtype the receiver expects, or use "
             "shape_known=False")
_RECEIVE_FIX = "pass out=, an array of the sender's shape and dtype (or use shape_known=False)"


def send(x, dest, tag=0, *, shape_known=False, ctx):
    """Send ``x`` (array or scalar, any shape and dtype) to rank ``dest``.

    Parameters
    ----------
    x : array or scalar
    dest : int
    tag : int, default=0
    shape_known : bool, default=False
        Promise that the receiver calls ``recv(..., out=buf, shape_known=True)``
        with ``buf`` of ``x``'s shape and dtype: the raw buffer is sent alone,
        one MPI message and no probe. Check mode still sends the header, and
        the receiver verifies the promise.
    ctx : Context
    """
    if type(dest) is not int or not 0 <= dest < ctx.size:
        dest = _check_peer(dest, ctx, "send", "dest")
    if type(tag) is not int or not 0 <= tag <= _MAX_TAG:
        tag = _check_tag(tag, "send")
    if shape_known and not ctx.check:
        call = resolve(x, ctx, "send", slot=None, array_fix=_SEND_FIX)
        start = ctx._begin("send", call, dest)
        try:
            ctx.comm.Send(call.spec, dest, tag)
        finally:
            ctx._end("send", start, call.data.nbytes, 0)
        return
    call = resolve(x, ctx, "send")
    packet = (ctx._p2p_packets or _packets_of(ctx)).send
    length, inline = _pack_first(packet, call)
    start = ctx._begin("send", call, dest)
    try:
        ctx.comm.Send(packet[:length], dest, tag)
        if not inline:
            ctx.comm.Send(call.spec, dest, tag)
    finally:
        ctx._end("send", start, call.data.nbytes, 0)


def isend(x, dest, tag=0, *, shape_known=False, ctx):
    """Start sending ``x`` to ``dest``; returns a :class:`Request` (``wait()`` gives None).

    ``shape_known`` as for :func:`send`.
    """
    if type(dest) is not int or not 0 <= dest < ctx.size:
        dest = _check_peer(dest, ctx, "isend", "dest")
    if type(tag) is not int or not 0 <= tag <= _MAX_TAG:
        tag = _check_tag(tag, "isend")
    if shape_known and not ctx.check:
        call = resolve(x, ctx, "isend", slot=None, array_fix=_SEND_FIX)
        return Request(ctx, "isend", [ctx.comm.Isend(call.spec, dest, tag)],
                       lambda: call and None, (call.data.nbytes, 0))
    call = resolve(x, ctx, "isend", slot=None)
    first = memoryview(bytearray(_FIRST_BYTES))  # the message's own: it is in flight
    length, inline = _pack_first(first, call)
    requests = [ctx.comm.Isend(first[:length], dest, tag)]
    if not inline:
        requests.append(ctx.comm.Isend(call.spec, dest, tag))
    keep_alive = (first, call)
    return Request(ctx, "isend", requests, lambda: keep_alive and None, (call.data.nbytes, 0))


def _receive_matched(message, status, out, ctx, name, shape_known=False):
    """Receive a matched first ``message`` and what follows it; returns (result, nbytes)."""
    first = memoryview(bytearray(status.Get_count(MPI.BYTE)))
    message.Recv(first)
    return _finish_receive(first, status, out, ctx, name, shape_known)


def _finish_receive(first, status, out, ctx, name, shape_known=False):
    """Unpack a received ``first`` message (a memoryview), place its inline data or
    receive the data message that follows it; returns (result, nbytes).

    ``shape_known`` (check mode): the sender promised ``out``'s shape and dtype.
    """
    _, shape, dtype, kind, scalar_type, inline, offset = unpack_header(first)
    if (not shape_known and type(out) is np.ndarray and out.shape == shape
            and out.dtype is dtype and out.flags.c_contiguous):
        # the common case, kept short: data into the receiver's own (writable) array
        if inline:
            read_inline(first, offset, out)
        else:
            ctx.comm.Recv(spec_of(out), status.Get_source(), status.Get_tag())
        return out, out.nbytes
    source, tag = status.Get_source(), status.Get_tag()
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        if shape_known:
            _check_promise(out, shape, dtype, ctx, name, source)
        call = resolve_receiver(out, shape, dtype, ctx, name, source, kind, scalar_type)
    except (TypeError, ValueError, CollectiveMismatchError):
        if not inline:  # drain the data message so it cannot be mistaken for a later one
            ctx.comm.Recv(np.empty(nbytes, dtype=np.uint8), source, tag)
        raise
    if not inline:
        ctx.comm.Recv(call.spec, source, tag)
    elif call.on_host:
        read_inline(first, offset, call.data)
    else:  # a direct device array: through the host
        host = np.empty(shape, dtype=dtype)
        read_inline(first, offset, host)
        call.backend.from_host(host, out=call.data)
    return (out if out is not None and call.target is None else call.hand_back()), nbytes


def _check_promise(out, shape, dtype, ctx, name, source):
    """Check mode: the message matches the ``out`` a ``shape_known=True`` receiver passed."""
    if out is None or not (hasattr(out, "shape") and hasattr(out, "dtype")):
        raise InvalidArgumentTypeError(
            f"{name}(shape_known=True): rank {ctx.rank} passed out={out!r}; "
            f"{_RECEIVE_FIX}")
    if tuple(out.shape) != shape or np.dtype(out.dtype) != dtype:
        raise CollectiveMismatchError(
            f"{name}(shape_known=True): rank {ctx.rank} passed out={describe(out)}, rank "
            f"{source} sent {describe_shape(shape, dtype)}")


def _matching(source, tag, ctx, name):
    """MPI's ``(source, tag)`` for a receive: wildcards translated, the rest checked."""
    if type(source) is int and 0 <= source < ctx.size:
        pass  # the common case first
    elif source is ANY_SOURCE or source == MPI.ANY_SOURCE:
        source = MPI.ANY_SOURCE
    else:
        source = _check_peer(source, ctx, name, "source")
    if tag is ANY_TAG or tag == MPI.ANY_TAG:
        tag = MPI.ANY_TAG
    elif type(tag) is not int or not 0 <= tag <= _MAX_TAG:
        tag = _check_tag(tag, name)
    return source, tag


def recv(source=ANY_SOURCE, tag=ANY_TAG, out=None, *, shape_known=False, ctx):
    """Receive an array or scalar sent with :func:`send` or :func:`isend`.

    Parameters
    ----------
    source : int, default=ANY_SOURCE
    tag : int, default=ANY_TAG
    out : array, optional
        Receive into this array (it must have the sender's shape and dtype).
    shape_known : bool, default=False
        The sender used ``shape_known=True`` and ``out`` has its shape and
        dtype: one MPI receive of the raw buffer, no probe.
    ctx : Context

    Returns
    -------
    array or scalar
        ``out`` when given, else a new array (a scalar when a scalar was sent).
    """
    source, tag = _matching(source, tag, ctx, "recv")
    if shape_known and not ctx.check:
        call = resolve(out, ctx, "recv", incoming=True, array_fix=_RECEIVE_FIX)
        start = ctx._begin("recv", call, source)
        try:
            ctx.comm.Recv(call.spec, source, tag)
        finally:
            ctx._end("recv", start, 0, call.data.nbytes)
        return out if call.target is None else call.hand_back()
    if out is not None:  # before the message is taken: after it, it would be lost
        refuse_read_only(out, ctx, "recv")
    packets = ctx._p2p_packets or _packets_of(ctx)
    start = ctx._begin("recv", None, source)
    nbytes = 0
    try:
        # the first message is at most _FIRST_BYTES: received straight into the packet
        ctx.comm.Recv(packets.receive, source, tag, packets.status)
        result, nbytes = _finish_receive(packets.receive, packets.status, out, ctx, "recv",
                                         shape_known)
    finally:
        ctx._end("recv", start, 0, nbytes)
    return result


class _ReceiveRequest(Request):
    """An :func:`irecv` in flight: waits for the header message, then the data."""

    def __init__(self, ctx, source, tag, out, shape_known):
        super().__init__(ctx, "irecv", [], None)
        self._source, self._tag, self._out = source, tag, out
        self._shape_known = shape_known

    def test(self):
        if not self._done:
            status = MPI.Status()
            message = self._ctx.comm.Improbe(self._source, self._tag, status)
            if message is None:
                return False
            self._result, received = _receive_matched(message, status, self._out, self._ctx,
                                                      "irecv", self._shape_known)
            self._nbytes = (0, received)
            self._done = True
        return True

    def wait(self):
        if not self._done:
            ctx = self._ctx
            start = ctx._begin("irecv")
            received = 0
            try:
                status = MPI.Status()
                message = ctx.comm.Mprobe(self._source, self._tag, status)
                self._result, received = _receive_matched(message, status, self._out, ctx,
                                                          "irecv", self._shape_known)
                self._done = True
            finally:
                ctx._end("irecv", start, 0, received)
        return self._result


def irecv(source=ANY_SOURCE, tag=ANY_TAG, out=None, *, shape_known=False, ctx):
    """Start receiving; returns a :class:`Request` whose ``wait()`` gives the array.

    A self-describing message (the default) is taken when :meth:`Request.test`
    first finds it or :meth:`Request.wait` is called: nothing is posted before,
    so a peer's send of more than 4 KiB (blocking, or an :func:`isend`'s
    ``wait()``) waits for that test or wait. Two ranks that exchange arrays
    therefore start ``irecv`` and ``isend``, then wait for the receive first.
    With ``shape_known=True`` (as for :func:`recv`) the receive into ``out``
    is posted at once, as MPI's ``Irecv``, and the waits may come in any order.
    """
    source, tag = _matching(source, tag, ctx, "irecv")
    if shape_known and not ctx.check:
        call = resolve(out, ctx, "irecv", incoming=True, array_fix=_RECEIVE_FIX)
        return Request(ctx, "irecv", [ctx.comm.Irecv(call.spec, source, tag)],
                       lambda: out if call.target is None else call.hand_back(),
                       (0, call.data.nbytes))
    if out is not None:  # before the message is taken: after it, it would be lost
        refuse_read_only(out, ctx, "irecv")
    return _ReceiveRequest(ctx, source, tag, out, shape_known)
