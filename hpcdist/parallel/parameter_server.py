"""A parameter server whose shards live on the training ranks, served over hpcdist.rpc.

Every rank is a worker and a server. A parameter below ``slice_size``
elements (default ``SLICE_THRESHOLD``, 2**20) lives on one rank (chosen from
its name); a larger one is cut into one contiguous slice per rank, as ps-lite
shards key ranges, so pushes and pulls of a large model spread over every
rank's memory. A small parameter stays whole because every slice is a
message that a busy rank must answer: cutting a small model into slices
costs more in messages than it saves in memory. A worker reaches a slice on another rank with
:func:`~hpcdist.rpc.rpc_async` (arrays travel as raw buffers) and its own
slices with a plain call; the owner's RPC handler threads update the slice
(:mod:`.ps_shard`), so no rank waits for another unless the mode says so.

The training loop, the same in every mode::

    ps.set_parameters("w", w0)                  # collective, once per name
    for batch in batches:
        w = ps.get_parameters("w")              # waits only as the mode says
        ps.accumulate_gradient("w", gradient(w, batch))
        if ps.ready("w"):
            ps.apply_gradients("w", learning_rate)
            ps.clear_gradients("w")
    ps.close()                                  # collective

With fault tolerance on (``hpcdist.init(fault_tolerance=...)``), a lost rank
makes every call of every survivor raise
:class:`~hpcdist.exceptions.RankFailedError`, waiting ones included (a sync
round cannot complete without the lost worker). The server cannot go on
after the loss, since the slices the lost rank held went with it: once the
context is recovered its calls raise :class:`~hpcdist.exceptions.InvalidStateError`;
a new server takes over (:class:`~hpcdist.parallel.ParameterServerTraining`
makes one by itself, from the parameters the survivors restored).
"""

import itertools
import math
import numbers
import os
import zlib

import numpy as np

from .._environment import stall_timeout_from_env
from .._partition import balanced_counts, offsets_of
from ..comm import barrier, gather_object, resolve_context
from ..comm.agreement import agree_config
from ..exceptions import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidStateError,
    RankFailedError,
)
from ..rpc import init_rpc, is_initialized, rpc_async, shutdown, wait_all
from ..rpc.agent import current_agent
from .errors import DivergenceError
from .ps_shard import Shard

__all__ = ["ParameterServer", "MODES", "SLICE_THRESHOLD"]

MODES = ("sync", "async", "bounded")
SLICE_THRESHOLD = 1 << 20     # elements: parameters this large are sliced over every rank
_SERVERS = {}                 # instance id -> this process's ParameterServer
_INSTANCES = itertools.count()
_RPC_USE = {"servers": 0, "started_here": False}  # servers using the RPC service; who started it


def _serve(instance, operation, key, worker, *args):
    """The RPC handler: ``operation`` on this rank's shard ``key`` of server ``instance``."""
    return getattr(_SERVERS[instance].shards[key], operation)(worker, *args)


