"""Data movement: broadcast, allgather, gather, scatter and alltoall."""

import math
from time import perf_counter as _perf_counter

import numpy as np

from .._partition import balanced_counts, offsets_of, validate_counts
from .buffers import (
    _DIRECT_TYPES,
    DEVICE_DIRECT,
    DEVICE_STAGED,
    HOST,
    NP_SCALAR,
    PY_SCALAR,
    Payload,
    describe,
    mpi_buffer,
    wrap,
)
from .checks import agree, format_ranks
from .devices import backend_of
from .dtypes import dtype_code, dtype_from_code
from .headers import BAD_INPUT, HEADER_BYTES, MAX_DIMS, NO_INPUT, OK, pack_header, unpack_header
from .reductions import check_root

__all__ = ["broadcast", "allgather", "gather", "scatter", "alltoall"]

_HEADER_BYTES = HEADER_BYTES
# one eager message: the header and a small array (MPICH broadcasts 4 KiB about
# as fast as 1 KiB on shared memory; 8 KiB takes twice as long)
_PACKET_BYTES = 4096
_INLINE_BYTES = _PACKET_BYTES - _HEADER_BYTES


# -- broadcast -----------------------------------------------------------------------------
def broadcast(x, root=0, *, shape_known=False, ctx):
    """Send ``x`` from ``root`` to every rank.

    Parameters
    ----------
    x : array, scalar or None
        On ``root``, the data. Elsewhere, an array of the root's shape and
        dtype to fill in place, or None to receive a new array.
    root : int, default=0
    shape_known : bool, default=False
        Promise that every rank passes an array of the root's shape and
        dtype (no None, no scalars): the header message is skipped, so the
        broadcast is exactly one MPI broadcast. Check mode still verifies
        the promise.
    ctx : Context

    Returns
    -------
    array or scalar
        On ``root``, ``x``; elsewhere ``x`` filled in place, or a new array
        (a scalar when the root sent a scalar).

    Notes
    -----
    A header travels first (shape, dtype, kind) so receivers may pass None;
    arrays of up to ``_INLINE_BYTES`` ride inside the header's message, so
    a small broadcast is still one message.
    """
    if (shape_known and type(x) is np.ndarray and type(root) is int and 0 <= root < ctx.size
            and not ctx.check and x.flags.c_contiguous and x.dtype in _DIRECT_TYPES):
        # fast path: one MPI broadcast of a plain array, as in parameter broadcasts
        ctx._inflight_name = "broadcast"  # ctx._begin, inlined on this hot path
        ctx._inflight_since = start = _perf_counter()
        if ctx.size > 1:
            ctx.comm.Bcast((x, _DIRECT_TYPES[x.dtype]), root)
        nbytes = x.nbytes
        if ctx.rank == root:
            ctx._end("broadcast", start, nbytes, 0)
        else:
            ctx._end("broadcast", start, 0, nbytes)
        return x
    root = check_root(root, ctx, "broadcast")
    if shape_known:
        return _broadcast_known_shape(x, root, ctx)
    if ctx.rank == root:
        return _broadcast_root(x, root, ctx)
    return _broadcast_receive(x, root, ctx)


def _broadcast_known_shape(x, root, ctx):
    """One MPI broadcast straight into every rank's array (``shape_known=True``)."""
    if not hasattr(x, "shape") or not hasattr(x, "dtype"):
        raise TypeError(f"broadcast(shape_known=True): rank {ctx.rank} passed "
                        f"{type(x).__name__}; every rank must pass an array of the root's "
                        f"shape and dtype (or use shape_known=False)")
    if ctx.check:
        agree(ctx, "broadcast", describe(x), f"root={root}", "shape_known")
    if type(x) is np.ndarray and x.flags.c_contiguous:
        buffer, target = x, None
    elif ctx.rank == root:
        buffer, target = wrap(x, ctx, "broadcast").data, None
    else:
        buffer, target = _receive_buffer(x, tuple(x.shape), np.dtype(x.dtype), ctx,
                                         "broadcast", root)
    start = ctx._begin("broadcast")
    if ctx.size > 1:
        ctx.comm.Bcast(mpi_buffer(buffer), root=root)
    is_root = ctx.rank == root
    ctx._end("broadcast", start, buffer.nbytes if is_root else 0, 0 if is_root else buffer.nbytes)
    return x if is_root else _hand_back(buffer, target, HOST, None, ctx)


