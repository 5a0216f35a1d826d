"""Data movement: broadcast, allgather, gather, scatter and alltoall."""

import math

import numpy as np

from .._partition import balanced_counts, offsets_of, validate_counts
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .agreement import Described, agree_config
from .calls import (
    DEVICE_DIRECT,
    DEVICE_STAGED,
    HOST,
    NP_SCALAR,
    PY_SCALAR,
    describe,
    resolve,
    resolve_receiver,
    spec_of,
)
from .checks import agree, format_ranks, mark_raised_on_every_rank, shared_error_type
from .dtypes import dtype_code, dtype_from_code
from .headers import (
    BAD_INPUT,
    HEADER_BYTES,
    MAX_DIMS,
    NO_INPUT,
    OK,
    pack_header,
    read_inline,
    unpack_header,
    write_inline,
)
from .reductions import check_root

__all__ = ["broadcast", "allgather", "gather", "scatter", "alltoall"]

# one eager message: the header and a small array (MPICH broadcasts 4 KiB about
# as fast as 1 KiB on shared memory; 8 KiB takes twice as long)
_PACKET_BYTES = 4096
_INLINE_BYTES = _PACKET_BYTES - HEADER_BYTES
_KNOWN_SHAPE_FIX = ("every rank must pass an array of the root's shape and dtype (or use "
                    "shape_known=False)")


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
    if type(root) is not int or not 0 <= root < ctx.size:
        root = check_root(root, ctx, "broadcast")
    if not shape_known:
        if ctx.rank == root:
            return _broadcast_root(x, root, ctx)
        return _broadcast_receive(x, root, ctx)
    # one MPI broadcast straight into every rank's array
    is_root = ctx.rank == root
    call = resolve(x, ctx, "broadcast", incoming=not is_root, array_fix=_KNOWN_SHAPE_FIX)
    if ctx.check:
        agree(ctx, "broadcast", call.describe(), f"root={root}", "shape_known")
    start = ctx._begin("broadcast", call, root)
    if ctx.size > 1:
        ctx.comm.Bcast(call.spec, root)
    nbytes = call.data.nbytes
    if is_root:
        ctx._end("broadcast", start, nbytes, 0)
        return x
    ctx._end("broadcast", start, 0, nbytes)
    return x if call.target is None else call.hand_back()


def _root_call(x, ctx, name, root):
    """Resolve the root's input and describe it in the context's packet.

    Returns the call and, when its data rides inline in the packet (small
    host data), where the data starts there (else None). On bad input the
    root tells the other ranks (they raise too), then raises.
    """
    packet = ctx._packet or _packet_of(ctx)
    try:
        if x is None:
            raise InvalidArgumentError(
                f"{name}: the root (rank {root}) passed None; the root must pass "
                f"the data to send")
        call = resolve(x, ctx, name)
        data = call.data
        inline = call.kind != DEVICE_DIRECT and data.nbytes <= _INLINE_BYTES
        offset = pack_header(packet, OK, data, call.kind, call.scalar_code, inline)
    except (TypeError, ValueError):
        pack_header(packet, NO_INPUT if x is None else BAD_INPUT)
        if ctx.size > 1:
            ctx._private_comm.Bcast(packet, root=root)
        raise
    return call, offset if inline else None


def _packet_of(ctx):
    """The context's reusable packet: a header and, for small arrays, their bytes."""
    if ctx._packet is None:
        ctx._packet = memoryview(bytearray(_PACKET_BYTES))
    return ctx._packet


def _describe_input(x):
    """:func:`describe` for anything a caller may pass (None, numbers, arrays)."""
    if x is None or (hasattr(x, "shape") and hasattr(x, "dtype")):
        return describe(x)
    return describe(np.asarray(x)) if isinstance(x, (int, float, complex)) else type(x).__name__


def _broadcast_root(x, root, ctx):
    if ctx.check:  # before the root validates: its error path must meet the same calls
        agree(ctx, "broadcast", _describe_input(x), f"root={root}")
    call, inline_at = _root_call(x, ctx, "broadcast", root)
    data = call.data
    start = ctx._begin("broadcast", call, root)
    if ctx.size > 1:
        packet = ctx._packet
        if inline_at is not None:
            write_inline(packet, inline_at, data)
        ctx._private_comm.Bcast(packet, root)
        if inline_at is None:
            ctx.comm.Bcast(call.spec, root)
    ctx._end("broadcast", start, data.nbytes, 0)
    return x


def _raise_root_failure(status, root, name):
    if status == NO_INPUT:
        raise InvalidArgumentError(
            f"{name}: the root (rank {root}) passed None; the root must pass "
            f"the data to send")
    raise InvalidArgumentTypeError(
        f"{name}: the root (rank {root}) passed data that cannot be sent "
        f"(see the error on rank {root})")


