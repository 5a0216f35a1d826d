"""``DaskCluster``: a phase's cluster with ``start()`` and ``stop()``, for code written that way."""

from .._checks import check_int
from ..comm import resolve_context
from ..exceptions import InvalidArgumentError
from .errors import DaskPhaseError
from .options import phase_options, refuse_n_workers
from .phase import open_phase

__all__ = ["DaskCluster"]


class DaskCluster:
    """A Dask cluster of this job's ranks, or a client of an existing scheduler.

    Every rank creates it with the same options and calls :meth:`start`:
    rank 0 then runs the scheduler and every rank other than ``client_rank``
    a worker until the client's :meth:`stop`, and ``start`` returns False
    there; on ``client_rank`` it returns True at once with a connected
    :attr:`client`. The phase speaks TLS with a certificate made for it
    and handed over MPI (see :func:`hpcdist.dask.run`).

    Parameters
    ----------
    ctx : Context, optional
    client_rank : int, default=1
    threads_per_worker : int, default=1
    memory_limit : "auto", int, float, str or None, default="auto"
    interface : str, optional
    verbose : bool, default=False
    dashboard : bool, default=False
        As for :func:`hpcdist.dask.run`.
    scheduler_address : str, optional
        Connect ``client_rank`` to this existing scheduler instead (with
        ``security``); the other ranks' ``start`` returns False at once.
    security : distributed.security.Security, optional
        The TLS settings for ``scheduler_address``.

    Notes
    -----
    There is no ``n_workers``: the workers are the job's ranks other than
    the scheduler and the client.
    """

    def __init__(self, *, ctx=None, client_rank=1, threads_per_worker=1, memory_limit="auto",
                 interface=None, scheduler_address=None, security=None, verbose=False,
                 dashboard=False, **unexpected):
        refuse_n_workers("DaskCluster", unexpected)
        self.ctx = ctx
        self.client_rank = client_rank
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.interface = interface
        self.scheduler_address = scheduler_address
        self.security = security
        self.verbose = verbose
        self.dashboard = dashboard
        self._phase = None  # this rank's part of the phase while it runs
        self._client = None  # the Client on client_rank while connected
        self._serving = False

    # -- life cycle -------------------------------------------------------------------------
    def start(self):
        """Start the cluster (collective unless ``scheduler_address`` is given).

        Returns
        -------
        bool
            True on ``client_rank`` (:attr:`client` is connected); False on
            the other ranks once the client's :meth:`stop` closed the
            cluster (at once with ``scheduler_address``).

        Raises
        ------
        DaskPhaseError
            On every rank, when the cluster did not start.
        InvalidArgumentError, InvalidArgumentTypeError, ConfigMismatchError
            As for :func:`hpcdist.dask.run`.
        """
        where = "DaskCluster.start"
        if self.is_running:
            raise DaskPhaseError(f"{where}: the cluster is already running; call stop() first")
        ctx = resolve_context(self.ctx)
        if self.scheduler_address is not None:
            return self._connect(ctx, where)
        if self.security is not None:
            raise InvalidArgumentError(
                f"{where}: security= is for an existing scheduler (scheduler_address=); a "
                f"cluster of the job's ranks makes its own certificate for each start")
        options = phase_options(ctx, where, client_rank=self.client_rank,
                                threads_per_worker=self.threads_per_worker,
                                memory_limit=self.memory_limit, interface=self.interface,
                                verbose=self.verbose, dashboard=self.dashboard)
        phase = open_phase(ctx, options, where)
        if phase.is_client:
            self._phase, self._client = phase, phase.client
            return True
        self._serving = True
        try:
            phase.serve()
        finally:
            self._serving = False
        phase.finish()
        return False

    def _connect(self, ctx, where):
        client_rank = check_int(self.client_rank, f"{where}: client_rank", 0, ctx.size - 1,
                                hint=f" (a rank of this job of {ctx.size})")
        if ctx.rank != client_rank:
            return False
        from distributed import Client  # the dask extra

        self._client = Client(self.scheduler_address, security=self.security,
                              set_as_default=True)
        return True

    def stop(self):
        """On ``client_rank``: close the client, and the cluster of the job's ranks.

        The other ranks' :meth:`start` then returns. Does nothing elsewhere
        or when not running.
        """
        if self._phase is not None:
            phase, self._phase, self._client = self._phase, None, None
            phase.end_client()
            phase.finish()
        elif self._client is not None:
            client, self._client = self._client, None
            client.close()

    @property
    def is_running(self):
        """Whether this rank's part of the cluster runs (its client is connected, or it serves)."""
        return self._client is not None or self._serving

    # -- the client's methods ---------------------------------------------------------------
    @property
    def client(self):
        """The connected ``distributed.Client`` on ``client_rank``; None elsewhere."""
        return self._client

    def _require_client(self, name):
        if self._client is None:
            raise DaskPhaseError(
                f"DaskCluster.{name}: no client here: the client runs on client_rank="
                f"{self.client_rank}, between start() (which returns True there) and stop()")
        return self._client

    def map(self, func, *iterables, **kwargs):
        """``Client.map``: futures of ``func`` over the iterables."""
        return self._require_client("map").map(func, *iterables, **kwargs)

    def submit(self, func, *args, **kwargs):
        """``Client.submit``: a future of ``func(*args, **kwargs)``."""
        return self._require_client("submit").submit(func, *args, **kwargs)

    def gather(self, futures, **kwargs):
        """``Client.gather``: the results of futures."""
        return self._require_client("gather").gather(futures, **kwargs)

    def scatter(self, data, **kwargs):
        """``Client.scatter``: data onto the workers, as futures."""
        return self._require_client("scatter").scatter(data, **kwargs)

    def replicate(self, futures, **kwargs):
        """``Client.replicate``: copies of the futures' data on more workers."""
        return self._require_client("replicate").replicate(futures, **kwargs)

    def get_worker_info(self):
        """Each worker's MPI rank, threads and memory limit.

        Returns
        -------
        dict
            ``{worker address: {"rank", "nthreads", "memory_limit"}}``; the
            rank is None for the workers of an external scheduler.
        """
        client = self._require_client("get_worker_info")
        try:
            workers = client.scheduler_info(n_workers=-1)["workers"]
        except TypeError:  # distributed before n_workers= (it listed every worker)
            workers = client.scheduler_info()["workers"]
        own = self._phase is not None
        return {address: {"rank": int(worker["name"]) if own else None,
                          "nthreads": worker["nthreads"],
                          "memory_limit": worker["memory_limit"]}
                for address, worker in workers.items()}
