"""One slice of one named parameter on the rank that owns it: the parameter server's state.

A :class:`Shard` holds the values, their version (updates applied so far),
each worker's pending gradient and, per mode, when a request may proceed:

``sync``
    A round is complete once every worker still training has pushed; an
    ``apply`` then applies the mean of the round's gradients (summed in
    worker order), once. A pull waits until the round the worker pushed to
    has been applied.
``async``
    ``apply`` applies the calling worker's pending gradient at once.
``bounded``
    As ``async``, but a pull waits while the worker has applied more than
    ``staleness`` updates beyond the slowest worker still training.

Every pull and apply is recorded as an event (``worker * 2 + kind``); with a
replay list, each request waits until it is the next recorded event, so the
same updates meet the same versions again. Requests run in RPC handler
threads (or the owner's own thread); the shard's condition serialises them.

After a lost rank (:meth:`Shard.abort`) every request, waiting or new, raises
:class:`~hpcdist.exceptions.RankFailedError`: a round or a staleness bound
that counted on the lost worker would otherwise wait for it forever.
"""

import collections
import threading
import time

import numpy as np

from ..exceptions import InvalidStateError, RankFailedError
from ..rpc import handler_waiting

__all__ = ["Shard", "PULL", "APPLY"]

PULL, APPLY = 0, 1
_KIND_NAMES = ("pull", "apply")


