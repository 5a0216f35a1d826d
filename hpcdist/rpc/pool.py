"""The handler pool: a few threads, and one more whenever all are waiting on nested calls.

A handler may call ``rpc_sync`` on another rank, which may call back, and so
on around the ranks. A fixed pool would deadlock once every thread waits on
such a call; this one counts a thread that waits on an RPC result (through
:meth:`HandlerPool.waiting`) as not working, and starts another thread when
work is queued and fewer than ``workers`` threads are working (the
compensation of Java's ForkJoinPool). Threads above ``workers`` leave after
``linger`` idle seconds. A handler that blocks on anything else (a sleep, a
lock) keeps its thread: queued calls then wait for a free thread.
"""

import collections
import threading

__all__ = ["HandlerPool"]


class HandlerPool:
    """Runs ``fn(*args)`` tasks on daemon threads.

    Parameters
    ----------
    workers : int
        Threads working at once (threads waiting on RPC results not counted).
    name : str
        Thread name prefix.
    linger : float
        Seconds an idle thread above ``workers`` waits for work before it ends.
    """

    def __init__(self, workers=4, name="hpcdist-rpc-handler", linger=2.0):
        self._workers = workers
        self._name = name
        self._linger = linger
        self._tasks = collections.deque()
        self._lock = threading.Condition(threading.Lock())
        self._threads = []
        self._idle = 0
        self._waiting = 0
        self._stopping = False
        self._mine = threading.local()
        self._spawned = 0

    def submit(self, fn, *args):
        """Queue ``fn(*args)``; its exceptions are the caller's business (catch them in fn)."""
        with self._lock:
            self._tasks.append((fn, args))
            if self._idle > 0:
                self._lock.notify()
            else:
                self._maybe_spawn()

    def _maybe_spawn(self):
        # with the lock held
        if self._stopping or not self._tasks or self._idle > 0:
            return
        if len(self._threads) - self._waiting < self._workers:
            self._spawned += 1
            thread = threading.Thread(target=self._work, name=f"{self._name}-{self._spawned}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def in_pool(self):
        """Whether the calling thread is one of the pool's."""
        return getattr(self._mine, "pool", False)

    def waiting(self):
        """A context manager around a pool thread's wait for an RPC result: the
        thread does not count as working meanwhile (elsewhere it does nothing)."""
        return _Waiting(self if self.in_pool() else None)

    def _work(self):
        self._mine.pool = True
        me = threading.current_thread()
        while True:
            with self._lock:
                while not self._tasks and not self._stopping:
                    self._idle += 1
                    woken = self._lock.wait(self._linger)
                    self._idle -= 1
                    if not woken and not self._tasks and len(self._threads) > self._workers:
                        self._threads.remove(me)
                        return
                if not self._tasks:  # stopping, queue drained
                    self._threads.remove(me)
                    return
                fn, args = self._tasks.popleft()
            fn(*args)

    def stop(self, timeout=None):
        """Let the threads finish the queued tasks and end; wait up to ``timeout`` seconds."""
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
            threads = list(self._threads)
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(timeout)


class _Waiting:
    __slots__ = ("pool",)

    def __init__(self, pool):
        self.pool = pool

    def __enter__(self):
        pool = self.pool
        if pool is not None:
            with pool._lock:
                pool._waiting += 1
                pool._maybe_spawn()

    def __exit__(self, *exc):
        pool = self.pool
        if pool is not None:
            with pool._lock:
                pool._waiting -= 1
