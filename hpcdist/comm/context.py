"""The communication context: who the ranks are, where they run, and what they did.

A :class:`Context` owns a duplicate of the user's communicator, so hpcdist's
traffic never mixes with the application's. :func:`init` creates the default
context; every collective takes ``ctx=None`` meaning that default.
"""

import atexit
import functools
import os
import time

from mpi4py import MPI

from .abort import install_abort_hook
from .devices import detect_cuda_aware, select_device
from .staging import StagingPool
from .threads import limit_threads_per_rank
from .timeline import _ACTIVE as _ACTIVE_TRACE
from .topology import detect_topology
from .watchdog import Watchdog, stall_timeout_from_env

__all__ = ["Context", "init", "finalize", "get_context", "resolve", "get_rank",
           "get_world_size", "get_local_rank", "is_main_process", "barrier"]

_DEFAULT = []      # the default context, once created
_WATCHDOG = []     # the process's stall watchdog, when running
_perf_counter = time.perf_counter


class _OperationStats:
    """The counters of one operation (a record, cheap to update on every call)."""

    __slots__ = ("calls", "bytes_sent", "bytes_received", "seconds")

    def __init__(self):
        self.calls = self.bytes_sent = self.bytes_received = 0
        self.seconds = 0.0


class Context:
    """A communicator with everything hpcdist knows about its ranks.

    Create the default one with :func:`hpcdist.init`; derive others with
    :meth:`group` and :meth:`split`. Every collective of :mod:`hpcdist` is
    also a method of the context (``ctx.allreduce(x)``).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; the context owns it and frees it in :meth:`free`.
    device : str, default="auto"
        See :func:`hpcdist.init`.
    check : bool, default=False
        Verify before each collective that all ranks agree on its arguments.

    Attributes
    ----------
    comm : mpi4py.MPI.Comm
    rank, size : int
    local_rank, local_size : int
        Index and number of ranks on this node.
    node_rank, num_nodes : int
    is_main : bool
        Whether this is rank 0.
    device : str
        ``"cpu"`` or ``"cuda:N"``.
    xp : module
        numpy, or cupy on a GPU.
    check : bool
        Cross-rank agreement checks on (set the same value on every rank).
    cuda_aware : bool
        Whether device arrays go to MPI directly (else through host staging).
    staging : StagingPool
        The reusable host buffers for device arrays.
    """

    def __init__(self, comm, *, device="auto", check=False):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._topology = detect_topology(comm)
        topology = self._topology
        self.local_rank, self.local_size = topology.local_rank, topology.local_size
        self.node_rank, self.num_nodes = topology.node_rank, topology.num_nodes
        self.is_main = self.rank == 0
        self.device, self.xp = select_device(device, self.local_rank)
        self.check = bool(check)
        self.cuda_aware = detect_cuda_aware()
        self.staging = StagingPool()
        # hpcdist's own traffic (check agreement, headers, explicit algorithms)
        self._private_comm = comm.Dup() if self.size > 1 else comm
        self._packet = None  # reusable buffer for header messages (see movement.py)
        self._packet_view = None
        self._stats = {}
        self._calls = 0
        self._inflight_name = None
        self._inflight_since = 0.0
        self._children = []
        if _WATCHDOG:
            _WATCHDOG[0].watch(self)

    def __repr__(self):
        return (f"<hpcdist.Context rank {self.rank}/{self.size} node {self.node_rank}/"
                f"{self.num_nodes} local {self.local_rank}/{self.local_size} {self.device}>")

    # -- bookkeeping of every collective ---------------------------------------------------
    def _begin(self, name):
        """Mark the start of operation ``name`` (for the watchdog); returns the start time."""
        self._inflight_name = name
        self._inflight_since = start = _perf_counter()
        return start

    def _end(self, name, start, sent, received):
        """Count a finished operation in :meth:`stats` and the timeline."""
        seconds = _perf_counter() - start
        self._inflight_name = None
        self._calls += 1
        record = self._stats.get(name)
        if record is None:
            record = self._stats[name] = _OperationStats()
        record.calls += 1
        record.bytes_sent += sent
        record.bytes_received += received
        record.seconds += seconds
        if _ACTIVE_TRACE:
            _ACTIVE_TRACE[0][0].append((name, start, seconds, sent, received))

    def stats(self):
        """Counters of every operation this context ran.

        Returns
        -------
        dict
            ``{operation: {"calls", "bytes_sent", "bytes_received", "seconds"}}``.
            Bytes are this rank's payload as the operation sees it (for
            ``allreduce``, the array's size in and out).
        """
        return {name: {"calls": record.calls, "bytes_sent": record.bytes_sent,
                       "bytes_received": record.bytes_received, "seconds": record.seconds}
                for name, record in self._stats.items()}

    def reset_stats(self):
        """Set every counter back to zero."""
        self._stats.clear()

    # -- derived contexts ------------------------------------------------------------------
    def _child(self, comm):
        child = Context(comm, device=self.device,
                        check=self.check)
        self._children.append(child)
        return child

    def group(self, ranks):
        """A context of the given ranks (in that order), or None on other ranks.

        Only the members need to call it.

        Parameters
        ----------
        ranks : sequence of int
            Distinct ranks of this context.
        """
        ranks = [int(r) for r in ranks]
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < self.size for r in ranks):
            raise ValueError(f"group(ranks={ranks}): ranks must be distinct and in "
                             f"0..{self.size - 1}, and at least one")
        if self.rank not in ranks:
            return None
        members = self.comm.Get_group().Incl(ranks)
        try:
            comm = self.comm.Create_group(members)
        finally:
            members.Free()
        return self._child(comm)

    def split(self, color, key=0):
        """Partition the ranks by ``color``, ordered by ``key`` then rank (collective).

        Parameters
        ----------
        color : int or None
            Ranks with the same color share a new context; None gives None.
        key : int, default=0
        """
        comm = self.comm.Split(MPI.UNDEFINED if color is None else int(color), int(key))
        if comm == MPI.COMM_NULL:
            return None
        return self._child(comm)

    def barrier(self):
        """Wait until every rank of the context has arrived."""
        if self.size > 1:
            start = self._begin("barrier")
            self.comm.Barrier()
            self._end("barrier", start, 0, 0)

    def free(self):
        """Release the context's communicators and those of its children."""
        for child in self._children:
            child.free()
        self._children.clear()
        self._topology.free()
        for comm in {id(self._private_comm): self._private_comm, id(self.comm): self.comm}.values():
            if comm not in (MPI.COMM_NULL, MPI.COMM_WORLD, MPI.COMM_SELF) and not MPI.Is_finalized():
                comm.Free()
        self.staging.clear()