def _root_payload(x, ctx, name, root):
    """Wrap the root's input and describe it in the context's packet.

    Returns the payload, the packet, and whether the data rides inline in the
    packet (small host data). On bad input the root tells the other ranks
    (they raise too), then raises.
    """
    packet = _packet_of(ctx)
    if type(x) is np.ndarray and x.flags.c_contiguous and x.dtype in _DIRECT_TYPES:
        inline = x.nbytes <= _INLINE_BYTES  # a plain array: no wrapping needed
        pack_header(packet, OK, x, HOST, -1, inline)
        return Payload(x, HOST), packet, inline
    try:
        if x is None:
            raise ValueError(f"{name}: the root (rank {root}) passed None; the root must pass "
                             f"the data to send")
        payload = wrap(x, ctx, name)
        inline = payload.on_host and payload.data.nbytes <= _INLINE_BYTES
        pack_header(packet, OK, payload.data, payload.kind, payload.scalar_code, inline)
    except (TypeError, ValueError):
        pack_header(packet, NO_INPUT if x is None else BAD_INPUT)
        if ctx.size > 1:
            ctx._private_comm.Bcast(packet, root=root)
        raise
    return payload, packet, inline


def _packet_of(ctx):
    """The context's reusable packet: a header and, for small arrays, their bytes."""
    packet = ctx._packet
    if packet is None:
        packet = ctx._packet = np.zeros(_PACKET_BYTES, dtype=np.uint8)
        ctx._packet_view = memoryview(packet)
    return packet


def _describe_input(x):
    """:func:`describe` for anything a caller may pass (None, numbers, arrays)."""
    if x is None or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return describe(x)
    return describe(np.asarray(x)) if isinstance(x, (int, float, complex)) else type(x).__name__


def _broadcast_root(x, root, ctx):
    if ctx.check:  # before the root validates: its error path must meet the same calls
        agree(ctx, "broadcast", _describe_input(x), f"root={root}")
    payload, packet, inline = _root_payload(x, ctx, "broadcast", root)
    data = payload.data
    start = ctx._begin("broadcast")
    if ctx.size > 1:
        if inline:  # (tobytes and a memoryview copy are the cheapest way for a few bytes)
            ctx._packet_view[_HEADER_BYTES:_HEADER_BYTES + data.nbytes] = data.tobytes()
        ctx._private_comm.Bcast(packet, root=root)
        if not inline:
            ctx.comm.Bcast(mpi_buffer(data), root=root)
    ctx._end("broadcast", start, data.nbytes, 0)
    return x


def _raise_root_failure(status, root, name):
    if status == NO_INPUT:
        raise ValueError(f"{name}: the root (rank {root}) passed None; the root must pass "
                         f"the data to send")
    raise TypeError(f"{name}: the root (rank {root}) passed data that cannot be sent "
                    f"(see the error on rank {root})")


def _receive_buffer(x, shape, dtype, ctx, name, root):
    """Where a receiver's data lands, and how to hand it back to the caller."""
    if x is None:
        return np.empty(shape, dtype=dtype), None
    if tuple(x.shape) != shape or np.dtype(x.dtype) != dtype:
        raise ValueError(f"{name}: rank {ctx.rank} passed {describe(x)} but the root (rank "
                         f"{root}) sends {dtype}[{','.join(map(str, shape))}]; pass an array "
                         f"of the root's shape and dtype, or None")
    if isinstance(x, np.ndarray):
        return (x, None) if x.flags.c_contiguous else (np.empty(shape, dtype=dtype), x)
    backend = backend_of(x)
    if backend is None:
        raise TypeError(f"{name}: receivers pass a NumPy array, a device array or None, "
                        f"got {type(x).__name__}")
    if ctx.cuda_aware and backend.ascontiguous(x) is x:
        return x, None
    return ctx.staging.view("recv", shape, dtype, backend), x