class ParameterServer:
    """Parameters shared by every rank, updated by pushed gradients.

    Parameters
    ----------
    mode : {"sync", "async", "bounded"}, default="sync"
        ``"sync"``: a round's update is the mean of every worker's gradient,
        applied once, and :meth:`get_parameters` waits for it (synchronous
        SGD). ``"async"``: each worker's gradients are applied when it calls
        :meth:`apply_gradients`; no worker waits for another (Downpour).
        ``"bounded"``: as async, but :meth:`get_parameters` waits while this
        worker has applied more than ``staleness`` updates beyond the
        slowest worker (stale synchronous parallel).
    staleness : int, default=4
        The bound of ``"bounded"``, in updates.
    slice_size : int, default=SLICE_THRESHOLD
        Parameters with at least this many elements are cut into one slice
        per rank; smaller ones live whole on one rank.
    trace : str or path, optional
        Record the order in which each slice's pulls and updates happened;
        written by :meth:`close` (rank 0 writes one ``.npz`` file).
    replay : str or path, optional
        A trace to follow: each slice serves pulls and updates in the
        recorded order, so the same run gives the same parameters bit for bit.
    ctx : Context, optional

    Notes
    -----
    Pushes and pulls are counted per calling rank in :meth:`stats`. A wait
    longer than ``HPCDIST_STALL_TIMEOUT`` seconds fails with an error
    naming what it waited for, instead of hanging.
    """

    def __init__(self, *, mode="sync", staleness=4, slice_size=SLICE_THRESHOLD, trace=None,
                 replay=None, ctx=None):
        if mode not in MODES:
            raise InvalidArgumentError(f"ParameterServer: mode={mode!r} is not one of {MODES}")
        if isinstance(staleness, bool) or not isinstance(staleness, numbers.Integral):
            raise InvalidArgumentTypeError(f"ParameterServer: staleness={staleness!r} should "
                                           "be an int (updates a worker may run ahead)")
        if staleness < 0:
            raise InvalidArgumentError(f"ParameterServer: staleness={staleness} should be >= 0")
        if isinstance(slice_size, bool) or not isinstance(slice_size, numbers.Integral) or \
                slice_size < 1:
            raise InvalidArgumentError(f"ParameterServer: slice_size={slice_size!r} should be "
                                       "an int >= 1 (elements from which a parameter is sliced)")
        if trace is not None and replay is not None:
            raise InvalidArgumentError("ParameterServer: give trace= or replay=, not both")
        self.mode, self.staleness, self.slice_size = mode, int(staleness), int(slice_size)
        self.ctx = resolve_context(ctx)
        self.trace = None if trace is None else os.fspath(trace)
        self._replay = None if replay is None else _load_trace(os.fspath(replay), self)
        self._id = next(_INSTANCES)
        self._timeout = stall_timeout_from_env()
        self._layouts = {}    # name -> (shape, dtype, [(owner, start, stop)])
        self.shards = {}      # key -> Shard held by this rank
        self._state = {}      # name -> {"pending": bool, "complete": bool}
        self._uses_rpc = False
        self._closed = False
        self._loss = None        # the RankFailedError of a lost rank, once met
        self._recovered = False  # the context was recovered since: this server cannot go on
        self._stats = {"pushes": 0, "pulls": 0, "applies": 0, "max_staleness": 0,
                       "seconds_waited": 0.0}

    # -- the loop --------------------------------------------------------------------------
    def set_parameters(self, name, array):
        """Collective: serve ``array`` under ``name`` (every rank passes the same values).

        Raises
        ------
        ConfigMismatchError
            On every rank, when the ranks pass different names, shapes, dtypes
            or values, or created the server with different options.
        """
        self._check_open("set_parameters")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentTypeError(f"ParameterServer.set_parameters: name={name!r} "
                                           "should be a non-empty str")
        if name in self._layouts:
            raise InvalidStateError(f"ParameterServer.set_parameters: {name!r} is served "
                                    "already; give each parameter its own name")
        array = np.asarray(array)
        if array.dtype.kind != "f":
            raise InvalidArgumentTypeError(
                f"ParameterServer.set_parameters({name!r}): dtype {array.dtype} is not a "
                "floating type; pass the parameters as float32 or float64")
        if self.ctx.size > 1 and not self._uses_rpc:
            _acquire_rpc(self.ctx)
            self._uses_rpc = True
            current_agent().add_loss_listener(self._on_loss)
            if self.ctx.fault_tolerance is not None:
                self.ctx.on_recovery(self._after_recovery)
        slices = self._slices(name, array.size)
        flat = array.reshape(-1)
        replay = self._replay or {}
        for index, (owner, start, stop) in enumerate(slices):
            if owner == self.ctx.rank:
                key = f"{name}#{index}"
                self.shards[key] = Shard(key, flat[start:stop], self.ctx.size, self.mode,
                                         self.staleness, self._timeout,
                                         replay.get(key) if self.mode != "sync" else None)
        _SERVERS[self._id] = self
        agree_config(
            self.ctx, f"ParameterServer.set_parameters({name!r})",
            {"instance": self._id, "mode": self.mode, "staleness": self.staleness,
             "slice_size": self.slice_size,
             "trace": self.trace is not None, "replay": self._replay is not None,
             "name": name, "shape": array.shape, "dtype": array.dtype, "values": array},
            fix="every rank must create its ParameterServers in the same order with the same "
                "options and set the same parameters with the same initial values")
        self._layouts[name] = (array.shape, array.dtype, slices)
        self._state[name] = {"pending": False, "complete": False}

    def get_parameters(self, name):
        """The current parameters of ``name`` (a new array), after any wait the mode sets."""
        return self._assembled(name, self._each_slice(name, "get_parameters", "pull"))

    def _assembled(self, name, replies):
        """The slices' ``(values, version, seconds waited)`` as one array; counts the pull."""
        shape, _, _ = self._layouts[name]
        self._stats["pulls"] += 1
        self._stats["seconds_waited"] += max(reply[2] for reply in replies)
        return np.concatenate([reply[0] for reply in replies]).reshape(shape)

    def accumulate_gradient(self, name, grad, worker_rank=None):
        """Add ``grad`` to this worker's pending gradient of ``name`` (on its owners).

        ``worker_rank`` pushes for another worker (default: this rank).
        """
        slices = self._gradient_slices(name, grad, "accumulate_gradient")
        replies = self._each_slice(name, "accumulate_gradient", "push",
                                   [(part,) for part in slices], worker=worker_rank)
        # the last worker to push completes a round, slice by slice: with several slices,
        # another worker may complete some of them, and each applies what it completed
        self._state[name].update(pending=True, complete=any(replies))
        self._stats["pushes"] += 1

    def push_pull(self, name, grad, learning_rate):
        """One step of the loop in one message per slice: :meth:`accumulate_gradient`,
        :meth:`apply_gradients` (as the mode allows) and :meth:`get_parameters`, whose
        result it returns (ps-lite's and BytePS's push-pull)."""
        slices = self._gradient_slices(name, grad, "push_pull")
        rate = self._learning_rate(name, learning_rate, "push_pull")
        replies = self._each_slice(name, "push_pull", "push_pull",
                                   [(part, rate) for part in slices])
        self._stats["pushes"] += 1
        self._state[name].update(pending=False, complete=False)
        self._count_applied([reply[3:] for reply in replies])
        return self._assembled(name, [reply[:3] for reply in replies])

    def _gradient_slices(self, name, grad, where):
        """``grad`` checked against ``name``'s shape, cut into its slices (views)."""
        shape, dtype, slices = self._layout(name, where)
        grad = np.asarray(grad)
        if grad.shape != shape:
            raise InvalidArgumentError(
                f"ParameterServer.{where}({name!r}): grad has shape {grad.shape}, "
                f"the parameters {shape}")
        flat = np.ascontiguousarray(grad, dtype=dtype).reshape(-1)
        if not np.isfinite(flat).all():  # before it reaches the parameters of every worker
            raise DivergenceError(f"ParameterServer.{where}({name!r}): the gradient holds NaN "
                                  "or infinity; lower the learning rate or check the loss")
        return [flat[start:stop] for _, start, stop in slices]

    def ready(self, name):
        """Whether an update of ``name`` may be applied now: in ``"sync"`` mode, when this
        worker's last push completed the round (on some slice of a sliced parameter; the
        workers that complete the other slices apply those); otherwise when this worker
        has a pending gradient."""
        self._layout(name, "ready")
        state = self._state[name]
        return state["pending"] and (self.mode != "sync" or state["complete"])

    def apply_gradients(self, name, learning_rate):
        """Apply the pending gradients: ``parameters -= learning_rate * gradient``.

        ``"sync"``: the mean of the round's gradients, once per round (a second
        worker's call for the same round does nothing). Otherwise this worker's
        pending gradient. Returns whether this call applied an update.
        """
        rate = self._learning_rate(name, learning_rate, "apply_gradients")
        replies = self._each_slice(name, "apply_gradients", "apply",
                                   [(rate,)] * len(self._layouts[name][2]))
        self._state[name].update(pending=False, complete=False)
        return self._count_applied(replies)

    def _learning_rate(self, name, learning_rate, where):
        self._layout(name, where)
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, numbers.Real) \
                or not 0 <= learning_rate < math.inf:
            raise InvalidArgumentError(f"ParameterServer.{where}({name!r}): learning_rate="
                                       f"{learning_rate!r} should be a finite number >= 0")
        return float(learning_rate)

    def _count_applied(self, replies):
        """Count an update from the slices' ``(applied, staleness)``; whether one was."""
        applied = any(reply[0] for reply in replies)
        if applied:
            self._stats["applies"] += 1
            self._stats["max_staleness"] = max(self._stats["max_staleness"],
                                               *(reply[1] for reply in replies))
        return applied

    def clear_gradients(self, name):
        """Drop this worker's pending gradient of ``name`` (nothing after an apply)."""
        self._layout(name, "clear_gradients")
        if self._state[name]["pending"]:
            self._each_slice(name, "clear_gradients", "clear")
            self._state[name].update(pending=False, complete=False)

    def synchronize(self):
        """Collective: wait until every rank has called it and every pending update is
        applied; afterwards :meth:`get_parameters` gives the same values on every rank.
        Training may go on after it.

        A rank waiting here does not hold back the others: sync rounds and staleness
        bounds stop counting it until it returns.
        """
        self._check_open("synchronize")
        self._finish_all()
        for name in self._layouts:
            self._each_slice(name, "synchronize", "resume")

    def close(self):
        """Collective: stop training on this rank, wait for every rank, write the trace.

        The server's shards are dropped afterwards; the RPC service stops when
        the last open server closes, unless the program started it with
        :func:`~hpcdist.rpc.init_rpc`. Closing twice does nothing.
        """
        if self._closed:
            return
        if self._loss is not None or self._recovered:
            self._abandon()
            return
        try:
            self._finish_all()
        except RankFailedError:
            self._abandon()
            raise
        if self.trace is not None:
            events = {key: np.asarray(shard.events, dtype=np.int64)
                      for key, shard in self.shards.items()}
            gathered = gather_object(events, root=0, ctx=self.ctx)
            if self.ctx.rank == 0:
                _write_trace(self.trace, self, gathered)
            barrier(ctx=self.ctx)  # the trace exists before any rank goes on
        self._closed = True
        _SERVERS.pop(self._id, None)
        if self._uses_rpc:
            self._uses_rpc = False
            current_agent().remove_loss_listener(self._on_loss)
            _release_rpc()

    def _finish_all(self):
        """Tell every shard this rank stopped, then wait for every rank and every call."""
        for name in self._layouts:
            self._each_slice(name, "close", "finish")
        if self.ctx.size > 1 and is_initialized():
            wait_all()

    def stats(self):
        """This rank's counts: ``pushes``, ``pulls``, ``applies``, ``max_staleness`` (the
        largest number of updates applied between the pull a gradient was computed on and
        its own update, over this worker's updates) and ``seconds_waited`` in pulls."""
        return dict(self._stats)

    def names(self):
        """The names served, in the order they were set."""
        return list(self._layouts)

    # -- routing ----------------------------------------------------------------------------
    def _slices(self, name, size):
        """``[(owner, start, stop)]`` of a parameter of ``size`` elements."""
        ranks = self.ctx.size
        if size >= self.slice_size and ranks > 1:
            counts = balanced_counts(size, ranks)
            return [(rank, int(start), int(start + count))
                    for rank, (start, count) in enumerate(zip(offsets_of(counts), counts))]
        return [(zlib.crc32(name.encode()) % ranks, 0, size)]

    def _layout(self, name, where):
        self._check_open(where)
        layout = self._layouts.get(name)
        if layout is None:
            raise InvalidArgumentError(
                f"ParameterServer.{where}: {name!r} is not served; call set_parameters("
                f"{name!r}, initial_values) on every rank first (served: {list(self._layouts)})")
        return layout

    def _each_slice(self, name, where, operation, arguments=None, worker=None):
        """``operation`` on every slice of ``name``: the remote ones over RPC first, then
        this rank's own; the replies in slice order."""
        _, _, slices = self._layout(name, where)
        worker = self.ctx.rank if worker is None else self._worker(worker, where)
        arguments = arguments or [()] * len(slices)
        futures = {}
        for index, (owner, _, _) in enumerate(slices):
            if owner != self.ctx.rank:
                futures[index] = rpc_async(owner, _serve, args=(
                    self._id, operation, f"{name}#{index}", worker, *arguments[index]))
        replies = [None] * len(slices)
        for index, (owner, _, _) in enumerate(slices):
            if owner == self.ctx.rank:
                shard = self.shards[f"{name}#{index}"]
                replies[index] = getattr(shard, operation)(worker, *arguments[index])
        for index, future in futures.items():
            replies[index] = future.result()
        return replies

    def _worker(self, worker, where):
        if isinstance(worker, bool) or not isinstance(worker, numbers.Integral) or \
                not 0 <= worker < self.ctx.size:
            raise InvalidArgumentError(f"ParameterServer.{where}: worker_rank={worker!r} "
                                       f"should be a rank in 0..{self.ctx.size - 1}")
        return int(worker)

    def _check_open(self, where):
        if self._recovered:
            raise InvalidStateError(
                f"ParameterServer.{where}: ranks were lost (ranks "
                f"{list(self._loss.failed_ranks) if self._loss else '?'} before the recovery), "
                "and the parameter slices they held with them; this server cannot go on: "
                "create a new ParameterServer on the recovered context and set_parameters "
                "from the values the survivors restored")
        if self._closed:
            raise InvalidStateError(f"ParameterServer.{where}: the server is closed")
        loss = self._loss
        if loss is not None:
            raise RankFailedError(f"ParameterServer.{where}: {loss}", loss.failed_ranks)

    # -- lost ranks -------------------------------------------------------------------------
    def _on_loss(self, error):
        """The RPC service met a lost rank: every request of this rank's shards, waiting or
        new, and every call here raise RankFailedError."""
        if self._loss is None:
            self._loss = error
        for shard in list(self.shards.values()):
            shard.abort(error)

    def _after_recovery(self):
        """The context was recovered: this server is left behind (see :meth:`_check_open`)."""
        if self._loss is None:
            self._loss = RankFailedError("a rank was lost", ())
        self._abandon()
        self._recovered = True

    def _abandon(self):
        """Close on this rank alone after a loss: the shards dropped, the RPC service let go
        of without a collective round (the lost ranks cannot take part)."""
        if self._closed:
            return
        self._closed = True
        for shard in list(self.shards.values()):
            shard.abort(self._loss)
        self.shards = {}
        _SERVERS.pop(self._id, None)
        if self._uses_rpc:
            self._uses_rpc = False
            if is_initialized():
                current_agent().remove_loss_listener(self._on_loss)
            _release_rpc(graceful=False)

    def __repr__(self):
        return (f"ParameterServer(mode={self.mode!r}, staleness={self.staleness}, "
                f"names={list(self._layouts)})")


