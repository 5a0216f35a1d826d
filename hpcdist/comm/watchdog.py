"""The stall watchdog: a collective that never completes ends the job with a diagnosis.

Each rank runs one daemon thread. It answers status queries from other ranks
on a private communicator, and when its own rank has been inside one
collective for longer than ``HPCDIST_STALL_TIMEOUT`` seconds it asks every
rank where it is, prints which ranks have not arrived and what they are doing
instead, and aborts the job.
"""

import os
import socket
import sys
import threading
import time
import weakref

import numpy as np

from .abort import abort_job
from .checks import format_ranks
from .mpi import MPI

__all__ = ["Watchdog", "stall_timeout_from_env", "running_watchdog", "start_watchdog",
           "stop_watchdog"]

_QUERY, _REPLY = 1, 2
_POLL_SECONDS = 0.25
_REPLY_GRACE_SECONDS = 5.0
_RUNNING = []  # the process's watchdog, while one runs


def running_watchdog():
    """The process's running :class:`Watchdog`, or None."""
    return _RUNNING[0] if _RUNNING else None


def start_watchdog(timeout):
    """Start the process's watchdog on a duplicate of ``MPI.COMM_WORLD`` (once)."""
    if not _RUNNING:
        _RUNNING.append(Watchdog(MPI.COMM_WORLD.Dup(), timeout))


def stop_watchdog():
    """Stop the process's watchdog, if one runs, and free its communicator."""
    if _RUNNING:
        watchdog = _RUNNING.pop()
        watchdog.stop()
        watchdog.comm.Free()


def stall_timeout_from_env():
    """``HPCDIST_STALL_TIMEOUT`` in seconds (default 300; 0 turns the watchdog off)."""
    value = os.environ.get("HPCDIST_STALL_TIMEOUT", "300").strip()
    try:
        seconds = float(value)
    except ValueError:
        raise ValueError(f"HPCDIST_STALL_TIMEOUT={value!r} should be a number of seconds "
                         f"(0 turns the stall watchdog off)") from None
    if seconds < 0:
        raise ValueError(f"HPCDIST_STALL_TIMEOUT={value!r} should be >= 0 (0 turns it off)")
    return seconds


class Watchdog:
    """Watches the collectives of every context of this process.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        A private duplicate of the world communicator (owned by the watchdog).
    timeout : float
        Seconds a collective may take before the job is aborted.
    """

    def __init__(self, comm, timeout):
        self.comm = comm
        self.timeout = timeout
        self._contexts = weakref.WeakSet()
        self._question = np.zeros(1, dtype=np.int64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpcdist-watchdog", daemon=True)
        self._thread.start()

    def watch(self, ctx):
        """Include ``ctx``'s collectives."""
        self._contexts.add(ctx)

    def stop(self):
        """Stop the thread (before the communicator is freed)."""
        self._stop.set()
        self._thread.join()

    def _status(self):
        """(operation, call number, seconds inside, communicator size) or None when idle."""
        now = time.perf_counter()
        for ctx in list(self._contexts):
            name, since = ctx._inflight_name, ctx._inflight_since
            if name is not None:
                return name, ctx._calls + 1, now - since, ctx.size
        return None

    def _run(self):
        self._query = np.zeros(1, dtype=np.int64)
        self._request = self.comm.Irecv(self._query, source=MPI.ANY_SOURCE, tag=_QUERY)
        try:
            while not self._stop.wait(_POLL_SECONDS):
                self._answer_queries()
                current = self._status()
                if current is not None and current[2] > self.timeout:
                    self._diagnose_and_abort(current)
        finally:
            if self._request != MPI.REQUEST_NULL:
                self._request.Cancel()
                self._request.Wait()

    def _answer_queries(self):
        status = MPI.Status()
        while self._request.Test(status):
            self.comm.send(self._status(), dest=status.Get_source(), tag=_REPLY)
            self._request = self.comm.Irecv(self._query, source=MPI.ANY_SOURCE, tag=_QUERY)

    def _diagnose_and_abort(self, current):
        name, call, seconds, _ = current
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        others = [r for r in range(size) if r != rank]
        for other in others:  # the question buffer lives as long as the watchdog
            self.comm.Isend(self._question, dest=other, tag=_QUERY).Free()
        replies = {}
        deadline = time.monotonic() + _REPLY_GRACE_SECONDS
        while len(replies) < len(others) and time.monotonic() < deadline:
            status = MPI.Status()
            if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_REPLY, status=status):
                source = status.Get_source()
                replies[source] = self.comm.recv(source=source, tag=_REPLY)
            else:
                self._answer_queries()  # another stalled rank may be asking us
                time.sleep(0.01)
        waiting, elsewhere, silent = [rank], [], []
        for other in others:
            if other not in replies:
                silent.append(other)
            elif replies[other] is not None and replies[other][0] == name:
                waiting.append(other)
            else:
                elsewhere.append(other)
        lines = [f"hpcdist: stall on rank {rank} ({socket.gethostname()}): {name} (call #{call}) "
                 f"has not completed after {seconds:.1f} s "
                 f"(HPCDIST_STALL_TIMEOUT={self.timeout:g})."]
        missing = elsewhere + silent
        if missing:
            lines.append(f"  Ranks that have not arrived in {name}: {format_ranks(missing)}")
        for other in elsewhere:
            state = replies[other]
            doing = ("not in any collective (computing, sleeping or blocked outside hpcdist)"
                     if state is None
                     else f"inside {state[0]} (call #{state[1]}) for {state[2]:.1f} s")
            lines.append(f"    rank {other}: {doing}")
        for other in silent:
            lines.append(f"    rank {other}: did not answer within {_REPLY_GRACE_SECONDS:g} s "
                         f"(hung with the interpreter lock held, or dead)")
        lines.append(f"  Ranks waiting in {name}: {format_ranks(sorted(waiting))}. "
                     f"Aborting the job.")
        abort_job("\n".join(lines), errorcode=1)
        sys.exit(1)  # not reached: Abort ends the process
