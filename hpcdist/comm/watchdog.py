"""The stall watchdog: a collective that never completes ends the job with a diagnosis.

Each rank runs one daemon thread. It answers status queries from other ranks
on a private communicator. When its own rank has been inside one collective
for a fifth of ``HPCDIST_STALL_TIMEOUT`` seconds, it asks every rank where it
is and the lowest waiting rank prints each rank's pending call with its
signature (operation, dtype, shape, root), as Horovod's stall inspector does;
at the timeout it prints that again, with the ranks that have not arrived,
and aborts the job.
"""

import os
import signal
import socket
import sys
import threading
import time
import weakref

import numpy as np

from .._environment import termination_stall_timeout_from_env
from .abort import abort_job
from .checks import format_ranks
from .faults import is_rank_failure
from .mpi import MPI

__all__ = ["Watchdog", "running_watchdog", "start_watchdog", "stop_watchdog",
           "end_stalls_after_termination"]

_QUERY, _REPLY = 1, 2
_POLL_SECONDS = 0.25
_REPLY_GRACE_SECONDS = 5.0
_TERMINATION_REPLY_GRACE_SECONDS = 1.0
#: default of ``HPCDIST_TERM_STALL_TIMEOUT``: after SIGTERM, a collective that waits this
#: long ends the job (a scheduler's SIGKILL follows SIGTERM within its KillWait anyway)
_EARLY_FRACTION = 0.2  # each rank's pending call is printed once at this share of the timeout
_RUNNING = []  # the process's watchdog, while one runs


def running_watchdog():
    """The process's running :class:`Watchdog`, or None."""
    return _RUNNING[0] if _RUNNING else None


def start_watchdog(timeout, comm=None, *, fault_tolerant=False):
    """Start the process's watchdog on a duplicate of ``comm`` (default
    ``MPI.COMM_WORLD``), once; ``fault_tolerant``: a lost rank ends its
    watch quietly (recovery starts a new one) instead of ending the job."""
    if not _RUNNING:
        comm = MPI.COMM_WORLD if comm is None else comm
        _RUNNING.append(Watchdog(comm.Dup(), timeout, fault_tolerant=fault_tolerant))


def stop_watchdog():
    """Stop the process's watchdog, if one runs, and free its communicator.

    Returns
    -------
    Watchdog or None
        The watchdog stopped (its contexts and timeout, for a restart).
    """
    if _RUNNING:
        watchdog = _RUNNING.pop()
        watchdog.stop()
        if not MPI.Is_finalized():
            watchdog.comm.Free()
        return watchdog
    return None


def end_stalls_after_termination():
    """Called on SIGTERM: from now on a collective that waits ``HPCDIST_TERM_STALL_TIMEOUT``
    seconds (default 3) ends the job.

    A rank that died makes the others wait in their next collective; the
    scheduler's SIGTERM to the survivors (srun ``--kill-on-bad-exit``) then
    ends the job within seconds instead of at the scheduler's SIGKILL. Safe
    to call from any thread; does nothing without a running watchdog.
    """
    watchdog = running_watchdog()
    if watchdog is not None:
        watchdog.end_stalls(termination_stall_timeout_from_env())