def _acquire_rpc(ctx):
    """Collective on first use: start the RPC service unless it runs already."""
    if _RPC_USE["servers"] == 0 and not is_initialized():
        init_rpc(ctx)
        _RPC_USE["started_here"] = True
    _RPC_USE["servers"] += 1


def _release_rpc(graceful=True):
    """Stop the RPC service if the servers started it and none is left: collectively,
    or on this rank alone (``graceful=False``, after a lost rank)."""
    _RPC_USE["servers"] -= 1
    if _RPC_USE["servers"] == 0 and _RPC_USE["started_here"]:
        _RPC_USE["started_here"] = False
        if is_initialized():
            shutdown(graceful=graceful)


def _write_trace(path, server, gathered):
    """One ``.npz``: every slice's events, and the mode and rank count they belong to."""
    arrays = {key: events for part in gathered for key, events in part.items()}
    arrays["__mode__"] = np.array(server.mode)
    arrays["__ranks__"] = np.array(server.ctx.size)
    temporary = f"{path}.tmp{os.getpid()}"
    with open(temporary, "wb") as stream:
        np.savez(stream, **arrays)
        stream.flush()
        os.fsync(stream.fileno())
    os.replace(temporary, path)


def _load_trace(path, server):
    """The events per slice of a trace written by :func:`_write_trace`, checked."""
    try:
        with np.load(path) as data:
            arrays = {key: data[key] for key in data.files}
    except FileNotFoundError:
        raise InvalidArgumentError(f"ParameterServer: replay={path!r} does not exist; pass "
                                   "the trace= path of the run to repeat") from None
    except (OSError, ValueError) as error:
        raise InvalidArgumentError(f"ParameterServer: replay={path!r} is not a trace "
                                   f"written by ParameterServer(trace=...): {error}") from None
    if "__mode__" not in arrays:
        raise InvalidArgumentError(f"ParameterServer: replay={path!r} is not a trace written "
                                   "by ParameterServer(trace=...)")
    mode, ranks = str(arrays.pop("__mode__")), int(arrays.pop("__ranks__"))
    if (mode, ranks) != (server.mode, server.ctx.size):
        raise InvalidArgumentError(
            f"ParameterServer: replay={path!r} was recorded with mode={mode!r} at {ranks} "
            f"ranks; this run has mode={server.mode!r} at {server.ctx.size}")
    return arrays
