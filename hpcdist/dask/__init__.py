"""A Dask cluster for one phase of an MPI job, on Dask's distributed scheduler (extra ``dask``).

    run(func, *args, ctx=None, client_rank=1, threads_per_worker=1, memory_limit="auto",
        interface=None, verbose=False, dashboard=False, **kwargs) -> func's result on every rank
    DaskCluster(*, ctx=None, client_rank=1, ...)   .start() / .stop() for code written that way
    DaskPhaseError

Rank 0 runs the scheduler, ``client_rank`` the client, every other rank a
worker; the phase speaks TLS with a certificate made for it and handed over
MPI, and closes quietly. Importing this package imports neither Dask nor
MPI.
"""
from .cluster import DaskCluster
from .errors import DaskPhaseError
from .run import run

__all__ = ["run", "DaskCluster", "DaskPhaseError"]
