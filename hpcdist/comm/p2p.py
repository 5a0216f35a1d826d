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
from time import perf_counter as _perf_counter

import numpy as np

from ..exceptions import CollectiveMismatchError
from .buffers import _DIRECT_TYPES, HOST, NP_SCALAR, PY_SCALAR, describe, mpi_buffer, wrap
from .devices import backend_of
from .headers import HEADER_BYTES, OK, pack_header, unpack_header
from .movement import _hand_back, _receive_buffer
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
_HEADER_BYTES = HEADER_BYTES
_INLINE_BYTES = 4096  # measured: 64 KiB inline cost 1.5 us more per 16-64 KiB call


def _check_peer(peer, ctx, name, argument):
    if isinstance(peer, (int, np.integer)) and 0 <= peer < ctx.size:
        return int(peer)
    raise ValueError(f"{name}: {argument}={peer!r} is not a rank of this context; "
                     f"use 0..{ctx.size - 1}")


def _check_tag(tag, name):
    if isinstance(tag, (int, np.integer)) and 0 <= tag <= 32767:
        return int(tag)
    raise ValueError(f"{name}: tag={tag!r} should be an integer in 0..32767")


def _outgoing(x, ctx, name):
    """The message(s) carrying ``x``: (first message bytes, data buffer or None, nbytes)."""
    payload = wrap(x, ctx, name, slot=None)
    data = payload.data
    inline = payload.on_host and data.nbytes <= _INLINE_BYTES
    first = np.zeros(_HEADER_BYTES + (data.nbytes if inline else 0), dtype=np.uint8)
    pack_header(first, OK, data, payload.kind, payload.scalar_code, inline)
    if inline:
        first[_HEADER_BYTES:] = data.reshape(-1).view(np.uint8)
        return first, None, data.nbytes
    return first, data, data.nbytes


def _raw_outgoing(x, ctx, name):
    """The MPI buffer of ``x`` sent without a header (``shape_known=True``), and its bytes."""
    if type(x) is np.ndarray and x.flags.c_contiguous and x.dtype in _DIRECT_TYPES:
        return (x, _DIRECT_TYPES[x.dtype]), x.nbytes
    payload = wrap(x, ctx, name, slot=None)
    if payload.kind in (PY_SCALAR, NP_SCALAR):
        raise TypeError(f"{name}(shape_known=True): rank {ctx.rank} passed a scalar; pass an "
                        f"array of the shape and dtype the receiver expects, or use "
                        f"shape_known=False")
    return mpi_buffer(payload.data), payload.data.nbytes


def _check_known_out(out, ctx, name):
    """A ``shape_known=True`` receiver must pass ``out``, an array."""
    if out is None or not (hasattr(out, "shape") and hasattr(out, "dtype")):
        raise TypeError(f"{name}(shape_known=True): rank {ctx.rank} passed out={out!r}; pass "
                        f"out=, an array of the sender's shape and dtype (or use "
                        f"shape_known=False)")


def _raw_incoming(out, ctx, name, source):
    """Where a headerless message lands (``shape_known=True``): (buffer, target)."""
    _check_known_out(out, ctx, name)
    return _receive_buffer(out, tuple(out.shape), np.dtype(out.dtype), ctx, name, source)


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
    dest = _check_peer(dest, ctx, "send", "dest")
    tag = _check_tag(tag, "send")
    if shape_known and not ctx.check:
        buffer, nbytes = _raw_outgoing(x, ctx, "send")
        ctx._inflight_name = "send"  # ctx._begin, inlined on this hot path
        ctx._inflight_since = start = _perf_counter()
        try:
            ctx.comm.Send(buffer, dest, tag)
        finally:
            ctx._end("send", start, nbytes, 0)
        return
    first, data, nbytes = _outgoing(x, ctx, "send")
    start = ctx._begin("send")
    try:
        ctx.comm.Send(first, dest, tag)
        if data is not None:
            ctx.comm.Send(mpi_buffer(data), dest, tag)
    finally:
        ctx._end("send", start, nbytes, 0)


def isend(x, dest, tag=0, *, shape_known=False, ctx):
    """Start sending ``x`` to ``dest``; returns a :class:`Request` (``wait()`` gives None).

    ``shape_known`` as for :func:`send`.
    """
    dest = _check_peer(dest, ctx, "isend", "dest")
    tag = _check_tag(tag, "isend")
    if shape_known and not ctx.check:
        buffer, nbytes = _raw_outgoing(x, ctx, "isend")
        return Request(ctx, "isend", [ctx.comm.Isend(buffer, dest, tag)],
                       lambda: buffer and None, (nbytes, 0))
    first, data, nbytes = _outgoing(x, ctx, "isend")
    requests = [ctx.comm.Isend(first, dest, tag)]
    if data is not None:
        requests.append(ctx.comm.Isend(mpi_buffer(data), dest, tag))
    keep_alive = (first, data)
    return Request(ctx, "isend", requests, lambda: keep_alive and None, (nbytes, 0))


