"""The RPC agent of one rank: a service thread, a handler pool, the calls in flight.

Every rank's agent owns two :class:`~hpcdist.comm.messages.MessageChannel`
(duplicates of the context's communicator, so only the job's own ranks can
reach them), one for requests and one for replies. Both carry pkl5
messages whose NumPy buffers go out of band:

``(call_id, data, buffers, reply_tag)``: a request, on tag ``REQUEST``
    ``data``/``buffers`` are :func:`~hpcdist.comm.messages.pack` of
    ``(func, args, kwargs)``, unpickled by the handler, so a call that does
    not unpickle is answered with an error instead of breaking the service.
``(call_id, ok, data, buffers)``: its reply, on tag ``reply_tag``
    ``ok``: the result packed; else ``data`` is ``(type, message, traceback)``
    as text.

The service thread receives every request and hands it to the handler
pool; it never sends and never blocks, so a rank always drains what others
send it. It sleeps between polls once idle (a blocked MPI probe would spin
a core). Callers and handlers send from their own threads.

A caller gives each call a reply tag no other pending call to that rank
has. A thread that waits on the call's future polls for that tag and
receives the reply itself: no hand-off from the service thread and no
wake-up of a sleeping thread.
The service thread also polls the replies channel, for the futures
nobody waits on yet and for the late replies of calls that timed out;
MPI's matched probes give each reply to exactly one of them.

With fault tolerance on (``hpcdist.init(fault_tolerance=...)``), a lost rank
stops the service of every survivor: the service thread's next poll from any
rank fails, the channels are revoked (so the other ranks' polls fail too),
and every pending call, every later call and every wait of the parameter
server on this rank raise :class:`~hpcdist.exceptions.RankFailedError`.
Once the context has been recovered (:func:`hpcdist.resilient.run`), the
agent serves again on it: new channels over the survivors, renumbered as the
context is; remote references made before the loss are refused.

Graceful shutdown is a termination-detection round (Mattern's counting
method): ranks sum their counts of requests sent, requests answered and
replies received until all three totals are equal and unchanged since the
previous round.
"""

import heapq
import itertools
import threading
import time
import traceback
from concurrent.futures import Future

from ..comm.faults import failed_ranks_of
from ..comm.messages import pack, thread_level, unpack
from ..comm.threads import precise_short_sleeps
from ..exceptions import InvalidStateError, RankFailedError
from .errors import RpcError, RpcTimeoutError
from .pool import HandlerPool

__all__ = ["Agent", "RpcFuture", "current_agent", "check_not_running", "install", "uninstall",
           "function_name", "running", "REQUEST"]

REQUEST = 1
_SPIN_SECONDS = 1e-3       # poll at the shortest sleep this long after the last message
_MIN_SLEEP = 3e-5          # (a shorter one competes for the cores with the handlers)
_REPLY_POLL_SLEEP = 1e-5   # a waiting caller's sleep between polls for its reply
_MAX_SLEEP = 2e-3          # the longest sleep between polls when idle
_MAX_SLEEP_WAITING = 2e-4  # ... while this rank waits for replies
_HANDLER_THREADS = 4
_MAX_REPLY_TAG = 1 << 20   # reply tags cycle through 1 .. this (or the MPI library's limit)
_AGENT = []                # the process's agent while RPC is initialised


def current_agent():
    """The running :class:`Agent`; RpcError when ``init_rpc`` has not been called."""
    if not _AGENT:
        raise RpcError("hpcdist.rpc is not initialised: call hpcdist.rpc.init_rpc() on every "
                       "rank first")
    return _AGENT[0]


def function_name(func):
    """How a call names its function in messages: the registered name or module.qualname."""
    if isinstance(func, str):
        return repr(func)
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


class RpcFuture(Future):
    """A :class:`concurrent.futures.Future` of one call.

    A thread that waits on it (``result``, ``exception``) receives the reply
    itself, polling for the call's reply tag, so no other thread has to hand
    it over. Inside a handler the wait lets the handler pool start another
    thread (nested calls never deadlock).
    """

    _deadline = None  # time.monotonic() when the call times out (timeout=), if it does

    def _wait(self, method, timeout):
        if self.done():
            return method(self, 0)
        with self._agent.pool.waiting():
            self._agent.wait_for_reply(self, timeout)
            return method(self, 0)

    def result(self, timeout=None):
        return self._wait(Future.result, timeout)

    def exception(self, timeout=None):
        return self._wait(Future.exception, timeout)


