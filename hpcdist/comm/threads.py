"""Keep ranks x threads within a node's cores."""

import os
import sys

__all__ = ["limit_threads_per_rank", "THREAD_VARIABLES"]

#: environment variables through which users choose thread counts themselves
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "BLIS_NUM_THREADS")
_LIMITER = []


def available_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def limit_threads_per_rank(local_size, cores=None):
    """Cap BLAS, OpenMP and Numba threads so the node's ranks share its cores.

    Each rank gets ``cores // local_size`` threads, and no more than the
    cores it is bound to. Does nothing when the user set any of
    :data:`THREAD_VARIABLES`, or when the cap would not lower anything.

    Parameters
    ----------
    local_size : int
        Ranks on this node.
    cores : int, optional
        Cores of the node (default: ``os.cpu_count()``).

    Returns
    -------
    int or None
        The thread count set, or None when nothing was changed.
    """
    if any(name in os.environ for name in THREAD_VARIABLES):
        return None
    cores = (os.cpu_count() or 1) if cores is None else cores
    threads = max(1, min(cores // max(local_size, 1), available_cores()))
    if threads >= cores:
        return None
    from threadpoolctl import threadpool_limits
    _LIMITER.append(threadpool_limits(limits=threads))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if "numba" in sys.modules:
        import numba
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    else:
        os.environ["NUMBA_NUM_THREADS"] = str(threads)
    return threads
