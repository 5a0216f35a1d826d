"""One Dask phase on a context's ranks: start the cluster, serve it, end it.

The protocol :func:`hpcdist.dask.run` and :class:`hpcdist.dask.DaskCluster`
share. The phase talks over its own context (split from the user's and
freed at the end), so nothing it sends meets the user's collectives:

1. Rank 0 makes the phase's certificate, starts the scheduler and
   broadcasts its address and the certificate.
2. The workers join the scheduler, the client rank connects a Client; one
   allgather tells every rank whether all of them started.
3. The client rank runs the user's code. The other ranks wait for its end
   message without blocking in MPI: their main thread polls a receive and
   watches the cluster, and aborts the job when a worker or the client is
   lost before the end (a dead rank never leaves the others waiting).
4. The client closes its Client and sends the end message; the scheduler
   closes the workers, then itself; the ranks take the outcome from the
   client rank and free the phase's context.
"""

import contextlib
import pickle
import socket
import tempfile
import time
import traceback
from threading import Event

import numpy as np

from ..comm.abort import abort_job
from ..comm.checks import format_ranks
from .errors import DaskPhaseError
from .network import phase_host
from .security import new_certificate, phase_security
from .servers import (
    JOIN_SECONDS,
    LEAVE_SECONDS,
    EventLoopThread,
    close_scheduler,
    close_worker,
    quiet_dask,
    scheduler_members,
    single_threaded_libraries,
    start_scheduler,
    start_worker,
)

__all__ = ["Phase", "open_phase", "SCHEDULER_RANK"]

SCHEDULER_RANK = 0
_END_TAG = 1
#: seconds between two looks at the end message and the cluster
_POLL_SECONDS = 0.05
#: seconds a rank waits for the end message after its worker or the client closed
_GRACE_SECONDS = 5.0


def _describe(error):
    return f"{type(error).__name__}: {error}"


def _memory_limit(options, hostnames, rank):
    """A worker's memory limit: ``"auto"`` shares the node's memory among its workers."""
    if options.memory_limit != "auto":
        return options.memory_limit
    from distributed.system import MEMORY_LIMIT  # the dask extra

    roles = (SCHEDULER_RANK, options.client_rank)
    workers_here = sum(1 for other, host in enumerate(hostnames)
                       if host == hostnames[rank] and other not in roles)
    return MEMORY_LIMIT // max(workers_here, 1)