class Shard:
    """The owner's part of one parameter.

    Parameters
    ----------
    key : str
        ``name#index``, for messages and traces.
    values : ndarray
        This slice's initial values (copied).
    workers : int
        How many workers train (the ranks).
    mode : {"sync", "async", "bounded"}
    staleness : int
        The bound of ``bounded``.
    timeout : float
        Seconds a request may wait before it fails (0: no limit).
    replay : ndarray of int, optional
        The recorded events to follow.
    """

    def __init__(self, key, values, workers, mode, staleness, timeout, replay=None):
        self.key = key
        self.values = np.array(values, copy=True)
        self.version = 0
        self.mode, self.staleness, self.timeout = mode, staleness, timeout
        self.workers = workers
        self.pending = {}        # worker -> summed gradient not yet applied
        self.basis = {}          # worker -> version its pending gradient was computed on
        self.pulled = np.zeros(workers, dtype=np.int64)  # version of each worker's last pull
        self.clocks = np.zeros(workers, dtype=np.int64)  # updates each worker applied
        self.finished = set()
        self.round = set()       # sync: workers that pushed to the current round
        self.events = []
        self.replay = None if replay is None else [int(event) for event in replay]
        self._unplayed = None if replay is None else collections.Counter(self.replay)
        self.max_staleness = 0
        self.learning_rate = None  # sync: the last one given, for a round a finish completes
        self.loss = None           # the RankFailedError of a lost rank (see abort)
        self._condition = threading.Condition()

    # -- requests ------------------------------------------------------------------------
    def pull(self, worker):
        """``(values copy, version, seconds waited)`` once the mode lets ``worker`` read."""
        with self._condition:
            self._check_not_lost(worker, "pull")
            waited = self._wait(lambda: self._may_pull(worker), worker, PULL)
            self._record(worker, PULL)
            self.pulled[worker] = self.version
            return self.values.copy(), self.version, waited

    def push(self, worker, gradient):
        """Add ``gradient`` to the worker's pending one; returns whether a sync round is
        complete (always False in the other modes)."""
        with self._condition:
            self._check_not_lost(worker, "push")
            if worker in self.pending:
                self.pending[worker] += gradient
            else:
                self.pending[worker] = np.array(gradient, dtype=self.values.dtype, copy=True)
                self.basis[worker] = int(self.pulled[worker])
            if self.mode == "sync":
                self.round.add(worker)
                return self._round_complete()
            return False

    def apply(self, worker, learning_rate):
        """Apply pending gradients; returns ``(applied, staleness)``.

        sync: the round's mean, if the round is complete (another worker's
        call may have applied it already). async and bounded: this worker's
        pending gradient, if any.
        """
        with self._condition:
            self._check_not_lost(worker, "apply")
            if self.mode == "sync":
                self.learning_rate = learning_rate
                return self._apply_round(), 0
            if worker not in self.pending:
                return False, 0
            self._wait(lambda: True, worker, APPLY)
            self._record(worker, APPLY)
            self.values -= learning_rate * self.pending.pop(worker)
            staleness = self.version - self.basis.pop(worker)
            self.max_staleness = max(self.max_staleness, staleness)
            self.version += 1
            self.clocks[worker] += 1
            self._condition.notify_all()
            return True, staleness

    def push_pull(self, worker, gradient, learning_rate):
        """:meth:`push`, :meth:`apply` and :meth:`pull` in one request; returns
        ``(values, version, seconds waited, applied, staleness)``."""
        self.push(worker, gradient)
        applied, staleness = self.apply(worker, learning_rate)
        return (*self.pull(worker), applied, staleness)

    def clear(self, worker):
        """Drop the worker's pending gradient (and its place in a sync round)."""
        with self._condition:
            self._check_not_lost(worker, "clear")
            self.pending.pop(worker, None)
            self.basis.pop(worker, None)
            self.round.discard(worker)
            self._condition.notify_all()

    def finish(self, worker):
        """The worker trains no more (for now): rounds and staleness bounds stop counting
        it, and a sync round that only waited for it is applied."""
        with self._condition:
            self._check_not_lost(worker, "finish")
            self.finished.add(worker)
            if self.mode == "sync" and self.learning_rate is not None:
                self._apply_round()
            self._condition.notify_all()

    def resume(self, worker):
        """The worker trains again, its count of updates starting anew."""
        with self._condition:
            self._check_not_lost(worker, "resume")
            self.finished.discard(worker)
            self.clocks[worker] = 0
            self._condition.notify_all()

    def abort(self, error):
        """A rank was lost (``error``, a RankFailedError): every request waiting here, and
        every later one, raises RankFailedError."""
        with self._condition:
            self.loss = error
            self._condition.notify_all()

    def _check_not_lost(self, worker, what):
        # with the lock held
        loss = self.loss
        if loss is not None:
            raise RankFailedError(f"ParameterServer: worker {worker}'s {what} of {self.key!r}: "
                                  f"{loss}", loss.failed_ranks)

    def _apply_round(self):
        """Apply a complete sync round's mean gradient (summed in worker order); whether it
        did."""
        if not self.round or not self._round_complete():
            return False
        workers = sorted(self.round)
        total = self.pending.pop(workers[0])
        for other in workers[1:]:
            total += self.pending.pop(other)
        total /= len(workers)
        self.values -= self.learning_rate * total
        self.round.clear()
        self.basis.clear()
        self.version += 1
        self._condition.notify_all()
        return True

    # -- conditions --------------------------------------------------------------------------
    def _active(self):
        return [w for w in range(self.workers) if w not in self.finished]

    def _round_complete(self):
        return all(w in self.round for w in self._active())

    def _may_pull(self, worker):
        if self.mode == "sync":
            return worker not in self.round
        if self.mode == "bounded" and self.replay is None:
            active = self._active() or [worker]
            return self.clocks[worker] - self.clocks[active].min() <= self.staleness
        return True

    def _wait(self, condition, worker, kind):
        """Wait (with the lock held) until ``condition()`` and, when replaying, until this
        request is the next recorded event; returns the seconds waited."""
        if self.replay is not None:
            self._check_in_replay(worker, kind)
            wanted = worker * 2 + kind

            def ready():
                return condition() and self.replay[len(self.events)] == wanted
        else:
            ready = condition
        if ready():
            return 0.0
        start = time.perf_counter()
        deadline = start + self.timeout if self.timeout else None
        with handler_waiting():
            while not ready():
                self._check_not_lost(worker, _KIND_NAMES[kind])
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    raise InvalidStateError(self._stuck(worker, kind))
                self._condition.wait(left)
        return time.perf_counter() - start

    def _check_in_replay(self, worker, kind):
        wanted = worker * 2 + kind
        if not self._unplayed[wanted]:
            raise InvalidStateError(
                f"ParameterServer replay: worker {worker} asks for a {_KIND_NAMES[kind]} of "
                f"{self.key!r} that the trace does not hold (it recorded "
                f"{self.replay.count(wanted)} in all); the run must repeat the traced one: "
                "the same workers, steps, names and calls")

    def _stuck(self, worker, kind):
        waiting_for = {
            "sync": f"round {self.version} is complete (pushed: {sorted(self.round)} of workers "
                    f"{self._active()}; every worker must push every name each step, and one "
                    "whose ready() is True must call apply_gradients)",
            "bounded": f"the slowest worker catches up (updates applied per worker: "
                       f"{self.clocks.tolist()}, staleness={self.staleness})",
            "async": "its turn"}[self.mode]
        if self.replay is not None:
            position = len(self.events)
            event = self.replay[position] if position < len(self.replay) else None
            waiting_for = (f"the traced event #{position} ({_KIND_NAMES[event % 2]} by worker "
                           f"{event // 2})" if event is not None else "the end of the trace")
        return (f"ParameterServer: worker {worker}'s {_KIND_NAMES[kind]} of {self.key!r} "
                f"waited {self.timeout:g} s (HPCDIST_STALL_TIMEOUT) for {waiting_for}")

    def _record(self, worker, kind):
        self.events.append(worker * 2 + kind)
        if self.replay is not None:  # the next recorded request may go on now
            self._unplayed[worker * 2 + kind] -= 1
            self._condition.notify_all()