class Watchdog:
    """Watches the collectives of every context of this process.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        A private duplicate of the world communicator (owned by the watchdog).
    timeout : float
        Seconds a collective may take before the job is aborted.
    fault_tolerant : bool, default=False
        A lost rank (ULFM) ends the watch quietly instead of the job.
    """

    def __init__(self, comm, timeout, *, fault_tolerant=False):
        self.comm = comm
        self.timeout = timeout
        self.fault_tolerant = fault_tolerant
        # (host, pid) of every rank of comm: with fault tolerance, a rank that stops
        # answering is killed by a peer on its node, so that ULFM reports it lost
        self._processes = (comm.allgather((socket.gethostname(), os.getpid()))
                           if fault_tolerant else None)
        self._killed = set()
        self._contexts = weakref.WeakSet()
        self._ending = None  # (since, seconds) after a termination signal
        self._question = np.zeros(1, dtype=np.int64)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hpcdist-watchdog", daemon=True)
        self._thread.start()

    def end_stalls(self, seconds):
        """From now on, a collective that waits ``seconds`` ends the job."""
        self._ending = (time.perf_counter(), float(seconds))

    def watch(self, ctx):
        """Include ``ctx``'s collectives."""
        self._contexts.add(ctx)

    def stop(self):
        """Stop the thread (before the communicator is freed)."""
        self._stop.set()
        self._thread.join()

    def _status(self):
        """(operation, call number, seconds inside, communicator size, signature), or None
        when idle; the signature (e.g. ``allreduce float32[1024]``) is derived here, only
        when a stall is being reported."""
        now = time.perf_counter()
        for ctx in list(self._contexts):
            inflight = ctx._inflight
            if inflight is not None:
                name, since = inflight[0], inflight[3]
                try:
                    signature = ctx._inflight_signature(inflight)
                except Exception:  # an object that cannot describe itself: the name will do
                    signature = None
                return name, ctx._calls + 1, now - since, ctx.size, signature
        return None

    def contexts(self):
        """The contexts watched."""
        return list(self._contexts)

    def _run(self):
        try:
            self._watch()
        except MPI.Exception as exc:
            if not (self.fault_tolerant and is_rank_failure(exc)):
                raise
            # a lost rank: the watch ends here (recovery starts a new watchdog), without
            # the pending receive, which would keep MPI_Finalize waiting
            self._drop_pending_request()

    def _drop_pending_request(self):
        request = getattr(self, "_request", None)
        if request is None or request == MPI.REQUEST_NULL:
            return
        try:
            self.comm.Ack_failed()  # a receive from any source may then complete or cancel
            request.Cancel()
            request.Wait()
        except MPI.Exception:
            pass

    def _watch(self):
        self._query = np.zeros(1, dtype=np.int64)
        self._request = self.comm.Irecv(self._query, source=MPI.ANY_SOURCE, tag=_QUERY)
        warned = None  # the (operation, call number) already reported early
        try:
            while not self._stop.wait(_POLL_SECONDS):
                self._answer_queries()
                current = self._status()
                if current is None:
                    continue
                ending = self._ending
                if ending is not None and min(current[2], time.perf_counter() - ending[0]) \
                        > ending[1]:
                    self._diagnose_and_abort(
                        current, f"HPCDIST_TERM_STALL_TIMEOUT={ending[1]:g} after SIGTERM",
                        _TERMINATION_REPLY_GRACE_SECONDS)
                elif current[2] > self.timeout:
                    if not (self.fault_tolerant and self._kill_silent_ranks(current)):
                        self._diagnose_and_abort(current)
                elif current[2] > self.timeout * _EARLY_FRACTION and current[:2] != warned:
                    warned = current[:2]
                    self._report_early(current)
        finally:
            if self._request != MPI.REQUEST_NULL:
                self._request.Cancel()
                self._request.Wait()

    def _answer_queries(self):
        status = MPI.Status()
        while self._request.Test(status):
            self.comm.send(self._status(), dest=status.Get_source(), tag=_REPLY)
            self._request = self.comm.Irecv(self._query, source=MPI.ANY_SOURCE, tag=_QUERY)

    def _kill_silent_ranks(self, current):
        """Fault tolerance on, a call stalled past the timeout: the ranks that do not
        answer (stopped, or hung with the interpreter lock held) are declared failed and
        killed by this rank where they run on its node (elsewhere Open MPI's failure
        detector, which ``hpcdist run --fault-tolerant`` turns on, reports them); the
        survivors' pending calls then raise RankFailedError. Returns whether to wait on
        (a rank was silent, and the call has waited less than twice the timeout); else
        the stall is reported and ends the job as without fault tolerance."""
        replies = self._survey()
        rank, host = self.comm.Get_rank(), socket.gethostname()
        silent = [r for r in range(self.comm.Get_size()) if r != rank and r not in replies]
        for other in silent:
            other_host, pid = self._processes[other]
            if other_host == host and other not in self._killed:
                self._killed.add(other)
                print(f"hpcdist: rank {other} (pid {pid} on {host}) has not answered for "
                      f"{current[2]:.1f} s (HPCDIST_STALL_TIMEOUT={self.timeout:g}): declared "
                      "failed and killed; the others go on without it", file=sys.stderr,
                      flush=True)
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        # a silent rank on another node without a failure detector: at twice the
        # timeout the job ends as without fault tolerance
        return bool(silent) and current[2] < 2 * self.timeout

    def _survey(self, grace=_REPLY_GRACE_SECONDS):
        """Every other rank's :meth:`_status` (rank -> status; missing: no answer within
        ``grace`` seconds)."""
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        others = [r for r in range(size) if r != rank]
        for other in others:  # the question buffer lives as long as the watchdog
            self.comm.Isend(self._question, dest=other, tag=_QUERY).Free()
        replies = {}
        deadline = time.monotonic() + grace
        while len(replies) < len(others) and time.monotonic() < deadline:
            status = MPI.Status()
            if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_REPLY, status=status):
                source = status.Get_source()
                replies[source] = self.comm.recv(source=source, tag=_REPLY)
            else:
                self._answer_queries()  # another stalled rank may be asking us
                time.sleep(0.01)
        return replies

    def _rank_lines(self, current, replies, grace=_REPLY_GRACE_SECONDS):
        """Who waits in ``current``'s operation, who does what instead, who is silent."""
        name = current[0]
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        waiting, elsewhere, silent = [rank], [], []
        for other in range(size):
            if other == rank:
                continue
            if other not in replies:
                silent.append(other)
            elif replies[other] is not None and replies[other][0] == name:
                waiting.append(other)
            else:
                elsewhere.append(other)
        lines = []
        missing = elsewhere + silent
        if missing:
            lines.append(f"  Ranks that have not arrived in {name}: {format_ranks(missing)}")
        statuses = {**replies, rank: current}
        for other in range(size):
            if other in silent:
                lines.append(f"    rank {other}: did not answer within "
                             f"{grace:g} s (hung with the interpreter lock "
                             f"held, or dead)")
                continue
            state = statuses[other]
            doing = ("not in any collective (computing, sleeping or blocked outside hpcdist)"
                     if state is None else
                     f"inside {state[4] or state[0]} (call #{state[1]}) for {state[2]:.1f} s")
            lines.append(f"    rank {other}: {doing}")
        return sorted(waiting), lines

    def _report_early(self, current):
        """At a fifth of the timeout: each rank's pending call, printed once, by the
        lowest rank inside any call (every stalled rank surveys; the others stay quiet)."""
        replies = self._survey()
        waiting, lines = self._rank_lines(current, replies)
        rank = self.comm.Get_rank()
        if any(other < rank and state is not None for other, state in replies.items()):
            return
        name, call, seconds, _, signature = current
        header = (f"hpcdist: possible stall: {signature or name} (call #{call}) has waited "
                  f"{seconds:.1f} s on {format_ranks(waiting)} ({socket.gethostname()}); the "
                  f"job is aborted at HPCDIST_STALL_TIMEOUT={self.timeout:g} s. Pending calls:")
        print("\n".join([header] + lines), file=sys.stderr, flush=True)

    def _diagnose_and_abort(self, current, limit=None, grace=_REPLY_GRACE_SECONDS):
        name, call, seconds, _, signature = current
        replies = self._survey(grace)
        waiting, lines = self._rank_lines(current, replies, grace)
        rank = self.comm.Get_rank()
        limit = limit or f"HPCDIST_STALL_TIMEOUT={self.timeout:g}"
        lines.insert(0, f"hpcdist: stall on rank {rank} ({socket.gethostname()}): "
                        f"{signature or name} (call #{call}) has not completed after "
                        f"{seconds:.1f} s ({limit}).")
        lines.append(f"  Ranks waiting in {name}: {format_ranks(waiting)}. Aborting the job.")
        abort_job("\n".join(lines), errorcode=1)
        sys.exit(1)  # not reached: Abort ends the process