class Phase:
    """A started Dask phase on this rank (see the module's description).

    Attributes
    ----------
    ctx : Context
        The phase's own context (freed by :meth:`finish`).
    client : distributed.Client or None
        The connected client on the client rank; None elsewhere.
    security : distributed.security.Security
        The phase's TLS settings.
    address : str
        The scheduler's address (``tls://``).
    """

    def __init__(self, ctx, options, where):
        self.ctx = ctx
        self.options = options
        self.where = where
        self.client = self.security = self.address = None
        self._stack = contextlib.ExitStack()
        self._loop = self._scheduler = self._worker = self._end = None
        self._finished = None  # set when this rank's worker has closed
        self._client_id = None
        self._worker_ranks = {}  # the scheduler's view: worker address -> rank

    @property
    def is_client(self):
        return self.ctx.rank == self.options.client_rank

    # -- start --------------------------------------------------------------------------
    def _start(self):
        ctx, options = self.ctx, self.options
        hostnames = ctx.allgather_object(socket.gethostname())
        host = phase_host(ctx, options.interface, hostnames, self.where)
        directory = self._stack.enter_context(tempfile.TemporaryDirectory(prefix="hpcdist-dask-"))
        self._stack.enter_context(quiet_dask(verbose=options.verbose,
                                             dashboard=options.dashboard, directory=directory))
        if not self.is_client:
            self._loop = EventLoopThread()
            self._stack.callback(self._loop.close)
        self._share_scheduler(host)
        error = None
        try:
            if self.is_client:
                from distributed import Client  # the dask extra

                self.client = Client(self.address, security=self.security,
                                     timeout=JOIN_SECONDS, set_as_default=True)
            elif ctx.rank != SCHEDULER_RANK:
                self._start_worker(host, directory, _memory_limit(options, hostnames, ctx.rank))
        except Exception as exc:  # reported on every rank below
            error = _describe(exc)
        reports = ctx.allgather_object((error, self.client.id if self.client else None))
        failed = {rank: report[0] for rank, report in enumerate(reports) if report[0]}
        if failed:
            listed = "; ".join(f"rank {rank}: {message}" for rank, message in failed.items())
            raise DaskPhaseError(f"{self.where}: the Dask cluster did not start ({listed})",
                                 rank=min(failed))
        self._client_id = reports[options.client_rank][1]
        if ctx.rank == SCHEDULER_RANK:
            self._worker_ranks = self._loop.run(scheduler_members(self._scheduler))[0]
        if not self.is_client:
            self._end = ctx.irecv(source=options.client_rank, tag=_END_TAG)

    def _share_scheduler(self, host):
        """Rank 0 starts the scheduler; every rank learns its address and the certificate."""
        started = None
        if self.ctx.rank == SCHEDULER_RANK:
            try:
                certificate = new_certificate()
                self._scheduler = self._loop.run(start_scheduler(
                    host, phase_security(certificate), self.options.dashboard))
                started = (self._scheduler.address, certificate, None)
            except Exception as exc:  # reported on every rank below
                started = (None, None, _describe(exc))
        address, certificate, error = self.ctx.broadcast_object(started, root=SCHEDULER_RANK)
        if error is not None:
            raise DaskPhaseError(f"{self.where}: the Dask scheduler did not start on rank "
                                 f"{SCHEDULER_RANK}: {error}", rank=SCHEDULER_RANK)
        self.address, self.security = address, phase_security(certificate)

    def _start_worker(self, host, directory, memory_limit):
        self._stack.enter_context(single_threaded_libraries())
        self._finished = Event()
        self._worker = self._loop.run(start_worker(
            self.address, security=self.security, host=host, name=self.ctx.rank,
            threads=self.options.threads_per_worker, memory_limit=memory_limit,
            directory=directory, finished=self._finished))

    # -- serve (scheduler and worker ranks) ---------------------------------------------
    def serve(self):
        """Run this rank's scheduler or worker until the client rank ends the phase."""
        if self.ctx.rank == SCHEDULER_RANK:
            self._serve_scheduler()
        else:
            self._serve_worker()

    def _lost(self, what):
        abort_job(f"hpcdist: {self.where}: {what} before the Dask phase ended (the rank died or "
                  f"lost its connection); aborting all ranks so none waits forever")

    def _serve_scheduler(self):
        client_rank = self.options.client_rank
        client_gone = None
        while not self._end.test():
            workers, clients = self._loop.run(scheduler_members(self._scheduler))
            lost = [rank for address, rank in self._worker_ranks.items() if address not in workers]
            if lost:
                self._lost(f"the Dask worker of {format_ranks(lost)} left the scheduler")
            if self._client_id not in clients:
                client_gone = client_gone or time.monotonic()
                if time.monotonic() - client_gone > _GRACE_SECONDS:
                    self._lost(f"the client on rank {client_rank} left the scheduler")
            time.sleep(_POLL_SECONDS)
        self._loop.run(close_scheduler(self._scheduler))

    def _serve_worker(self):
        closed = None
        while not self._end.test():
            if self._finished.is_set():
                closed = closed or time.monotonic()
                if time.monotonic() - closed > _GRACE_SECONDS:
                    self._lost(f"the Dask worker of rank {self.ctx.rank} lost the scheduler")
            time.sleep(_POLL_SECONDS)
        if not self._finished.wait(LEAVE_SECONDS):  # the scheduler closes it; else close it here
            self._loop.run(close_worker(self._worker))

    # -- end (client rank) --------------------------------------------------------------
    def end_client(self):
        """On the client rank: close the Client and tell every rank the phase is over."""
        self.client.close()
        self.client = None
        requests = [self.ctx.isend(np.zeros(1, dtype=np.uint8), dest=rank, tag=_END_TAG)
                    for rank in range(self.ctx.size) if rank != self.ctx.rank]
        for request in requests:
            request.wait()

    def finish(self, outcome=None):
        """Every rank: take the client rank's outcome and free the phase (collective).

        Parameters
        ----------
        outcome : (BaseException or None, object), optional
            On the client rank, what the user's code raised or returned.

        Returns
        -------
        object
            The client's result, on every rank.

        Raises
        ------
        DaskPhaseError
            On every rank, when the user's code raised on the client rank.
        """
        self._stack.close()
        error, result = outcome if outcome is not None else (None, None)
        message = _message(error, result) if self.is_client else None
        try:
            message = self.ctx.broadcast_object(message, root=self.options.client_rank)
        finally:
            self.ctx.free()
        kind, body = message
        if kind == "result":
            return result if self.is_client else pickle.loads(body)
        exc_type, exc_message, remote_traceback = body
        rank = self.options.client_rank
        raise DaskPhaseError(
            f"{self.where}: func failed on the client rank {rank} with {exc_type}: "
            f"{exc_message}\n"
            f"--- traceback on rank {rank} ---\n{remote_traceback.rstrip()}",
            remote_rank=rank, remote_type=exc_type, remote_message=exc_message,
            remote_traceback=remote_traceback) from error

    def discard(self):
        """After a failed start: close what started here and free the phase (collective)."""
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.client.close()
            if self._worker is not None:
                self._loop.run(close_worker(self._worker), timeout=LEAVE_SECONDS)
            if self._scheduler is not None:
                self._loop.run(close_scheduler(self._scheduler), timeout=2 * LEAVE_SECONDS)
        self._stack.close()
        self.ctx.free()


def _message(error, result):
    """What the client rank sends: ``("result", pickled result)`` or ``("error", details)``."""
    if error is None:
        try:
            return "result", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - any pickling failure is reported
            error = exc
            problem = f"func's result ({type(result).__name__}) cannot be sent to the other ranks: "
            return "error", (type(exc).__qualname__, problem + str(exc),
                             "".join(traceback.format_exception(exc)))
    return "error", (type(error).__qualname__, str(error),
                     "".join(traceback.format_exception(error)))


def open_phase(ctx, options, where):
    """Start a Dask phase on ``ctx``'s ranks (collective).

    Parameters
    ----------
    ctx : Context
        The user's context; the phase works on a split of it.
    options : PhaseOptions
    where : str
        The caller, for messages.

    Returns
    -------
    Phase
        On the client rank with its connected ``client``; on the other
        ranks ready to :meth:`Phase.serve`.

    Raises
    ------
    DaskPhaseError
        On every rank, when the scheduler, a worker or the client did not start.
    """
    phase = Phase(ctx.split(0, key=ctx.rank), options, where)
    try:
        phase._start()
    except BaseException:
        phase.discard()
        raise
    return phase