class Agent:
    """One rank's RPC service (see the module docstring).

    Parameters
    ----------
    ctx : hpcdist.comm.Context
        Its ranks are the ranks calls go to and come from.
    registry : dict
        Registered name -> function (shared with ``register_function``).
    """

    def __init__(self, ctx, registry):
        level, multiple = thread_level()
        if not multiple:
            raise RpcError(
                f"hpcdist.rpc needs MPI_THREAD_MULTIPLE (a service thread receives while "
                f"other threads send), but MPI was initialised with {level}. Let mpi4py "
                f"initialise MPI with mpi4py.rc.thread_level = 'multiple' (its default) and "
                f"use an MPI library built with thread support (the mpich wheel and Open MPI "
                f"are)")
        self.ctx = ctx
        self.registry = registry
        self.pool = HandlerPool(_HANDLER_THREADS)
        self._loss = None          # the RankFailedError that stopped the service, if one did
        self._loss_listeners = []  # fn(error) called once when the service meets a loss
        self.epoch = 0             # recoveries so far: remote references carry theirs
        self._open_channels()
        self.rrefs = {}            # rref id -> value owned here
        self._ids = itertools.count()
        self._pending = {}         # call id -> (future, to, function name)
        self._deadlines = []       # heap of (deadline, call id, timeout)
        self._reply_tags = itertools.count()
        self._largest_reply_tag = min(self.replies.max_tag, _MAX_REPLY_TAG)
        self._tags_in_use = set()  # (rank, reply tag) of the pending calls
        self._precise_sleeps = threading.local()
        self._lock = threading.Lock()
        self._sent = self._answered = self._replies = 0
        self._stopping = False
        self._thread = self._service_thread()
        if ctx.fault_tolerance is not None:
            ctx.on_recovery(self._after_recovery)

    def _open_channels(self):
        """The request and reply channels on the context's communicator (collective)."""
        ctx = self.ctx
        self.rank, self.size = ctx.rank, ctx.size
        self.channel = ctx.channel()  # requests
        self.replies = ctx.channel()  # replies, on the tag each call names
        self._largest_reply_tag = min(self.replies.max_tag, _MAX_REPLY_TAG)

    def _service_thread(self):
        return threading.Thread(target=self._serve, name="hpcdist-rpc-service", daemon=True)

    def start(self):
        """Start serving (once the agent is installed: handlers look it up)."""
        self._thread.start()

    # -- lost ranks --------------------------------------------------------------------------
    def add_loss_listener(self, listener):
        """Call ``listener(error)`` (a :class:`RankFailedError`) when this rank's service
        meets a lost rank, from the thread that met it; at once if it has met one."""
        with self._lock:
            self._loss_listeners.append(listener)
            loss = self._loss
        if loss is not None:
            listener(loss)

    def remove_loss_listener(self, listener):
        """Stop calling ``listener`` (see :meth:`add_loss_listener`)."""
        with self._lock:
            if listener in self._loss_listeners:
                self._loss_listeners.remove(listener)

    def _lost(self, error):
        """The service met a lost rank: every pending call fails with ``error``'s kind,
        later calls too (until the context is recovered); the listeners learn of it."""
        with self._lock:
            if self._loss is not None:
                return
            self._loss = error
            pending, self._pending = self._pending, {}
            self._deadlines.clear()
            self._tags_in_use.clear()
            listeners = list(self._loss_listeners)
        for future, to, name in pending.values():
            if not future.done():
                future.set_exception(self.loss_error(f"rpc to rank {to} ({name})"))
        for listener in listeners:
            listener(error)

    def loss_error(self, where):
        """A new :class:`RankFailedError` for ``where`` after the loss this rank met (the
        lost ranks known by now, where the first notice named none)."""
        loss = self._loss
        failed = loss.failed_ranks or failed_ranks_of(self.ctx._fault_root.comm)
        return RankFailedError(f"{where}: {loss}", failed)

    def _fail_if_pending(self, future):
        """Fail ``future`` after the loss, if no reply or loss has completed it."""
        with self._lock:
            entry = self._pending.pop(next((call_id for call_id, pending in self._pending.items()
                                            if pending[0] is future), None), None)
        if entry is not None and not future.done():
            future.set_exception(self.loss_error(f"rpc to rank {entry[1]} ({entry[2]})"))

    def _check_no_loss(self, where):
        if self._loss is not None:
            raise self.loss_error(where)

    def _after_recovery(self):
        """The context was recovered from a lost rank (collective over the survivors):
        serve again on new channels over them. Calls and remote references of before
        the loss are gone."""
        if self._stopping:
            return
        self._end_service(lambda to, name: RankFailedError(
            f"rpc to rank {to} ({name}): the context was recovered from a lost rank before "
            "the reply arrived"))
        self._open_channels()
        with self._lock:
            self._sent = self._answered = self._replies = 0
            self._loss = None
            self.epoch += 1
            self._stopping = False
        self._thread = self._service_thread()
        self._thread.start()

    # -- calling ---------------------------------------------------------------------------
    def call(self, to, func, args, kwargs, timeout):
        """Send one call to rank ``to``; returns its :class:`RpcFuture`."""
        if self._stopping:
            raise RpcError("hpcdist.rpc was shut down on this rank; call init_rpc() again")
        name = function_name(func)
        try:
            data, buffers = pack((func, args, kwargs))
        except Exception as exc:
            raise RpcError(f"rpc to rank {to}: the call of {name} cannot be pickled "
                           f"({type(exc).__name__}: {exc}); pass a registered name or a "
                           f"module-level function and picklable arguments") from exc
        future = RpcFuture()
        future._agent = self
        with self._lock:
            self._check_no_loss(f"rpc to rank {to} ({name})")
            call_id = next(self._ids)
            tag = self._free_reply_tag(to)
            future._reply = (to, tag)
            self._pending[call_id] = (future, to, name)
            self._tags_in_use.add((to, tag))
            if timeout is not None:
                future._deadline = time.monotonic() + timeout
                heapq.heappush(self._deadlines, (future._deadline, call_id, timeout))
            self._sent += 1
        try:
            self.channel.send((call_id, data, buffers, tag), to, REQUEST)
        except RankFailedError as error:
            self._lost(error)
            raise self.loss_error(f"rpc to rank {to} ({name})") from error
        return future

    def _free_reply_tag(self, to):
        """A reply tag (1 or more) no pending call to ``to`` has (under the lock)."""
        while True:
            tag = 1 + next(self._reply_tags) % self._largest_reply_tag
            if (to, tag) not in self._tags_in_use:
                return tag

    def wait_for_reply(self, future, timeout=None):
        """Receive replies on ``future``'s tag until it is done (or ``timeout`` seconds
        pass), sleeping between polls as the service thread does.

        A reply with the tag may be a late one of an earlier call that timed out;
        like every reply, it completes whichever call it answers (if still pending).
        The first wait of a thread sets its timer slack to 1 us, as the service
        thread's (:func:`~hpcdist.comm.threads.precise_short_sleeps`).
        """
        if not getattr(self._precise_sleeps, "set", False):
            precise_short_sleeps()
            self._precise_sleeps.set = True
        to, tag = future._reply
        poll = self.replies.poll_from
        start = time.monotonic()
        deadline = future._deadline
        while not future.done():
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                self._expire()  # the call's own timeout, not left to the service thread
                continue
            try:
                message = poll(to, tag)
            except RankFailedError as error:
                self._lost(error)  # fails the pending calls, this one too
                self._fail_if_pending(future)
                continue
            if message is not None:
                self._complete(message)
                continue
            waited = now - start
            if timeout is not None and waited >= timeout:
                return
            time.sleep(_REPLY_POLL_SLEEP if waited < _SPIN_SECONDS else
                       min(_MAX_SLEEP_WAITING, waited / 8))

    # -- serving ---------------------------------------------------------------------------
    def _serve(self):
        precise_short_sleeps()
        poll_requests, poll_replies = self.channel.poll, self.replies.poll
        clock = time.perf_counter
        last = clock()
        while not self._stopping:
            try:
                request = poll_requests()
                reply = poll_replies()
            except RankFailedError as error:
                self._lost(error)
                return  # serves again once the context is recovered
            if request is not None:
                message, source, _ = request
                self.pool.submit(self._handle, source, message)
            if reply is not None:  # nobody waits on it yet, or it came late
                self._complete(reply[0])
            if self._deadlines:  # every pass: under a stream of messages too
                self._expire()
            if request is not None or reply is not None:
                last = clock()
                continue
            # a real sleep, never sleep(0): a thread that only yields may take the GIL
            # straight back and keep the handlers from it for a whole switch interval
            idle = clock() - last
            longest = _MAX_SLEEP_WAITING if self._pending else _MAX_SLEEP
            time.sleep(_MIN_SLEEP if idle < _SPIN_SECONDS else min(longest, idle / 8))

    def _handle(self, source, message):
        call_id, data, buffers, reply_tag = message
        try:
            func, args, kwargs = unpack(data, buffers)
            if isinstance(func, str):
                func = self._registered(func)
            reply = (call_id, True, *pack(func(*args, **kwargs)))
        except Exception as exc:  # noqa: BLE001 - the caller gets it as RpcError
            reply = (call_id, False, _describe(exc, self.rank), [])
        try:
            self.replies.send(reply, source, reply_tag)
        except RankFailedError as error:  # the caller (or another rank) was lost
            self._lost(error)
        finally:
            with self._lock:
                self._answered += 1

    def _registered(self, name):
        func = self.registry.get(name)
        if func is None:
            known = ", ".join(sorted(map(repr, self.registry))) or "none"
            raise RpcError(f"no function is registered as {name!r} on rank {self.rank} "
                           f"(registered: {known}); call register_function({name!r}, func) "
                           f"on the rank that runs it")
        return func

    def _complete(self, message):
        """Count a received reply and complete its call, if still pending."""
        call_id, ok, data, buffers = message
        with self._lock:
            self._replies += 1
            entry = self._take_pending(call_id)
        if entry is None:
            return  # timed out already
        future, to, name = entry
        if ok:
            try:
                result = unpack(data, buffers)
            except Exception as exc:  # noqa: BLE001
                future.set_exception(RpcError(
                    f"rpc to rank {to} ({name}): its result cannot be unpickled here "
                    f"({type(exc).__name__}: {exc})"))
                return
            future.set_result(result)
            return
        remote_type, remote_message, remote_traceback, *failed_ranks = data
        if remote_type == _RANK_FAILED:  # the handler met a lost rank: so does this call
            future.set_exception(RankFailedError(f"rpc to rank {to} ({name}): {remote_message}",
                                                 *failed_ranks))
            return
        future.set_exception(RpcError(
            f"rpc to rank {to} ({name}) raised {remote_type}: {remote_message}\n"
            f"--- traceback on rank {to} ---\n{remote_traceback.rstrip()}",
            remote_rank=to, remote_type=remote_type, remote_message=remote_message,
            remote_traceback=remote_traceback))

    def _take_pending(self, call_id):
        """Remove a pending call (under the lock); its entry, or None."""
        entry = self._pending.pop(call_id, None)
        if entry is not None:
            self._tags_in_use.discard(entry[0]._reply)
        return entry

    def _expire(self):
        now = time.monotonic()
        expired = []
        with self._lock:
            while self._deadlines and self._deadlines[0][0] <= now:
                _, call_id, timeout = heapq.heappop(self._deadlines)
                entry = self._take_pending(call_id)
                if entry is not None:
                    expired.append((entry, timeout))
        for (future, to, name), timeout in expired:
            future.set_exception(RpcTimeoutError(
                f"rpc to rank {to} ({name}) did not answer within timeout={timeout:g} s"))

    # -- shutting down ---------------------------------------------------------------------
    def counts(self):
        """(requests sent, requests answered, replies received) by this rank so far."""
        with self._lock:
            return self._sent, self._answered, self._replies

    def wait_quiet(self):
        """Return when no call is outstanding on any rank (collective)."""
        previous = None
        pause = 1e-4
        while True:
            self._check_no_loss("hpcdist.rpc's wait for the calls in flight")
            try:
                totals = tuple(int(v) for v in self.channel.allreduce_sum(self.counts()))
            except RankFailedError as error:
                self._lost(error)
                raise self.loss_error("hpcdist.rpc's wait for the calls in flight") from error
            if totals[0] == totals[1] == totals[2] and totals == previous:
                return
            previous = totals
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def _end_service(self, error, pool=False):
        """Stop the service thread (and the handler pool); the pending calls fail with
        ``error(to, name)``; the values of remote references are dropped."""
        self._stopping = True  # the service thread ends at its next poll
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        if pool:
            self.pool.stop(timeout=5.0)
        with self._lock:
            pending, self._pending = self._pending, {}
            self._deadlines.clear()
            self._tags_in_use.clear()
        for future, to, name in pending.values():
            if not future.done():
                future.set_exception(error(to, name))
        self.rrefs.clear()

    def stop(self, free):
        """Stop serving on this rank; calls still pending fail with RpcError."""
        self._end_service(lambda to, name: RpcError(
            f"rpc to rank {to} ({name}): hpcdist.rpc was shut down before the reply arrived"),
            pool=True)
        if free:
            self.channel.free()
            self.replies.free()


_RANK_FAILED = f"{RankFailedError.__module__}.{RankFailedError.__qualname__}"


def _describe(exc, rank):
    """A handler's exception as text: (qualified type, message, traceback), and the lost
    ranks of a RankFailedError."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    text = "".join(traceback.format_exception(kind, exc, exc.__traceback__))
    if isinstance(exc, RankFailedError):
        return name, str(exc), text, exc.failed_ranks
    return name, str(exc), text


def running():
    """Whether an agent runs in this process."""
    return bool(_AGENT)


def check_not_running():
    """InvalidStateError when an agent runs already."""
    if running():
        raise InvalidStateError("hpcdist.rpc is already initialised on this rank; call "
                                "hpcdist.rpc.shutdown() before init_rpc() again")


def install(agent):
    """Make ``agent`` the process's agent."""
    check_not_running()
    _AGENT.append(agent)


def uninstall():
    """The process's agent, removed (None if there was none)."""
    return _AGENT.pop() if _AGENT else None