def _hand_back(buffer, target, kind, scalar_type, ctx):
    """Give the receiver its result as the kind of object it (or the root) used."""
    if target is not None:
        if isinstance(target, np.ndarray):
            target[...] = buffer
            return target
        return backend_of(target).from_host(buffer, out=target)
    if kind == PY_SCALAR:
        return scalar_type(buffer[()].item())
    if kind == NP_SCALAR:
        return buffer[()]
    if (kind not in (HOST, PY_SCALAR, NP_SCALAR) and ctx.xp is not np
            and isinstance(buffer, np.ndarray)):
        return ctx.xp.asarray(buffer)  # the root sent a device array: so do we
    return buffer


def _broadcast_receive(x, root, ctx):
    packet = _packet_of(ctx)
    if ctx.check:
        agree(ctx, "broadcast", None if x is None else describe(x), f"root={root}")
    start = ctx._begin("broadcast")
    ctx._private_comm.Bcast(packet, root=root)
    status, shape, dtype, kind, scalar_type, inline = unpack_header(packet)
    if (type(x) is np.ndarray and status == OK and x.shape == shape and x.dtype == dtype
            and x.flags.c_contiguous):
        # the common case, kept short: the data broadcast follows the header at once
        if inline:
            if x.nbytes and x.dtype in _DIRECT_TYPES:
                inline = ctx._packet_view[_HEADER_BYTES:_HEADER_BYTES + x.nbytes]
                memoryview(x).cast("B")[:] = inline
            elif x.nbytes:  # bfloat16 has no buffer-protocol format: copy through NumPy
                x.reshape(-1).view(np.uint8)[...] = packet[_HEADER_BYTES:_HEADER_BYTES + x.nbytes]
        else:
            ctx.comm.Bcast(mpi_buffer(x), root=root)
        ctx._end("broadcast", start, 0, x.nbytes)
        return x
    if status != OK:
        ctx._end("broadcast", start, 0, 0)
        _raise_root_failure(status, root, "broadcast")
    nbytes = math.prod(shape) * dtype.itemsize
    try:
        buffer, target = _receive_buffer(x, shape, dtype, ctx, "broadcast", root)
    except (TypeError, ValueError):
        if not inline:  # take part in the data broadcast anyway, then report
            ctx.comm.Bcast(np.empty(nbytes, dtype=np.uint8), root=root)
        ctx._end("broadcast", start, 0, nbytes)
        raise
    if inline:
        host = buffer if isinstance(buffer, np.ndarray) else np.empty(shape, dtype=dtype)
        host.reshape(-1).view(np.uint8)[...] = packet[_HEADER_BYTES:_HEADER_BYTES + nbytes]
        if host is not buffer:
            backend_of(buffer).from_host(host, out=buffer)
    else:
        ctx.comm.Bcast(mpi_buffer(buffer), root=root)
    ctx._end("broadcast", start, 0, nbytes)
    return _hand_back(buffer, target, kind, scalar_type, ctx)


# -- gathers -------------------------------------------------------------------------------
def _normalize_axis(axis, ndim, name):
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise ValueError(f"{name}: axis={axis!r} is out of range for a {ndim}-d array; "
                         f"use 0..{ndim - 1} (or negative from the end)")
    return int(axis) % ndim


def _rows_first(payload, axis, name):
    """The payload's data with ``axis`` moved to the front, contiguous."""
    data = payload.data
    if data.ndim == 0:
        data = data.reshape(1)
        if payload.kind in (PY_SCALAR, NP_SCALAR):
            payload.kind = HOST  # gathered scalars come back as an array
    axis = _normalize_axis(axis, data.ndim, name)
    if axis != 0:
        if payload.kind == DEVICE_DIRECT:
            # reorder on the host: the result comes back to the device as when staged
            host = np.empty(data.shape, dtype=data.dtype)
            payload.backend.to_host(data, host)
            data, payload.kind, payload.output_slot = host, DEVICE_STAGED, None
        data = np.ascontiguousarray(np.moveaxis(data, axis, 0))
        payload.data = data
    return data, axis


def _describe_rows(status, data):
    """One rank's row description: status, rows, dtype, ndim and the other dimensions."""
    words = np.zeros(4 + MAX_DIMS, dtype=np.int64)
    words[0] = status
    if data is None:
        return words
    shape = data.shape
    if len(shape) > MAX_DIMS:
        raise ValueError(f"arrays of more than {MAX_DIMS} dimensions are not supported")
    words[1] = shape[0]
    words[2] = dtype_code(data.dtype)
    words[3] = len(shape)
    if len(shape) > 1:
        words[4:3 + len(shape)] = shape[1:]
    return words


