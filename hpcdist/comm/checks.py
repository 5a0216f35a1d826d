"""Cross-rank agreement checks: catch mismatched collectives before they hang."""

from contextlib import contextmanager

from ..exceptions import CollectiveMismatchError, HpcdistError
from .faults import raise_if_rank_failed
from .mpi import MPI

__all__ = ["agree", "format_ranks", "raise_on_every_rank", "validated_on_every_rank",
           "shared_error_type", "mark_raised_on_every_rank", "raised_on_every_rank",
           "watched"]

_EVERY_RANK = "hpcdist_raised_on_every_rank"


def mark_raised_on_every_rank(error):
    """Record on ``error`` that every rank raises it (returns ``error``).

    Such an error ends the collective work on all ranks together, so a
    program may report it once and exit instead of aborting the job
    (``hpcdist train`` does).
    """
    setattr(error, _EVERY_RANK, True)
    return error


def raised_on_every_rank(error):
    """Whether ``error`` was raised on every rank (see :func:`mark_raised_on_every_rank`)."""
    return getattr(error, _EVERY_RANK, False)


@contextmanager
def watched(ctx, name):
    """Mark ``name`` in flight on ``ctx`` for the stall watchdog while the block runs, for
    an exchange on the private communicator outside any collective (not counted in the
    statistics): a rank that died leaves the others waiting there too, and the watchdog
    must see them to end the job. The mark in place before is restored afterwards. With
    fault tolerance on, a lost rank met in the block raises
    :class:`~hpcdist.exceptions.RankFailedError`."""
    previous = ctx._inflight
    ctx._begin(name)
    try:
        yield
    except MPI.Exception as exc:
        raise_if_rank_failed(ctx, exc, name)
        raise
    finally:
        ctx._inflight = previous


#: built-in exception types a rank's failure is re-raised as on the other ranks
_BUILTIN_ERRORS = {cls.__name__: cls for cls in (
    ValueError, TypeError, KeyError, IndexError, FileNotFoundError, OSError, RuntimeError)}


def shared_error_type(name):
    """The exception class called ``name``: a built-in one above, or any
    :class:`HpcdistError` subclass (e.g. ``CheckpointError``); else HpcdistError."""
    if name in _BUILTIN_ERRORS:
        return _BUILTIN_ERRORS[name]
    pending = [HpcdistError]
    while pending:
        cls = pending.pop()
        if cls.__name__ == name:
            return cls
        pending.extend(cls.__subclasses__())
    return HpcdistError


def format_ranks(ranks):
    """``[0, 1, 2, 5]`` as ``"ranks 0-2,5"`` (``"rank 3"`` for one rank)."""
    ranks = sorted(ranks)
    spans, start = [], ranks[0]
    for previous, current in zip(ranks, ranks[1:] + [None]):
        if current is None or current != previous + 1:
            spans.append(f"{start}" if start == previous else f"{start}-{previous}")
            start = current
    return ("rank " if len(ranks) == 1 else "ranks ") + ",".join(spans)


def _grouped(values, verb):
    groups = {}
    for rank, value in enumerate(values):
        groups.setdefault(value, []).append(rank)
    return ", ".join(f"{format_ranks(ranks)} {verb} {value}" for value, ranks in groups.items())


def _consistent(all_fields):
    """Whether every field position holds at most one distinct non-None value."""
    if len({len(fields) for fields in all_fields}) != 1:
        return False
    return all(len({value for value in column if value is not None}) <= 1
               for column in zip(*all_fields))


def _render(fields):
    return " ".join(field for field in fields if field is not None) or "(no arguments)"


def agree(ctx, name, *fields):
    """Raise on every rank unless all ranks call ``name`` with matching ``fields``.

    Parameters
    ----------
    ctx : Context
        Its private communicator carries the comparison.
    name : str
        The operation, e.g. ``"allreduce"``.
    *fields : str or None
        What this rank passed, e.g. ``"float32[1024]", "op=sum"``; None
        matches anything (a broadcast receiver that passed no array).

    Raises
    ------
    CollectiveMismatchError
        On every rank, listing each rank's operation and arguments.
    """
    if ctx.size == 1:
        return
    with watched(ctx, f"{name} (check mode)"):
        signatures = ctx._private_comm.allgather((name, fields))
    names = {signature[0] for signature in signatures}
    if len(names) == 1 and _consistent([f for _, f in signatures]):
        return
    if len(names) == 1:
        message = f"{name}: " + _grouped([_render(f) for _, f in signatures], "passed")
    else:
        message = ("ranks called different collectives: "
                   + _grouped([f"{n}({_render(f)})" for n, f in signatures], "called"))
    raise mark_raised_on_every_rank(CollectiveMismatchError(message))


def raise_on_every_rank(ctx, error=None):
    """Collective: if any rank passes an exception, raise one on every rank.

    Every rank must call this (with ``error=None`` when all is well). A rank
    that failed re-raises its own exception; the others raise the same type
    (for built-in and hpcdist errors; else :class:`HpcdistError`) whose
    message names the failing ranks and their messages, so a bad input on
    one rank stops the whole job with a clear error instead of a hang.
    """
    if ctx.size == 1:
        if error is not None:
            raise mark_raised_on_every_rank(error)
        return
    report = None if error is None else (type(error).__name__, str(error))
    with watched(ctx, "raise_on_every_rank"):
        reports = ctx._private_comm.allgather(report)
    failed = {rank: report for rank, report in enumerate(reports) if report is not None}
    if not failed:
        return
    if error is not None:
        raise mark_raised_on_every_rank(error)
    type_name = next(iter(failed.values()))[0]
    error_type = shared_error_type(type_name)
    by_message = {}
    for rank, (_, message) in failed.items():
        by_message.setdefault(message, []).append(rank)
    text = "; ".join(f"{format_ranks(ranks)}: {message}" for message, ranks in by_message.items())
    raise mark_raised_on_every_rank(error_type(text))


@contextmanager
def validated_on_every_rank(ctx, errors=(ValueError, TypeError, HpcdistError)):
    """Run a block of input validation so that a failure on one rank fails all.

    Exceptions of type ``errors`` raised in the block are shared through
    :func:`raise_on_every_rank`; a block that succeeds still takes part in
    the exchange. Use it around checks whose outcome may differ by rank.

    Examples
    --------
    >>> with validated_on_every_rank(ctx):      # doctest: +SKIP
    ...     X = check_array(X_local)

    In a process that replaces a lost rank, before it has joined the others
    in :func:`hpcdist.resilient.run`, the block's errors raise there only:
    the other ranks checked the same values when they built their objects.
    """
    if getattr(getattr(ctx, "_fault_root", None), "_joining", False):
        yield
        return
    try:
        yield
    except errors as error:
        raise_on_every_rank(ctx, error)
        raise  # pragma: no cover - raise_on_every_rank always raises here
    raise_on_every_rank(ctx, None)
