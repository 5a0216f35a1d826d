"""End the whole job when one rank dies, instead of leaving the others waiting."""

import faulthandler
import os
import socket
import sys
import threading
import time
import traceback

from .mpi import MPI

__all__ = ["install_abort_hook", "abort_job"]

_INSTALLED = []
_FORWARD_SECONDS = 1.0
_EXIT_SECONDS = 1.0
_DEVNULL = []  # the file faulthandler writes to must stay open


def abort_job(message, errorcode=1):
    """Print ``message`` to stderr and abort every rank of ``MPI.COMM_WORLD``.

    Should the abort itself block (under srun, once Slurm is already tearing
    the step down, MPICH's PMI-2 abort was seen to wait until Slurm's
    SIGKILL), the process ends by itself :data:`_EXIT_SECONDS` later.
    """
    try:
        sys.stderr.write(message if message.endswith("\n") else message + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        # give the launcher a moment to forward the message before the job is torn down
        time.sleep(_FORWARD_SECONDS)
    finally:
        # a timer in C (no interpreter lock needed) that ends the process
        _DEVNULL.append(open(os.devnull, "w"))
        faulthandler.dump_traceback_later(_EXIT_SECONDS, exit=True, file=_DEVNULL[-1])
        MPI.COMM_WORLD.Abort(errorcode)


def _report(rank, size, exc_type, exc, tb, where):
    lines = traceback.format_exception(exc_type, exc, tb)
    body = "".join(f"[rank {rank}] {line}" for chunk in lines for line in chunk.splitlines(True))
    return (f"hpcdist: rank {rank} of {size} on {socket.gethostname()} raised an uncaught "
            f"exception{where}; aborting all {size} ranks (abort_on_error=True)\n{body}")


def install_abort_hook():
    """Abort the job on an uncaught exception in any thread of this rank.

    The traceback is printed with the rank first, so the failing rank is
    obvious in a log that mixes all ranks' output.
    """
    if _INSTALLED:
        return
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        if issubclass(exc_type, SystemExit):
            return previous_hook(exc_type, exc, tb)
        abort_job(_report(rank, size, exc_type, exc, tb, ""))

    def thread_excepthook(args):
        if args.exc_type is SystemExit:
            return
        where = f" in thread {args.thread.name!r}" if args.thread is not None else ""
        abort_job(_report(rank, size, args.exc_type, args.exc_value, args.exc_traceback, where))

    sys.excepthook = excepthook
    threading.excepthook = thread_excepthook
    _INSTALLED.append(previous_hook)