_OK_WORD = np.int64(OK).tobytes()


def _check_rows(table, name, axis):
    """Raise on every rank unless all ranks passed compatible arrays; return the row counts.

    Parameters
    ----------
    table : ndarray of int64, shape (size, words)
        Every rank's :func:`_describe_rows`.
    """
    # the common case, on raw bytes: every status OK, every row description
    # but the row count (the second word) equal to rank 0's
    raw = table.tobytes()
    width = len(raw) // len(table)
    signature = raw[16:width]
    for begin in range(0, len(raw), width):
        if raw[begin:begin + 8] != _OK_WORD or raw[begin + 16:begin + width] != signature:
            _raise_row_mismatch(table.tolist(), name, axis)
    return table[:, 1].tolist()


def _raise_row_mismatch(rows, name, axis):
    """Explain why the ranks' row descriptions ``rows`` (lists of words) do not agree."""
    failed = [rank for rank, words in enumerate(rows) if words[0] != OK]
    if failed:
        raise ValueError(f"{name}: {format_ranks(failed)} passed invalid input (see the "
                         f"error there); no data was exchanged")
    shown = []
    for words in rows:
        dims = [str(n) for n in words[4:3 + words[3]]]
        dims.insert(axis, "*")
        shown.append(f"{dtype_from_code(words[2])}[{','.join(dims)}]")
    raise ValueError(f"{name}: ranks disagree on the dtype or on the dimensions other than "
                     f"axis={axis}: " + ", ".join(f"rank {r} passed {s}"
                                                   for r, s in enumerate(shown)))


def _exchange_rows(ctx, data, name, axis, start):
    """Every rank's row count along the gather axis, validated on every rank.

    ``start`` is the operation's :meth:`Context._begin` time: a failed
    validation closes the operation's bookkeeping before raising.
    """
    if ctx.size == 1:
        return [data.shape[0]]
    words = _describe_rows(OK, data)
    table = np.empty((ctx.size, words.size), dtype=np.int64)
    ctx._private_comm.Allgather(words, table)
    try:
        return _check_rows(table, name, axis)
    except ValueError:
        ctx._end(name, start, 0, 0)
        raise


def _vector_spec(buffer, counts, row_size):
    """An mpi4py ``[buffer, counts, displacements, datatype]`` for the v-collectives."""
    spec = mpi_buffer(buffer)
    elements = [c * row_size for c in counts]
    return [spec[0], elements, offsets_of(elements).tolist(), spec[1]]


def _from_rows(result, axis):
    return result if axis == 0 else np.ascontiguousarray(np.moveaxis(result, 0, axis))


def allgather(x, axis=0, *, counts=None, ctx):
    """Concatenate every rank's ``x`` along ``axis``, on every rank.

    Parameters
    ----------
    x : array or scalar
        Sizes along ``axis`` may differ between ranks; the other dimensions
        and the dtype must agree. A scalar counts as a 1-element array.
    axis : int, default=0
    counts : sequence of int, optional
        Every rank's size along ``axis`` when known: skips the exchange of
        sizes (one message fewer).
    ctx : Context

    Returns
    -------
    array
        The concatenation in rank order.
    """
    if (type(x) is np.ndarray and axis == 0 and x.ndim and not ctx.check
            and x.flags.c_contiguous and x.dtype in _DIRECT_TYPES
            and (counts is None or (type(counts) is list and len(counts) == ctx.size
                                    and counts.count(x.shape[0]) == ctx.size))):
        return _allgather_plain(x, counts, ctx)
    payload = wrap(x, ctx, "allgather")
    data, axis = _rows_first(payload, axis, "allgather")
    if counts is not None:
        counts = validate_counts(counts, ctx.size, None, "allgather")
        if counts[ctx.rank] != data.shape[0]:
            raise ValueError(f"allgather: counts[{ctx.rank}]={counts[ctx.rank]} but rank "
                             f"{ctx.rank} passed {data.shape[0]} along axis={axis}")
    if ctx.check:
        agree(ctx, "allgather", _describe_except(data, axis), f"axis={axis}")
    start = ctx._begin("allgather")
    if counts is None:
        counts = _exchange_rows(ctx, data, "allgather", axis, start)
    row_size = math.prod(data.shape[1:])
    result = payload.new_output((sum(counts),) + data.shape[1:], data.dtype)
    if ctx.size == 1:
        payload.copy_into(result, data)
    elif counts.count(counts[0]) == len(counts):
        ctx.comm.Allgather(mpi_buffer(data), mpi_buffer(result))
    else:
        ctx.comm.Allgatherv(mpi_buffer(data), _vector_spec(result, counts, row_size))
    ctx._end("allgather", start, data.nbytes, result.nbytes)
    return payload.deliver(_from_rows(result, axis))


