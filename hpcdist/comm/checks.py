"""Cross-rank agreement checks: catch mismatched collectives before they hang."""

from ..exceptions import CollectiveMismatchError

__all__ = ["agree", "format_ranks"]


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
    signatures = ctx._private_comm.allgather((name, fields))
    names = {signature[0] for signature in signatures}
    if len(names) == 1 and _consistent([f for _, f in signatures]):
        return
    if len(names) == 1:
        message = f"{name}: " + _grouped([_render(f) for _, f in signatures], "passed")
    else:
        message = ("ranks called different collectives: "
                   + _grouped([f"{n}({_render(f)})" for n, f in signatures], "called"))
    raise CollectiveMismatchError(message)