def _broadcast_receive(x, root, ctx):
    packet = ctx._packet or _packet_of(ctx)
    if ctx.check:
        agree(ctx, "broadcast", None if x is None else describe(x), f"root={root}")
    start = ctx._begin("broadcast", x, root)
    ctx._private_comm.Bcast(packet, root)
    status, shape, dtype, kind, scalar_type, inline, offset = unpack_header(packet)
    if (inline and type(x) is np.ndarray and x.shape == shape and x.dtype is dtype
            and x.flags.c_contiguous and status == OK):
        # the common case, kept short: small data into the receiver's own array
        read_inline(packet, offset, x)
        ctx._end("broadcast", start, 0, x.nbytes)
        return x
    if status != OK:
        ctx._end("broadcast", start, 0, 0)
        _raise_root_failure(status, root, "broadcast")
    try:
        call = resolve_receiver(x, shape, dtype, ctx, "broadcast", root, kind, scalar_type)
    except (TypeError, ValueError):
        nbytes = math.prod(shape) * dtype.itemsize
        if not inline:  # take part in the data broadcast anyway, then report
            ctx.comm.Bcast(np.empty(nbytes, dtype=np.uint8), root)
        ctx._end("broadcast", start, 0, nbytes)
        raise
    data = call.data
    if not inline:
        ctx.comm.Bcast(call.spec, root)
    elif call.on_host:
        read_inline(packet, offset, data)
    else:  # a direct device array: through the host
        host = np.empty(shape, dtype=dtype)
        read_inline(packet, offset, host)
        call.backend.from_host(host, out=data)
    ctx._end("broadcast", start, 0, data.nbytes)
    return x if x is not None and call.target is None else call.hand_back()


# -- gathers -------------------------------------------------------------------------------
def _normalize_axis(axis, ndim, name):
    if not isinstance(axis, (int, np.integer)) or not -ndim <= axis < ndim:
        raise InvalidArgumentError(f"{name}: axis={axis!r} is out of range for a {ndim}-d array; "
                                   f"use 0..{ndim - 1} (or negative from the end)")
    return int(axis) % ndim


def _rows_first(call, axis, name):
    """The call's data with ``axis`` moved to the front, contiguous."""
    data = call.data
    if data.ndim == 0:
        data = data.reshape(1)
        if call.kind in (PY_SCALAR, NP_SCALAR):
            call.kind = HOST  # gathered scalars come back as an array
    axis = _normalize_axis(axis, data.ndim, name)
    if axis != 0:
        if call.kind == DEVICE_DIRECT:
            # reorder on the host: the result comes back to the device as when staged
            host = np.empty(data.shape, dtype=data.dtype)
            call.backend.to_host(data, host)
            data, call.kind, call.output_slot = host, DEVICE_STAGED, None
        data = np.ascontiguousarray(np.moveaxis(data, axis, 0))
    if data is not call.data:
        call.data, call.spec = data, spec_of(data)
    return data, axis