def _allgather_plain(x, counts, ctx):
    """The fast path of :func:`allgather`: a C-contiguous host array of a
    predefined MPI type along axis 0, with ``counts`` None or all equal."""
    ctx._inflight_name = "allgather"  # ctx._begin, inlined on this hot path
    ctx._inflight_since = start = _perf_counter()
    shape = x.shape
    if counts is None:
        counts = _exchange_rows(ctx, x, "allgather", 0, start)
        equal, total = counts.count(counts[0]) == len(counts), sum(counts)
    else:  # the caller checked that every count is this rank's
        equal, total = True, shape[0] * ctx.size
    dtype = x.dtype  # (positional dtype and a plain row count: cheaper calls for 1-D x)
    result = np.empty(total if len(shape) == 1 else (total,) + shape[1:], dtype)
    datatype = _DIRECT_TYPES[dtype]
    if ctx.size == 1:
        result[...] = x
    elif equal:
        ctx.comm.Allgather((x, datatype), (result, datatype))
    else:
        ctx.comm.Allgatherv((x, datatype), _vector_spec(result, counts, math.prod(shape[1:])))
    ctx._end("allgather", start, x.nbytes, result.nbytes)
    return result


def _describe_except(data, axis):
    dims = [str(n) for n in data.shape[1:]]
    dims.insert(axis, "*")
    return f"{np.dtype(data.dtype)}[{','.join(dims)}]"


def gather(x, root=0, axis=0, *, ctx):
    """Concatenate every rank's ``x`` along ``axis`` on ``root``.

    Parameters
    ----------
    x : array or scalar
        Sizes along ``axis`` may differ between ranks.
    root : int, default=0
    axis : int, default=0
    ctx : Context

    Returns
    -------
    array or None
        The concatenation in rank order on ``root``; None elsewhere.
    """
    root = check_root(root, ctx, "gather")
    payload = wrap(x, ctx, "gather")
    data, axis = _rows_first(payload, axis, "gather")
    if ctx.check:
        agree(ctx, "gather", _describe_except(data, axis), f"axis={axis}", f"root={root}")
    start = ctx._begin("gather")
    counts = _exchange_rows(ctx, data, "gather", axis, start)
    row_size = math.prod(data.shape[1:])
    is_root = ctx.rank == root
    result = payload.new_output((sum(counts),) + data.shape[1:], data.dtype) if is_root else None
    if ctx.size == 1:
        payload.copy_into(result, data)
    else:
        ctx.comm.Gatherv(mpi_buffer(data),
                         _vector_spec(result, counts, row_size) if is_root else None, root=root)
    ctx._end("gather", start, data.nbytes, result.nbytes if is_root else 0)
    return payload.deliver(_from_rows(result, axis)) if is_root else None


