"""Per-rank wrapper used by ``hpcdist run``: ``python -m hpcdist.launch.rank_wrapper CMD ...``.

The launcher starts this wrapper as every rank. It exports ``RANK``,
``WORLD_SIZE`` and ``LOCAL_RANK`` (for libraries that expect torch-style
variables), runs ``CMD`` as a child that inherits everything else (the MPI
library in ``CMD`` still finds its launcher), forwards SIGTERM, SIGINT and
SIGUSR1 to it, and, when ``HPCDIST_RUN_DIR`` is set, records how the rank
ended in ``HPCDIST_RUN_DIR/rank-R.status`` (``exit N`` or ``signal NAME``)
so that ``hpcdist run`` can say which rank failed and how. The wrapper
exits with the child's code (128 + signal number for a signal); in a job
that survives lost ranks (``HPCDIST_FAULT_TOLERANCE`` set, as ``hpcdist run
--fault-tolerant`` does) a child ended by a signal ends the wrapper by the
same signal, so that Open MPI's launcher sees a rank killed, not a rank that
exited with an error: its runtime (PRRTE 3.0, in the Open MPI 5.0 wheel)
counts a rank on another node that exits with an error twice, and ends the
whole job, survivors included, once half the ranks are lost. Before the
command starts, the MPICH shared-memory segments that killed jobs left in
/dev/shm are removed (:mod:`hpcdist.launch.shm_segments`): one with the name
this job's MPI will use would make its ``MPI_Init`` fail.

It never imports MPI.
"""

import ctypes
import os
import resource
import signal
import subprocess
import sys
import time

from .environment import rank_layout
from .shm_segments import remove_stale_segments

__all__ = ["main", "describe_status"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def describe_status(returncode):
    """``"exit 3"`` or ``"signal SIGKILL"`` for a :class:`subprocess.Popen` return code."""
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit {returncode}"


def _die_with_parent():
    """In the child: get SIGKILL when the wrapper dies (Linux), so that a
    launcher tearing the job down never leaves a rank behind, hung in MPI."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _end_by_signal(signum):
    """End this process by signal ``signum`` (no core file), as its child ended."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if signum != signal.SIGKILL:
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _record(rank, text):
    directory = os.environ.get("HPCDIST_RUN_DIR")
    if not directory or rank is None:
        return
    path = os.path.join(directory, f"rank-{rank}.status")
    with open(path + ".tmp", "w") as handle:
        handle.write(text + "\n")
    os.replace(path + ".tmp", path)


def _attempt_start():
    """When this attempt of ``hpcdist run`` started (epoch seconds; now without one)."""
    try:
        return float(os.environ["HPCDIST_ATTEMPT_STARTED"])
    except (KeyError, ValueError):
        return time.time()


def main(argv=None):
    """Run one rank's command; returns the exit code to use."""
    started = _attempt_start()
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: python -m hpcdist.launch.rank_wrapper CMD [ARGS...]", file=sys.stderr)
        return 2
    rank, size, local_rank = rank_layout()
    env = dict(os.environ)
    for name, value in (("RANK", rank), ("WORLD_SIZE", size), ("LOCAL_RANK", local_rank)):
        if value is not None:
            env[name] = str(value)
    remove_stale_segments(created_before=started)  # what killed jobs left: see the module
    try:
        # close_fds=False: Hydra's PMI talks to the rank over an inherited descriptor.
        # A session of its own: a signal sent to the launcher's process group
        # reaches the command once, through this wrapper, not twice.
        child = subprocess.Popen(argv, env=env, close_fds=False, start_new_session=True,
                                 preexec_fn=_die_with_parent)
    except OSError as error:
        _record(rank, f"exit 127 ({error.strerror}: {argv[0]})")
        print(f"[rank {rank}] hpcdist run: cannot start {argv[0]!r}: {error.strerror}",
              file=sys.stderr)
        return 127
    for signum in _FORWARDED:
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    returncode = child.wait()
    _record(rank, describe_status(returncode))
    if returncode < 0 and os.environ.get("HPCDIST_FAULT_TOLERANCE"):
        _end_by_signal(-returncode)
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())
