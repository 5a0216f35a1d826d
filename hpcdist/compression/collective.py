"""compressed_allreduce: combine every rank's compressed array."""

import weakref

import numpy as np

from ..comm import allgather, allreduce, resolve_context
from ..comm.agreement import Described, agree_config
from ..comm.checks import format_ranks, mark_raised_on_every_rank
from ..comm.ops import check_op_for_dtype
from ..exceptions import ConfigMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from .base import finish, kernel_dtype, settings_text

__all__ = ["compressed_allreduce", "checked_compression"]

_OPS = ("mean", "sum")
#: compressor -> {tensor name: [array description, payload arrays]} of the names whose
#: settings every rank agreed on (checked once a name)
_AGREED = weakref.WeakKeyDictionary()
_COMPRESSOR_EXAMPLES = ("hpcdist.compression.FP16Compressor(), TopKCompressor(0.01), "
                        "PowerSGDCompressor(rank=1) or ErrorFeedback(SignCompressor())")


def checked_compression(owner, compression):
    """``compression`` if it is None or a compressor that :func:`compressed_allreduce`
    takes (``compress`` and ``decompress`` methods, ``collective`` ``"allreduce"`` or
    ``"allgather"``); else an error from ``owner`` naming it and the fix."""
    if compression is None:
        return None
    collective = getattr(compression, "collective", None)
    if (collective in ("allreduce", "allgather")
            and callable(getattr(compression, "compress", None))
            and callable(getattr(compression, "decompress", None))):
        return compression
    raise InvalidArgumentTypeError(
        f"{owner}: compression={compression!r} is not a compressor (it needs compress, "
        f"decompress and collective 'allreduce' or 'allgather'; it has collective="
        f"{collective!r}); pass None or a compressor object, e.g. {_COMPRESSOR_EXAMPLES}")


def _parse_op(op):
    text = str(getattr(op, "value", op)).lower()
    if text not in _OPS:
        raise InvalidArgumentError(f"compressed_allreduce: op={op!r} should be 'mean' or 'sum'")
    return text


def _agree_on_first_use(compressor, x, name, op, ctx):
    """Collective at a name's first call: compare the compressor's settings (its type and
    parameters, e.g. a random-k seed or a PowerSGD rank), the name, op, dtype and shape
    across ranks through the agreement check; later calls of the name cost nothing.

    Returns the name's record ``[array description, payload arrays or None]``, or None
    at one rank (nothing to compare)."""
    if ctx.size == 1:
        return None
    try:
        agreed = _AGREED.setdefault(compressor, {})
    except TypeError:  # a compressor that takes no weak reference: checked at every call
        agreed = {}
    array = f"{np.dtype(x.dtype)}{list(np.shape(x))}"
    if name not in agreed:
        agree_config(ctx, "compressed_allreduce", {
            "compressor": Described(settings_text(compressor)), "name": name, "op": op,
            "array": Described(array)},
            fix="pass the same compressor settings, names and arrays on every rank")
        agreed[name] = [array, None]
    return agreed[name]


def _compress(compressor, x, name, record):
    """``(payload, meta, None)``, or for a name already sent by the "allgather" protocol
    ``(None, None, error)`` when the compressor refuses ``x`` on this rank (another shape
    or dtype than before): the rank then sends a mark in the size exchange that every
    payload allgather makes anyway (no extra message), so that every rank raises."""
    try:
        return (*compressor.compress(x, name), None)
    except (InvalidArgumentError, InvalidArgumentTypeError) as error:
        if record is None or record[1] is None:
            raise
        return None, None, error


def _nbytes(payload):
    return sum(int(np.asarray(a).nbytes) for a in payload)


def _allreduce_rounds(compressor, payload, meta, ctx):
    """Sum each payload array over the ranks, round after round (PowerSGD has two)."""
    sent = received = 0
    while True:
        sent += _nbytes(payload)
        if ctx.size > 1:
            payload = tuple(allreduce(np.ascontiguousarray(a), op="sum", ctx=ctx)
                            for a in payload)
        received += _nbytes(payload)
        step = getattr(compressor, "next_round", None)
        step = step(payload, meta) if step is not None else None
        if step is None:
            return compressor.decompress(payload, meta), sent, received
        payload, meta = step


