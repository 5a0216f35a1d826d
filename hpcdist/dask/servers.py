"""Dask's scheduler and workers on a phase's ranks, in an event loop beside the main thread.

The scheduler (rank 0) and each worker run in an asyncio event loop on a
daemon thread of their rank, so the rank's main thread stays free for MPI:
it hands the phase's address and certificate around, watches for the end
of the phase without blocking, and aborts the job when a rank is lost.
"""

import asyncio
import contextlib
import logging
import os
import threading

import numba
from threadpoolctl import threadpool_limits

from ..comm.threads import THREAD_VARIABLES

__all__ = ["EventLoopThread", "quiet_dask", "single_threaded_libraries", "start_scheduler",
           "close_scheduler", "scheduler_members", "start_worker", "close_worker"]

#: seconds a worker may take to join the scheduler before its start fails
JOIN_SECONDS = 60
#: seconds the scheduler waits for its closed workers to leave before it closes anyway
LEAVE_SECONDS = 30


class EventLoopThread:
    """An asyncio event loop running on a daemon thread."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="hpcdist-dask-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coroutine, timeout=None):
        """Run ``coroutine`` on the loop and return its result (blocks the caller)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self):
        """Cancel what is left on the loop, stop it and join its thread."""
        self.run(_cancel_other_tasks())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


async def _cancel_other_tasks():
    tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextlib.contextmanager
def quiet_dask(*, verbose, dashboard, directory):
    """Dask's settings for a phase, restored afterwards.

    Logs of ``distributed`` at WARNING (INFO when ``verbose``); no HTTP
    routes on the scheduler and the workers unless ``dashboard`` (their
    HTTP servers then answer nothing); Dask's temporary files in
    ``directory``.
    """
    import dask  # the dask extra
    import distributed  # noqa: F401 - it sets its loggers' levels when first imported

    settings = {"temporary-directory": directory, "distributed.worker.http.routes": []}
    if not dashboard:
        settings["distributed.scheduler.http.routes"] = []
    logger = logging.getLogger("distributed")  # tornado's stays as distributed set it
    level = logger.level
    logger.setLevel(logging.INFO if verbose else logging.WARNING)
    try:
        with dask.config.set(settings):
            yield
    finally:
        logger.setLevel(level)


@contextlib.contextmanager
def single_threaded_libraries():
    """One BLAS/OpenMP thread on this rank unless the user set a thread variable."""
    if _threads_chosen():
        yield
        return
    with threadpool_limits(limits=1):
        yield


def _threads_chosen():
    """Whether the user chose BLAS/OpenMP thread counts (``OMP_NUM_THREADS``, ...)."""
    return any(name in os.environ for name in THREAD_VARIABLES if name != "NUMBA_NUM_THREADS")


def _one_thread_here():
    """This thread's own settings: one Numba thread unless ``NUMBA_NUM_THREADS`` says
    otherwise, and ``OMP_NUM_THREADS`` OpenMP threads (1 when unset)."""
    if "NUMBA_NUM_THREADS" not in os.environ:
        numba.set_num_threads(1)
    chosen = os.environ.get("OMP_NUM_THREADS", "").strip()
    # kept, not restored: the thread ends with the worker
    threadpool_limits(limits=int(chosen) if chosen.isdigit() and int(chosen) else 1,
                      user_api="openmp")


async def start_scheduler(host, security, dashboard):
    """Start a scheduler on ``host`` (a random port, TLS); returns it."""
    from distributed import Scheduler  # the dask extra

    # without the dashboard its HTTP server (which Dask always starts) has no routes and a
    # random port, leaving Dask's usual 8787 to dashboards that are wanted
    scheduler = Scheduler(host=host, port=0, protocol="tls", security=security,
                          dashboard=dashboard,
                          dashboard_address=f"{host}:{8787 if dashboard else 0}")
    await scheduler
    return scheduler


async def scheduler_members(scheduler):
    """``({worker address: name}, {client id})``: who the scheduler knows now."""
    return ({address: state.name for address, state in scheduler.workers.items()},
            set(scheduler.clients))


async def close_scheduler(scheduler):
    """Close the workers, wait until they have left, then close the scheduler."""
    for address in list(scheduler.workers):
        scheduler.close_worker(address)
    deadline = asyncio.get_running_loop().time() + LEAVE_SECONDS
    while scheduler.workers and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    await scheduler.close(reason="hpcdist: the Dask phase is over")


async def start_worker(address, *, security, host, name, threads, memory_limit, directory,
                       finished):
    """Start a worker that joins the scheduler at ``address``; returns it.

    ``finished`` (a threading.Event) is set when the worker has closed, for
    whatever reason. Each of the worker's threads runs Numba kernels and
    OpenMP loops on one thread (per-thread settings both) unless
    ``NUMBA_NUM_THREADS`` or ``OMP_NUM_THREADS`` says otherwise.
    """
    from distributed import Worker  # the dask extra

    worker = Worker(address, security=security, host=host, protocol="tls", name=name,
                    nthreads=threads, memory_limit=memory_limit, local_directory=directory,
                    dashboard=False, death_timeout=JOIN_SECONDS)
    await worker
    await _on_each_thread(worker.executor, threads, _one_thread_here)

    async def signal_finished():
        await worker.finished()
        finished.set()

    asyncio.get_running_loop().create_task(signal_finished())
    return worker


async def _on_each_thread(executor, threads, setup):
    """Call ``setup()`` once on each of the ``threads`` threads of ``executor``.

    Each call waits at a barrier until ``threads`` calls run at once, so
    they run on ``threads`` different threads of the pool.
    """
    barrier = threading.Barrier(threads)

    def one_thread():
        setup()
        barrier.wait(timeout=JOIN_SECONDS)

    loop = asyncio.get_running_loop()
    await asyncio.gather(*[loop.run_in_executor(executor, one_thread) for _ in range(threads)])


async def close_worker(worker):
    """Close ``worker`` (when the scheduler has not closed it)."""
    await worker.close(reason="hpcdist: the Dask phase is over")