def bind_collectives(functions):
    """Make each module-level collective also a method of :class:`Context`."""
    for function in functions:
        @functools.wraps(function)
        def method(self, *args, _function=function, **kwargs):
            return _function(*args, ctx=self, **kwargs)
        setattr(Context, function.__name__, method)


def _check_from_env():
    value = os.environ.get("HPCDIST_CHECK", "0").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"HPCDIST_CHECK={value!r} is not understood; use 0 or 1")


def init(comm=None, *, device="auto", check=None, abort_on_error=True):
    """Create the default context (idempotent: later calls return it).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The communicator to work on (default ``MPI.COMM_WORLD``); hpcdist
        uses a duplicate of it.
    device : str, default="auto"
        ``"auto"`` picks ``cuda:<local_rank % n_gpus>`` when CuPy sees a GPU,
        else ``"cpu"``; or ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    check : bool, optional
        Cross-rank agreement checks before each collective; default from
        the environment variable ``HPCDIST_CHECK`` (off when unset).
    abort_on_error : bool, default=True
        An uncaught exception on any rank aborts the whole job after
        printing its traceback with the rank, instead of hanging the others.

    Returns
    -------
    Context
    """
    if _DEFAULT:
        return _DEFAULT[0]
    if comm is None:
        comm = MPI.COMM_WORLD
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise TypeError(f"comm must be an mpi4py communicator such as MPI.COMM_WORLD, got {comm!r}")
    check = _check_from_env() if check is None else bool(check)
    timeout = stall_timeout_from_env()
    if timeout > 0 and MPI.COMM_WORLD.Get_size() > 1:
        _WATCHDOG.append(Watchdog(MPI.COMM_WORLD.Dup(), timeout))
    ctx = Context(comm.Dup(), device=device, check=check)
    limit_threads_per_rank(ctx.local_size)
    if abort_on_error and MPI.COMM_WORLD.Get_size() > 1:
        install_abort_hook()
    _DEFAULT.append(ctx)
    return ctx


def finalize():
    """Release the default context, its children and the watchdog.

    MPI itself stays initialised (mpi4py finalizes it at exit); a later
    :func:`init` creates a new default context.
    """
    if MPI.Is_finalized():
        return
    if _WATCHDOG:
        watchdog = _WATCHDOG.pop()
        watchdog.stop()
        watchdog.comm.Free()
    if _DEFAULT:
        _DEFAULT.pop().free()


atexit.register(finalize)


def get_context():
    """The default context, created by :func:`init` on first use."""
    return _DEFAULT[0] if _DEFAULT else init()


def resolve(ctx):
    """``ctx`` itself, or the default context when it is None."""
    if ctx is not None:
        return ctx
    return _DEFAULT[0] if _DEFAULT else init()


def get_rank():
    """This process's rank in the default context."""
    return get_context().rank


def get_world_size():
    """The number of ranks of the default context."""
    return get_context().size


def get_local_rank():
    """This process's index among the ranks on its node."""
    return get_context().local_rank


def is_main_process():
    """Whether this is rank 0 of the default context."""
    return get_context().is_main


def barrier(ctx=None):
    """Wait until every rank has arrived."""
    resolve(ctx).barrier()