# -- scatter and alltoall --------------------------------------------------------------------
def scatter(x, root=0, axis=0, counts=None, *, ctx):
    """Split ``x`` on ``root`` along ``axis`` and send block ``r`` to rank ``r``.

    Parameters
    ----------
    x : array or None
        The data on ``root``; ignored on the other ranks (pass None).
    root : int, default=0
    axis : int, default=0
    counts : sequence of int, optional
        Each rank's block size along ``axis``, read on ``root`` (default:
        balanced, the first ``n % size`` ranks get one more). Bad counts
        raise ``ValueError`` on every rank.
    ctx : Context

    Returns
    -------
    array
        This rank's block.
    """
    root = check_root(root, ctx, "scatter")
    is_root = ctx.rank == root
    plan = None
    if ctx.check:  # before the root validates: its error path must meet the same calls
        agree(ctx, "scatter", f"root={root}")
    if is_root:
        try:
            plan = _scatter_plan(x, axis, counts, ctx)
        except (TypeError, ValueError) as error:
            if ctx.size > 1:
                ctx._private_comm.bcast(("error", type(error).__name__, str(error)), root=root)
            raise
    start = ctx._begin("scatter")
    header = ctx._private_comm.bcast(plan[1:] if is_root else None, root=root) if ctx.size > 1 \
        else plan[1:]
    if header[0] == "error":
        ctx._end("scatter", start, 0, 0)
        raise (TypeError if header[1] == "TypeError" else ValueError)(
            f"scatter: the root (rank {root}) rejected its input: {header[2]}")
    _, dtype, rest, counts, axis, device = header
    row_size = math.prod(rest)
    if is_root:
        payload, data = plan[0]
        result = payload.new_output((counts[ctx.rank],) + rest, dtype)
    else:
        payload, data = None, None
        result = np.empty((counts[ctx.rank],) + rest, dtype=dtype)
    if ctx.size == 1:
        payload.copy_into(result, data)
    else:
        ctx.comm.Scatterv(_vector_spec(data, counts, row_size) if is_root else None,
                          mpi_buffer(result), root=root)
    ctx._end("scatter", start, data.nbytes if is_root else 0, result.nbytes)
    result = _from_rows(result, axis)
    if is_root:
        return payload.deliver(result)
    return ctx.xp.asarray(result) if device and ctx.xp is not np else result


def _scatter_plan(x, axis, counts, ctx):
    if x is None:
        raise ValueError(f"scatter: the root (rank {ctx.rank}) passed None; the root must pass "
                         f"the array to split")
    payload = wrap(x, ctx, "scatter")
    if payload.data.ndim == 0:
        raise ValueError("scatter: x must have at least one dimension to split")
    data, axis = _rows_first(payload, axis, "scatter")
    rows = data.shape[0]
    counts = (balanced_counts(rows, ctx.size) if counts is None
              else validate_counts(counts, ctx.size, rows, "scatter"))
    device = payload.kind not in (HOST, PY_SCALAR, NP_SCALAR)
    return (payload, data), "ok", np.dtype(data.dtype), tuple(data.shape[1:]), counts, axis, device


def alltoall(x, counts=None, *, ctx):
    """Personalised exchange: block ``r`` of every rank's ``x`` goes to rank ``r``.

    Parameters
    ----------
    x : array of shape (n, ...)
        Split along axis 0 into ``size`` blocks.
    counts : sequence of int, optional
        This rank's block sizes (default: balanced). They may differ between
        ranks, zeros included; the other dimensions and dtype must agree.
    ctx : Context

    Returns
    -------
    array
        The blocks addressed to this rank, concatenated in rank order.
    """
    payload = wrap(x, ctx, "alltoall")
    data = payload.data
    if data.ndim == 0:
        raise ValueError("alltoall: x must have at least one dimension to split along axis 0")
    rows = data.shape[0]
    error = None
    try:
        counts = (balanced_counts(rows, ctx.size) if counts is None
                  else validate_counts(counts, ctx.size, rows, "alltoall"))
    except ValueError as exc:
        if ctx.size == 1:
            raise
        error, counts = exc, [0] * ctx.size
    if ctx.check:
        agree(ctx, "alltoall", _describe_except(data, 0))
    start = ctx._begin("alltoall")
    row_size = math.prod(data.shape[1:])
    if ctx.size == 1:
        received = list(counts)
    else:
        # the sizes travel with a status word, so bad counts on one rank stop every rank
        words = np.tile(_describe_rows(OK if error is None else BAD_INPUT, data), (ctx.size, 1))
        words[:, 1] = counts
        table = np.empty_like(words)
        ctx._private_comm.Alltoall(words, table)
        try:
            if error is not None:
                raise error
            received = _check_rows(table, "alltoall", 0)
        except ValueError:
            ctx._end("alltoall", start, 0, 0)
            raise
    result = payload.new_output((sum(received),) + data.shape[1:], data.dtype)
    if ctx.size == 1:
        payload.copy_into(result, data)
    else:
        ctx.comm.Alltoallv(_vector_spec(data, counts, row_size),
                           _vector_spec(result, received, row_size))
    ctx._end("alltoall", start, data.nbytes, result.nbytes)
    return payload.deliver(result)