def _describe_rows(status, data):
    """One rank's row description: status, rows, dtype, ndim and the other dimensions."""
    words = np.zeros(4 + MAX_DIMS, dtype=np.int64)
    words[0] = status
    if data is None:
        return words
    shape = data.shape
    if len(shape) > MAX_DIMS:
        raise InvalidArgumentError(f"arrays of more than {MAX_DIMS} dimensions are not supported")
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
        raise InvalidArgumentError(f"{name}: {format_ranks(failed)} passed invalid input (see the "
                                   f"error there); no data was exchanged")
    shown = []
    for words in rows:
        dims = [str(n) for n in words[4:3 + words[3]]]
        dims.insert(axis, "*")
        shown.append(f"{dtype_from_code(words[2])}[{','.join(dims)}]")
    raise InvalidArgumentError(
        f"{name}: ranks disagree on the dtype or on the dimensions other than "
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
    spec = spec_of(buffer)
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
        Every rank's size along ``axis`` when known, the same list on every
        rank. It is checked on every rank through the agreement check (16
        bytes a rank), so a rank whose rows do not match its count, or a list
        that differs across ranks, raises on every rank.
    ctx : Context

    Returns
    -------
    array
        The concatenation in rank order.
    """
    call = resolve(x, ctx, "allgather")
    data = call.data
    if axis != 0 or not data.ndim:
        data, axis = _rows_first(call, axis, "allgather")
    rows = data.shape[0]
    equal = False
    if counts is not None:
        counts = gather_counts(counts, rows, axis, ctx, "allgather")
        equal = counts.count(rows) == ctx.size
    if ctx.check:
        agree(ctx, "allgather", _describe_except(data, axis), f"axis={axis}")
    start = ctx._begin("allgather", call)
    if counts is None:
        counts = _exchange_rows(ctx, data, "allgather", axis, start)
    shape = data.shape
    plain = call.kind == HOST  # the common case: a plain host array, kept short
    result_shape = (rows * ctx.size if equal else sum(counts),) + shape[1:]
    result = np.empty(result_shape, data.dtype) if plain else call.new_output(result_shape)
    if ctx.size == 1:
        call.copy_into(result, data)
    elif equal or counts.count(rows) == len(counts):
        spec = call.spec
        ctx.comm.Allgather(spec, (result, spec[1]) if spec[0] is data else call.spec_of(result))
    else:
        ctx.comm.Allgatherv(call.spec, _vector_spec(result, counts, math.prod(shape[1:])))
    ctx._end("allgather", start, data.nbytes, result.nbytes)
    if axis != 0:
        result = _from_rows(result, axis)
    return result if plain else call.deliver(result)


def gather_counts(counts, rows, axis, ctx, name):
    """Collective: a gather's ``counts`` (every rank's size along ``axis``) checked on
    every rank: whole non-negative numbers, one per rank, each rank's equal to its
    ``rows``, and the same list on every rank. A mistake on one rank raises on every
    rank (one agreement check, paid on the ``counts=`` path only)."""
    mistake = None
    try:
        counts = validate_counts(counts, ctx.size, None, name)
        if counts[ctx.rank] != rows:
            raise InvalidArgumentError(
                f"{name}: counts[{ctx.rank}]={counts[ctx.rank]} but rank {ctx.rank} passed "
                f"{rows} along axis={axis}; pass each rank's size along axis={axis}, the same "
                "list on every rank")
    except InvalidArgumentError as error:
        mistake = error
    agree_config(ctx, name, {"counts": counts if mistake is None else Described(
        f"a mistake ({mistake})")})
    if mistake is not None:  # the same mistake on every rank: each raises its own
        raise mark_raised_on_every_rank(mistake)
    return counts


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
    call = resolve(x, ctx, "gather")
    data, axis = _rows_first(call, axis, "gather")
    if ctx.check:
        agree(ctx, "gather", _describe_except(data, axis), f"axis={axis}", f"root={root}")
    start = ctx._begin("gather", call, root)
    counts = _exchange_rows(ctx, data, "gather", axis, start)
    row_size = math.prod(data.shape[1:])
    is_root = ctx.rank == root
    result = call.new_output((sum(counts),) + data.shape[1:]) if is_root else None
    if ctx.size == 1:
        call.copy_into(result, data)
    else:
        ctx.comm.Gatherv(call.spec,
                         _vector_spec(result, counts, row_size) if is_root else None, root=root)
    ctx._end("gather", start, data.nbytes, result.nbytes if is_root else 0)
    return call.deliver(_from_rows(result, axis)) if is_root else None


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
    start = ctx._begin("scatter", None, root)
    header = ctx._private_comm.bcast(plan[1:] if is_root else None, root=root) if ctx.size > 1 \
        else plan[1:]
    if header[0] == "error":
        ctx._end("scatter", start, 0, 0)
        raise shared_error_type(header[1])(
            f"scatter: the root (rank {root}) rejected its input: {header[2]}")
    _, dtype, rest, counts, axis, device = header
    row_size = math.prod(rest)
    if is_root:
        call, data = plan[0]
        result = call.new_output((counts[ctx.rank],) + rest, dtype)
    else:
        call, data = None, None
        result = np.empty((counts[ctx.rank],) + rest, dtype=dtype)
    if ctx.size == 1:
        call.copy_into(result, data)
    else:
        ctx.comm.Scatterv(_vector_spec(data, counts, row_size) if is_root else None,
                          spec_of(result), root=root)
    ctx._end("scatter", start, data.nbytes if is_root else 0, result.nbytes)
    result = _from_rows(result, axis)
    if is_root:
        return call.deliver(result)
    return ctx.xp.asarray(result) if device and ctx.xp is not np else result


def _scatter_plan(x, axis, counts, ctx):
    if x is None:
        raise InvalidArgumentError(
            f"scatter: the root (rank {ctx.rank}) passed None; the root must pass "
            f"the array to split")
    call = resolve(x, ctx, "scatter")
    if call.data.ndim == 0:
        raise InvalidArgumentError("scatter: x must have at least one dimension to split")
    data, axis = _rows_first(call, axis, "scatter")
    rows = data.shape[0]
    counts = (balanced_counts(rows, ctx.size) if counts is None
              else validate_counts(counts, ctx.size, rows, "scatter"))
    return ((call, data), "ok", np.dtype(data.dtype), tuple(data.shape[1:]), counts, axis,
            call.on_device)


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
    call = resolve(x, ctx, "alltoall")
    data = call.data
    if data.ndim == 0:
        raise InvalidArgumentError(
            "alltoall: x must have at least one dimension to split along axis 0")
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
    start = ctx._begin("alltoall", call)
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
    result = call.new_output((sum(received),) + data.shape[1:])
    if ctx.size == 1:
        call.copy_into(result, data)
    else:
        ctx.comm.Alltoallv(_vector_spec(data, counts, row_size),
                           _vector_spec(result, received, row_size))
    ctx._end("alltoall", start, data.nbytes, result.nbytes)
    return call.deliver(result)
