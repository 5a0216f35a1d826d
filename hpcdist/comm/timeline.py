"""Chrome-trace timelines of every collective, one track per rank."""

import contextlib
import json
import os
import time

from .._checks import check_writable_file, path_of
from ..exceptions import DataFileError, InvalidStateError
from .checks import validated_on_every_rank, watched
from .default import resolve_context
from .trace import RECORDING

__all__ = ["timeline"]


@contextlib.contextmanager
def timeline(path, ctx=None):
    """Record every collective of every context into one Chrome-trace file.

    All ranks enter and leave the block together (it synchronises them);
    rank 0 writes ``path``, which chrome://tracing or Perfetto opens with one
    track per rank.

    Parameters
    ----------
    path : str or os.PathLike
        The JSON file to write (only rank 0's value is used). Checked on
        entry: its folder must exist and be writable.
    ctx : Context, optional
        The context whose ranks take part (default: the default context).

    Raises
    ------
    InvalidArgumentTypeError, DataFileError, DataFileNotFoundError
        On every rank, on entry (an unusable ``path``) or on leaving (writing
        failed).

    Examples
    --------
    >>> with hpcdist.timeline("trace.json"):    # doctest: +SKIP
    ...     hpcdist.allreduce(x)
    """
    ctx = resolve_context(ctx)
    if RECORDING:
        raise InvalidStateError("hpcdist.timeline is already recording; nest no timelines")
    with validated_on_every_rank(ctx):  # every rank waits here for all: the block's start
        if ctx.rank == 0:
            check_writable_file(path_of(path, "timeline"), "timeline")
    events = []
    RECORDING.append((events, time.perf_counter()))
    try:
        yield path
    finally:
        _, origin = RECORDING.pop()
        with watched(ctx, "timeline"):
            gathered = ctx.comm.gather(_to_chrome_events(events, origin, ctx.rank), root=0)
        with validated_on_every_rank(ctx):
            if ctx.rank == 0:
                _write(path, gathered, ctx.size)


def _to_chrome_events(events, origin, rank):
    return [{"name": name, "cat": "collective", "ph": "X", "pid": rank, "tid": 0,
             "ts": (start - origin) * 1e6, "dur": seconds * 1e6,
             "args": {"bytes_sent": sent, "bytes_received": received}}
            for name, start, seconds, sent, received in events]


def _write(path, per_rank_events, size):
    trace = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0,
              "args": {"name": f"rank {rank}"}} for rank in range(size)]
    for events in per_rank_events:
        trace.extend(events)
    tmp = f"{os.fspath(path)}.tmp"
    try:
        with open(tmp, "w") as stream:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, stream)
        os.replace(tmp, path)
    except OSError as error:
        raise DataFileError(f"timeline: writing {path!r} failed: {error}") from error
