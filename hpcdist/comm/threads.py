"""Keep ranks x threads within a node's cores; let polling threads sleep briefly."""

import ctypes
import os
import sys

import numba
from threadpoolctl import threadpool_limits

__all__ = ["limit_threads_per_rank", "reserve_core_for_communication", "precise_short_sleeps",
           "THREAD_VARIABLES", "MIN_THREADS_TO_SHARE"]

#: environment variables through which users choose thread counts themselves
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS", "BLIS_NUM_THREADS")
#: a rank gives one of its compute threads to communication only from this many
MIN_THREADS_TO_SHARE = 4
_LIMITER = []
_CHOSEN = []  # the thread count hpcdist wrote into OMP_NUM_THREADS
_PR_SET_TIMERSLACK = 29
_TIMER_SLACK_NS = 1000


def available_cores():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _user_threads():
    """The per-rank thread count the user chose through ``OMP_NUM_THREADS``, if any."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def limit_threads_per_rank(local_size, cores=None):
    """Cap BLAS, OpenMP and Numba threads so the node's ranks share its cores.

    Each rank gets ``cores // local_size`` threads, and no more than the
    cores it is bound to; a user's ``OMP_NUM_THREADS`` replaces that count.
    A library whose own variable the user set (``OPENBLAS_NUM_THREADS``,
    ``NUMBA_NUM_THREADS``, ...) is left alone, so setting only
    ``OMP_NUM_THREADS=1`` still keeps Numba from starting a thread per core.

    Parameters
    ----------
    local_size : int
        Ranks on this node.
    cores : int, optional
        Cores of the node (default: ``os.cpu_count()``).

    Returns
    -------
    int or None
        The thread count applied, or None when nothing was changed.
    """
    _CHOSEN.clear()
    cores = (os.cpu_count() or 1) if cores is None else cores
    threads = _user_threads() or max(1, min(cores // max(local_size, 1), available_cores()))
    if threads >= cores:
        return None
    changed = _limit_numba(threads)
    if not any(name in os.environ for name in THREAD_VARIABLES if name != "NUMBA_NUM_THREADS"):
        # after Numba, whose OpenMP pool may have just started with a thread per core
        _limit_blas(threads)
        changed = True
    return threads if changed else None


def reserve_core_for_communication():
    """Give one of this rank's cores to a communication thread (core specialization).

    Where :func:`limit_threads_per_rank` chose the rank's thread count (the
    user set no thread variable) and it is at least :data:`MIN_THREADS_TO_SHARE`,
    the rank's BLAS, OpenMP and Numba threads drop by one, so that a thread
    running blocking collectives in the background does not compete with the
    computation for cores.

    Returns
    -------
    int or None
        The thread count applied, or None when nothing was changed.
    """
    threads = _CHOSEN[0] if _CHOSEN else 0
    if threads < MIN_THREADS_TO_SHARE or os.environ.get("OMP_NUM_THREADS") != str(threads):
        return None
    threads -= 1
    _limit_numba(threads)
    _limit_blas(threads)
    return threads


def _limit_numba(threads):
    """Numba's threads, unless the user chose them (``NUMBA_NUM_THREADS``); whether set."""
    if "NUMBA_NUM_THREADS" in os.environ:
        return False
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    return True


def _limit_blas(threads):
    _LIMITER.append(threadpool_limits(limits=threads))
    os.environ["OMP_NUM_THREADS"] = str(threads)
    _CHOSEN[:] = [threads]


def precise_short_sleeps():
    """Let the calling thread's short sleeps end on time (Linux only; elsewhere nothing).

    Linux lets a sleep end up to the thread's timer slack late, 50
    microseconds by default, so a thread polling MPI between
    ``time.sleep(1e-5)`` naps answers a message about 60 microseconds
    late. This sets the calling thread's slack to 1 microsecond.
    """
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_TIMERSLACK, _TIMER_SLACK_NS, 0, 0, 0)
