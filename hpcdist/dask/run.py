"""``run``: one function with a Dask cluster made of the job's ranks."""

from ..comm import resolve_context
from ..exceptions import InvalidArgumentTypeError
from .options import phase_options
from .phase import open_phase

__all__ = ["run"]


def run(func, *args, ctx=None, client_rank=1, threads_per_worker=1, memory_limit="auto",
        interface=None, verbose=False, dashboard=False, **kwargs):
    """Run ``func(client, *args, **kwargs)`` with a Dask cluster of this job's ranks (collective).

    Rank 0 runs Dask's scheduler, ``client_rank`` calls ``func`` with a
    connected ``distributed.Client`` once every worker has joined, and every
    other rank runs a worker. ``run`` returns on every rank once ``func`` has
    finished and the cluster has closed; then every rank goes on with SPMD
    code (a job may have several phases). The phase speaks TLS with a
    certificate made for it and handed over MPI: a client without it is
    refused.

    Parameters
    ----------
    func : callable
        ``func(client, *args, **kwargs)``, called on ``client_rank`` only.
    *args, **kwargs
        Passed to ``func``; the options below are never forwarded.
    ctx : Context, optional
        The ranks of the phase (default: the default context).
    client_rank : int, default=1
        The rank that runs ``func``; not 0 (the scheduler's).
    threads_per_worker : int, default=1
        Threads of each worker; BLAS and Numba run one thread each unless
        the environment says otherwise (``OMP_NUM_THREADS``, ...).
    memory_limit : "auto", int, float, str or None, default="auto"
        Per worker: ``"auto"`` shares the node's memory among its workers;
        bytes (``4e9``, ``"4GiB"``), a fraction of the node's memory, or None
        for no limit.
    interface : str, optional
        Network interface to use (``"ib0"``); default: loopback on one
        node, the default route's address on several.
    verbose : bool, default=False
        Dask's logs at INFO instead of WARNING.
    dashboard : bool, default=False
        Serve Dask's dashboard from the scheduler (needs bokeh).

    Returns
    -------
    object
        ``func``'s result, on every rank (sent from ``client_rank``; it must
        pickle).

    Raises
    ------
    DaskPhaseError
        On every rank: ``func`` raised (the message names the client rank
        and carries the original type, message and traceback), or the
        cluster did not start.
    InvalidArgumentError, InvalidArgumentTypeError, ConfigMismatchError
        On every rank: fewer than 3 ranks, a bad option, or options that
        differ between ranks.

    Examples
    --------
    >>> def total(client, n):                                   # doctest: +SKIP
    ...     return client.submit(sum, range(n)).result()
    >>> hpcdist.dask.run(total, 10)                             # doctest: +SKIP
    45
    """
    where = "hpcdist.dask.run"
    if not callable(func):
        raise InvalidArgumentTypeError(f"{where}: func={func!r} should be a callable "
                                       f"func(client, *args, **kwargs)")
    ctx = resolve_context(ctx)
    options = phase_options(ctx, where, client_rank=client_rank,
                            threads_per_worker=threads_per_worker, memory_limit=memory_limit,
                            interface=interface, verbose=verbose, dashboard=dashboard)
    phase = open_phase(ctx, options, where)
    if not phase.is_client:
        phase.serve()
        return phase.finish()
    try:
        outcome = None, func(phase.client, *args, **kwargs)
    except Exception as error:  # noqa: BLE001 - raised on every rank by finish
        outcome = error, None
    phase.end_client()
    return phase.finish(outcome)