def _receive(message, status, out, ctx, name, shape_known=False):
    """Finish receiving from a matched first ``message``; returns (result, nbytes).

    ``shape_known`` (check mode): the sender promised ``out``'s shape and dtype.
    """
    first = np.empty(status.Get_count(MPI.BYTE), dtype=np.uint8)
    message.Recv(first)
    source, tag = status.Get_source(), status.Get_tag()
    _, shape, dtype, kind, scalar_type, inline = unpack_header(first)
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        if shape_known:
            _check_promise(out, shape, dtype, ctx, name, source)
        buffer, target = _receive_buffer(out, shape, dtype, ctx, name, source)
    except (TypeError, ValueError, CollectiveMismatchError):
        if not inline:  # drain the data message so it cannot be mistaken for a later one
            ctx.comm.Recv(np.empty(nbytes, dtype=np.uint8), source, tag)
        raise
    if inline:
        host = buffer if isinstance(buffer, np.ndarray) else np.empty(shape, dtype=dtype)
        host.reshape(-1).view(np.uint8)[...] = first[_HEADER_BYTES:]
        if host is not buffer:
            backend_of(buffer).from_host(host, out=buffer)
    else:
        ctx.comm.Recv(mpi_buffer(buffer), source, tag)
    return _hand_back(buffer, target, kind, scalar_type, ctx), nbytes


def _check_promise(out, shape, dtype, ctx, name, source):
    """Check mode: the message matches the ``out`` a ``shape_known=True`` receiver passed."""
    _check_known_out(out, ctx, name)
    if tuple(out.shape) != shape or np.dtype(out.dtype) != dtype:
        raise CollectiveMismatchError(
            f"{name}(shape_known=True): rank {ctx.rank} passed out={describe(out)}, rank "
            f"{source} sent {dtype}[{','.join(map(str, shape))}]")


def _matching(source, tag, ctx, name):
    """MPI's ``(source, tag)`` for a receive: wildcards translated, the rest checked."""
    if source is ANY_SOURCE or source == MPI.ANY_SOURCE:
        source = MPI.ANY_SOURCE
    else:
        source = _check_peer(source, ctx, name, "source")
    if tag is ANY_TAG or tag == MPI.ANY_TAG:
        tag = MPI.ANY_TAG
    else:
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
        if type(out) is np.ndarray and out.flags.c_contiguous and out.dtype in _DIRECT_TYPES:
            buffer, target, spec = out, None, (out, _DIRECT_TYPES[out.dtype])
        else:
            buffer, target = _raw_incoming(out, ctx, "recv", source)
            spec = mpi_buffer(buffer)
        ctx._inflight_name = "recv"  # ctx._begin, inlined on this hot path
        ctx._inflight_since = start = _perf_counter()
        try:
            ctx.comm.Recv(spec, source, tag)
        finally:
            ctx._end("recv", start, 0, buffer.nbytes)
        return out if target is None else _hand_back(buffer, target, HOST, None, ctx)
    start = ctx._begin("recv")
    nbytes = 0
    try:
        status = MPI.Status()
        message = ctx.comm.Mprobe(source, tag, status)
        result, nbytes = _receive(message, status, out, ctx, "recv", shape_known)
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
            self._result, received = _receive(message, status, self._out, self._ctx, "irecv",
                                                   self._shape_known)
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
                self._result, received = _receive(message, status, self._out, ctx, "irecv",
                                                   self._shape_known)
                self._done = True
            finally:
                ctx._end("irecv", start, 0, received)
        return self._result


def irecv(source=ANY_SOURCE, tag=ANY_TAG, out=None, *, shape_known=False, ctx):
    """Start receiving; returns a :class:`Request` whose ``wait()`` gives the array.

    The message is matched when :meth:`Request.test` first finds it or
    :meth:`Request.wait` is called; with ``shape_known=True`` (as for
    :func:`recv`) the receive into ``out`` starts at once.
    """
    source, tag = _matching(source, tag, ctx, "irecv")
    if shape_known and not ctx.check:
        buffer, target = _raw_incoming(out, ctx, "irecv", source)
        return Request(ctx, "irecv", [ctx.comm.Irecv(mpi_buffer(buffer), source, tag)],
                       lambda: _hand_back(buffer, target, HOST, None, ctx), (0, buffer.nbytes))
    return _ReceiveRequest(ctx, source, tag, out, shape_known)