def _allgather_payloads(payload, ctx, mistake=None, n_arrays=None, name=None):
    """Every rank's payload (a list in rank order); sizes are exchanged first. A rank
    with a ``mistake`` (no payload) sends sizes of -1 there: every rank raises."""
    flats = [] if mistake else [np.ascontiguousarray(a).reshape(-1) for a in payload]
    if ctx.size == 1:
        return [tuple(flats)], _nbytes(flats)
    sizes = np.array([[-1] * n_arrays if mistake else [a.size for a in flats]], dtype=np.int64)
    all_sizes = allgather(sizes, ctx=ctx)  # (size, n_arrays)
    marked = [rank for rank, row in enumerate(all_sizes) if (row < 0).any()]
    if marked:
        raise mark_raised_on_every_rank(mistake or ConfigMismatchError(
            f"compressed_allreduce: {format_ranks(marked)} passed {name!r} with another dtype "
            "or shape than at its first call; give each tensor its own name"))
    per_rank = [[] for _ in range(ctx.size)]
    received = 0
    for j, a in enumerate(flats):
        counts = [int(c) for c in all_sizes[:, j]]
        gathered = allgather(a, counts=counts, ctx=ctx)
        received += gathered.nbytes
        offsets = np.concatenate(([0], np.cumsum(counts)))
        for r in range(ctx.size):
            per_rank[r].append(gathered[offsets[r]:offsets[r + 1]])
    return [tuple(p) for p in per_rank], received


def _sum_decompressed(compressor, payloads, meta):
    """Sum of every rank's decompressed payload, in rank order.

    Accumulates in the kernels' dtype (float32 or float64). A compressor with
    ``decompress_add(out, payload, meta)`` adds into the flat buffer itself
    (top-k: a scatter-add of k values instead of a dense temporary).
    """
    out = np.zeros(int(np.prod(meta["shape"], dtype=np.int64)), dtype=kernel_dtype(meta["dtype"]))
    add = getattr(compressor, "decompress_add", None)
    for payload in payloads:
        if add is not None:
            add(out, payload, meta)
        else:
            out += np.asarray(compressor.decompress(payload, meta)).reshape(-1)
    return finish(out, meta)


def compressed_allreduce(x, compressor, *, name, op="mean", ctx=None):
    """Allreduce ``x`` over the ranks, sending it compressed.

    Parameters
    ----------
    x : ndarray
        This rank's array (the same shape and dtype on every rank).
    compressor : compressor
        Its ``collective`` decides the protocol:

        ``"allreduce"``
            each payload array is summed over the ranks and the sum is
            decompressed once. A compressor with a ``next_round(payload,
            meta)`` method gets the summed payload and may return another
            ``(payload, meta)`` to sum (PowerSGD: first ``P``, then ``Q``),
            or None when done.
        ``"allgather"``
            the payload arrays of all ranks (sizes may differ) are gathered,
            each rank's payload is decompressed with this rank's meta and
            the results are summed in rank order.
    name : str
        The tensor's name; the compressor keeps per-name state (residuals,
        warm starts, seeds). Use the same names in the same order on every
        rank. A name's first call compares the compressor's settings, the
        name, ``op`` and the array's dtype and shape across ranks (the
        agreement check: a difference raises ``ConfigMismatchError`` on every
        rank); the compressors refuse a name later given another shape or
        dtype. Under the "allgather" protocol every rank then raises (the
        refusal travels in the size exchange); under "allreduce" the refusing
        rank raises alone, and the others wait until check mode or the stall
        watchdog ends the job.
    op : {"mean", "sum"}, default="mean"
    ctx : Context, optional

    Returns
    -------
    ndarray of x's shape and dtype
        The (approximate) sum or mean over the ranks, the same on every rank.

    Notes
    -----
    ``ctx.stats()["compressed_allreduce"]`` counts one call per invocation,
    ``bytes_sent`` = the payload bytes this rank contributed (all rounds),
    ``bytes_received`` = the payload bytes it got back (the gathered payloads
    of all ranks for "allgather"). The few bytes of the size exchange are not
    counted there (they appear under ``allgather``, as do the inner
    collectives).
    """
    ctx = resolve_context(ctx)
    op = _parse_op(op)
    collective = checked_compression("compressed_allreduce", compressor).collective
    check_op_for_dtype(op, np.dtype(x.dtype))  # the mean of integers: as hpcdist.allreduce
    record = _agree_on_first_use(compressor, x, name, op, ctx)
    if collective == "allgather":
        payload, meta, mistake = _compress(compressor, x, name, record)
    else:
        payload, meta = compressor.compress(x, name)
    start = ctx._begin("compressed_allreduce")
    if collective == "allreduce":
        result, sent, received = _allreduce_rounds(compressor, payload, meta, ctx)
    else:
        if record is not None:
            record[1] = record[1] or len(payload)  # payload arrays: what a mark sends
        sent = 0 if mistake else _nbytes(payload)
        payloads, received = _allgather_payloads(payload, ctx, mistake,
                                                 record[1] if record else None, name)
        result = _sum_decompressed(compressor, payloads, meta)
    if op == "mean" and ctx.size > 1:
        result /= ctx.size
    ctx._end("compressed_allreduce", start, sent, received)
    return result
