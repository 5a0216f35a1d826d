"""Background writing of a save (``CheckpointManager(async_save=True)``).

Design: the thread only writes this rank's files (HDF5 through h5py, which
releases the GIL while HDF5 works), fsyncs them and computes their CRCs; it
makes no MPI call of hpcdist's (with the mpio backend, parallel HDF5 does
MPI-IO on a communicator of its own, see the manager). Everything the ranks
must agree on (that every rank's files are complete, the manifest, the
commit, retention) happens on the main thread, in the next ``save`` or
``wait``, so no collective ever runs from two threads and the MPI thread
level does not matter for the sharded backend. The price: a step written
in the background becomes visible only at the next ``save``/``wait``.
"""

import atexit
import threading
import warnings
import weakref

__all__ = ["BackgroundSave", "track", "join_all_at_exit"]

_LIVE = weakref.WeakSet()


class BackgroundSave:
    """One save being written by a background thread.

    Parameters
    ----------
    target : callable
        Writes the files; its return value is the rank's report.
    info : tuple
        What the main thread needs to commit it later.
    """

    def __init__(self, target, info, name):
        self.info = info
        self._result = None
        self._error = None
        self._thread = threading.Thread(target=self._run, args=(target,), name=name, daemon=True)
        self._thread.start()

    def _run(self, target):
        try:
            self._result = target()
        except BaseException as error:  # noqa: BLE001 - reported at the next save/wait
            self._error = error

    def done(self):
        """Whether the writing has finished (successfully or not)."""
        return not self._thread.is_alive()

    def join(self):
        """Wait for the thread; returns ``(report, error)``, one of them None."""
        self._thread.join()
        return self._result, self._error


_REGISTERED = []


def track(manager):
    """Remember ``manager`` so that :func:`join_all_at_exit` can find its thread.

    The exit hook is registered on the first call, after hpcdist.comm's own,
    so it runs first: threads end before the contexts are freed.
    """
    if not _REGISTERED:
        atexit.register(join_all_at_exit)
        _REGISTERED.append(True)
    _LIVE.add(manager)


def join_all_at_exit():
    """At interpreter exit: let unfinished background writes end (they are not committed)."""
    for manager in list(_LIVE):
        pending = getattr(manager, "_pending", None)
        if pending is not None:
            pending.join()
            manager._pending = None
            warnings.warn(f"hpcdist checkpoint: step {pending.info[0]} in {manager.directory} "
                          "was written in the background but never committed (call "
                          "mgr.wait() before the program ends); it will be removed",
                          RuntimeWarning, stacklevel=1)
