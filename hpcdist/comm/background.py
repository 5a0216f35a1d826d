"""A thread that runs blocking collectives while the caller's thread computes."""

import queue
import threading
from concurrent.futures import Future

from .mpi import MPI

__all__ = ["CommunicationThread"]


class CommunicationThread:
    """Runs the calls submitted to it one after another, on a thread of its own.

    A blocking MPI collective progresses at the library's full speed inside
    the call, wherever it is called; called from this thread it overlaps
    with the caller's computation (NumPy, BLAS and hpcdist's kernels release
    the GIL). This is Horovod's background loop and the worker thread of
    torch's process groups. Get one with :meth:`Context.communication_thread
    <hpcdist.comm.context.Context.communication_thread>`: its calls use a
    context of their own, on which no other thread communicates, and every
    rank submits its collectives in the same order.

    Parameters
    ----------
    ctx : Context
        The context the submitted calls communicate on (only from this thread).
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self._calls = queue.SimpleQueue()
        on_gpu = ctx.device.startswith("cuda:")
        device = ctx.xp.cuda.Device(int(ctx.device[5:])) if on_gpu else None
        self._thread = threading.Thread(target=self._run, args=(device,), daemon=True,
                                        name=f"hpcdist-communication-{ctx.rank}")
        self._thread.start()

    @staticmethod
    def available():
        """Whether the MPI library lets a second thread call it (MPI_THREAD_MULTIPLE)."""
        return MPI.Query_thread() == MPI.THREAD_MULTIPLE

    def submit(self, function, *args, **kwargs):
        """Run ``function(*args, **kwargs)`` after the calls submitted before it.

        Returns
        -------
        concurrent.futures.Future
            Its result, or the exception it raised.
        """
        future = Future()
        self._calls.put((future, function, args, kwargs))
        return future

    def _run(self, device):
        if device is not None:
            device.use()  # CuPy's current device is per thread: the caller's
        while True:
            item = self._calls.get()
            if item is None:
                return
            future, function, args, kwargs = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args, **kwargs))
                except BaseException as error:  # noqa: BLE001 - handed to the waiter
                    future.set_exception(error)

    def restart(self):
        """After a recovery from a lost rank: end the thread (the calls submitted before
        the loss have failed by then) and start a new one on the recovered context."""
        self.close()
        on_gpu = self.ctx.device.startswith("cuda:")
        device = self.ctx.xp.cuda.Device(int(self.ctx.device[5:])) if on_gpu else None
        self._thread = threading.Thread(target=self._run, args=(device,), daemon=True,
                                        name=f"hpcdist-communication-{self.ctx.rank}")
        self._thread.start()

    def close(self):
        """Run the calls already submitted, then end the thread."""
        if self._thread.is_alive():
            self._calls.put(None)
            self._thread.join()
