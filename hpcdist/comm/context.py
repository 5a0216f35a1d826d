"""The communication context: who the ranks are, where they run, and what they did.

A :class:`Context` owns a duplicate of the user's communicator, so hpcdist's
traffic never mixes with the application's. Every collective is a method of
the context (``ctx.allreduce(x)``); the module-level functions of
:mod:`hpcdist.comm.collectives` call the same implementations on the default
context (:mod:`hpcdist.comm.default`).
"""

import time
import weakref

from .._checks import check_int, is_integer
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, InvalidStateError
from . import messages, movement, neighbors, objects, p2p, reductions, requests
from .background import CommunicationThread
from .calls import Call, describe
from .checks import validated_on_every_rank, watched
from .devices import detect_cuda_aware, select_device
from .dtypes import load_datatypes
from .faults import raise_if_rank_failed, revoke
from .mpi import MPI
from .staging import StagingPool
from .threads import reserve_core_for_communication
from .topology import detect_topology
from .trace import RECORDING
from .watchdog import running_watchdog

__all__ = ["Context", "documented_by"]

_perf_counter = time.perf_counter
#: what the peer of a pending call is, by operation (else the root of a collective)
_PEER_ROLES = {"send": "dest", "isend": "dest", "recv": "source", "irecv": "source"}


def documented_by(implementation):
    """Give the decorated function ``implementation``'s docstring (no wrapper)."""
    def decorate(function):
        function.__doc__ = implementation.__doc__
        return function
    return decorate


_STAT_FIELDS = ("calls", "bytes_sent", "bytes_received", "seconds")


class _OperationStats:
    """The counters of one operation (a record, cheap to update on every call)."""

    __slots__ = _STAT_FIELDS

    def __init__(self):
        self.calls = self.bytes_sent = self.bytes_received = 0
        self.seconds = 0.0


class Context:
    """A communicator with everything hpcdist knows about its ranks.

    Create the default one with :func:`hpcdist.init`; derive others with
    :meth:`group` and :meth:`split`. Every collective of :mod:`hpcdist` is
    also a method of the context (``ctx.allreduce(x)``), documented as the
    function of the same name (without its ``ctx`` argument).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        The communicator; the context owns it and frees it in :meth:`free`.
    device : str, default="auto"
        See :func:`hpcdist.init`.
    check : bool, default=False
        Verify before each collective that all ranks agree on its arguments.
    fault_tolerance : {None, "shrink", "respawn"}, default=None
        See :func:`hpcdist.init`; a derived context has its parent's.

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
    fault_tolerance : None or str
        ``"shrink"`` or ``"respawn"`` when a lost rank raises
        :class:`~hpcdist.exceptions.RankFailedError` (ULFM), else None.
    staging : StagingPool
        The reusable host buffers for device arrays.
    """

    def __init__(self, comm, *, device="auto", check=False, fault_tolerance=None, _root=None):
        load_datatypes()
        self.fault_tolerance = fault_tolerance
        # the context whose communicators are revoked together when a rank is lost
        self._fault_root = self if _root is None else _root
        # every split called on this context, in order, as [color, key, child or None] (a
        # rank outside the split takes part too): recovery makes them again
        self._splits = []
        # after a recovery that this context could not follow: why (see _bind)
        self._unusable = None
        # methods of objects bound to this context, called after a recovery
        self._recovery_hooks = []
        # fault tolerance "respawn" (used on the root context): the set-ups of the objects
        # made before hpcdist.resilient.run, in creation order, recorded until run starts;
        # a replacement process defers them (joining: between its init and run)
        self._setups = []
        self._recording_setups = fault_tolerance == "respawn"
        self._joining = False
        self._bind(comm)
        self.device, self.xp = select_device(device, self.local_rank)
        self.check = bool(check)
        self.cuda_aware = detect_cuda_aware()
        self.staging = StagingPool()
        self._stats = {}
        self._calls = 0
        # the pending call, (name, call, peer, start time) or None: one store per mark, so
        # the watchdog's thread reads it whole
        self._inflight = None
        self._children = []
        self._communication_thread = None
        watchdog = running_watchdog()
        if watchdog is not None:
            watchdog.watch(self)

    def _bind(self, comm):
        """Take ``comm`` as this context's communicator: rank, size, topology and the
        private duplicate follow it (at creation, and again after a recovery)."""
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._topology = detect_topology(comm)
        topology = self._topology
        self.local_rank, self.local_size = topology.local_rank, topology.local_size
        self.node_rank, self.num_nodes = topology.node_rank, topology.num_nodes
        self.is_main = self.rank == 0
        # hpcdist's own traffic (check agreement, headers, explicit algorithms)
        self._private_comm = comm.Dup() if self.size > 1 else comm
        self._packet = None  # reusable buffer for header messages (see movement.py)
        self._p2p_packets = None  # reusable buffers of blocking send/recv (see p2p.py)
        self._inflight = None

    def on_recovery(self, method):
        """Call ``method()`` after each recovery of this context from a lost rank.

        Objects bound to the context (DDP, strategies, samplers) re-bind there:
        they drop what they cached of the old ranks. Only a weak reference to
        ``method``'s object is kept.
        """
        try:
            reference = weakref.WeakMethod(method)
        except TypeError:  # a plain function
            reference = (lambda function: lambda: function)(method)
        self._recovery_hooks.append(reference)

    def run_setup(self, setup):
        """Run ``setup()``, the set-up communication of an object bound to this context
        (collective: every rank builds the same objects in the same order).

        Without fault tolerance ``"respawn"`` this only calls ``setup()``. With
        it, the set-ups of objects made before :func:`hpcdist.resilient.run`
        are kept in creation order: after a respawn every rank runs them all
        again (after the state transfer), and a replacement process, which
        builds the same objects between its ``init`` and ``run`` while the
        other ranks are not at that point of the script, runs them only then.
        DDP, ``hpcdist.torch.DistributedOptimizer``, ``DistributedSampler`` and
        ``CheckpointManager`` set up through this method.

        Parameters
        ----------
        setup : callable
            Called without arguments, now or (in a replacement) later; it must
            give the same result when called again (broadcast from rank 0,
            agreement checks).
        """
        root = self._fault_root
        if root._joining:
            root._setups.append(setup)
            return
        setup()
        if root._recording_setups:
            root._setups.append(setup)

    def _run_recovery_hooks(self):
        alive = []
        for reference in self._recovery_hooks:
            method = reference()
            if method is not None:
                alive.append(reference)
                method()
        self._recovery_hooks = alive

    def __copy__(self):
        return self  # a context is a handle on shared communicators: copies share it

    def __deepcopy__(self, memo):
        return self  # so sklearn.base.clone(KMeans(comm=ctx)) keeps the same context

    def __repr__(self):
        return (f"<hpcdist.Context rank {self.rank}/{self.size} node {self.node_rank}/"
                f"{self.num_nodes} local {self.local_rank}/{self.local_size} {self.device}>")

    # -- bookkeeping of every collective ---------------------------------------------------
    def _begin(self, name, call=None, peer=None):
        """Mark the start of operation ``name`` for the stall watchdog; returns the start time.

        ``call`` (the :class:`~hpcdist.comm.calls.Call`) and ``peer`` (the
        root, or the other rank of a send or receive) are kept as they are:
        the watchdog derives the call's signature from them only when it
        reports a stall.
        """
        self._inflight = (name, call, peer, start := _perf_counter())
        return start

    def _inflight_signature(self, inflight=...):
        """The pending call as text, e.g. ``broadcast float32[1024] root=0`` (None when idle).

        ``inflight``: a mark the caller already read (the watchdog), so the
        text describes the same call as its name and start time.
        """
        if inflight is ...:
            inflight = self._inflight
        if inflight is None:
            return None
        name, call, peer, _ = inflight
        parts = [name]
        if isinstance(call, Call):
            parts.append(call.describe())
        elif hasattr(call, "shape") and hasattr(call, "dtype"):
            parts.append(describe(call))  # a receiver's array, before the header told more
        if peer is not None:
            role = _PEER_ROLES.get(name, "root")
            parts.append(f"{role}={peer if 0 <= peer < self.size else 'any'}")
        return " ".join(parts)

    def _end(self, name, start, sent, received):
        """Count a finished operation in :meth:`stats` and the timeline."""
        seconds = _perf_counter() - start
        self._inflight = None
        self._calls += 1
        record = self._stats.get(name)
        if record is None:
            record = self._stats[name] = _OperationStats()
        record.calls += 1
        record.bytes_sent += sent
        record.bytes_received += received
        record.seconds += seconds
        if RECORDING:
            RECORDING[0][0].append((name, start, seconds, sent, received))

    def stats(self):
        """Counters of every operation this context ran (its communication thread's too).

        Returns
        -------
        dict
            ``{operation: {"calls", "bytes_sent", "bytes_received", "seconds"}}``.
            Bytes are this rank's payload as the operation sees it (for
            ``allreduce``, the array's size in and out).
        """
        merged = {}
        for records in self._stats_records():
            for name, record in list(records.items()):  # the thread may add one meanwhile
                total = merged.setdefault(name, dict.fromkeys(_STAT_FIELDS, 0))
                for field in _STAT_FIELDS:
                    total[field] += getattr(record, field)
        return merged

    def reset_stats(self):
        """Set every counter back to zero."""
        for records in self._stats_records():
            records.clear()

    def _stats_records(self):
        thread = self._communication_thread
        return (self._stats,) if thread is None else (self._stats, thread.ctx._stats)

    # -- derived contexts ------------------------------------------------------------------
    def _child(self, comm):
        child = Context(comm, device=self.device, check=self.check,
                        fault_tolerance=self.fault_tolerance, _root=self._fault_root)
        self._children.append(child)
        return child

    def _communicators(self):
        """Every communicator of this context and of its children (the communication
        thread's context is one)."""
        topology = self._topology
        comms = [c for c in (self.comm, self._private_comm, topology.node_comm,
                             topology.leader_comm) if c is not None and c != MPI.COMM_NULL]
        for child in self._children:
            comms.extend(child._communicators())
        return comms

    def _rebind_after_loss(self, comm):
        """Recovery, in place: take ``comm`` (the survivors, from the old communicator's
        shrink), re-split the children with their colour and key, restart the
        communication thread, run the hooks of bound objects. Collective over ``comm``.

        A ``group(ranks)`` child cannot follow (its ranks' numbers changed): its calls
        raise :class:`~hpcdist.exceptions.InvalidStateError` from now on.
        """
        self._bind(comm)
        split_children = set()
        for color, key, child in self._splits:
            new = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
            if child is not None:
                child._rebind_after_loss(new)
                split_children.add(id(child))
        for child in self._children:
            if id(child) not in split_children:
                child._mark_unusable(
                    "this context was made by group() or graph() before ranks were lost, and "
                    "their numbers changed: make it again on the recovered context")
        thread = self._communication_thread
        if thread is not None:
            thread.restart()
        self._run_recovery_hooks()

    def _rebind_after_respawn(self, comm):
        """Recovery, in place, back at the old size: take ``comm`` (survivors and
        replacements, ranked as before the loss), end the communication thread (the
        first set-up that asks for one makes it again, on every rank at the same
        point), run the hooks of bound objects. Collective over ``comm``.

        ``split``, ``group`` and ``graph`` children cannot follow (the replacements
        have none): their calls raise :class:`~hpcdist.exceptions.InvalidStateError`.
        """
        self._bind(comm)
        thread = self._communication_thread
        if thread is not None:
            thread.close()
            self._communication_thread = None
        for child in self._children:
            child._mark_unusable(
                "this context was made by split(), group() or graph() before a lost rank was "
                "replaced, and the replacement has no such context: make it again inside the "
                "function hpcdist.resilient.run calls")
        self._children = []
        self._splits = []
        self._run_recovery_hooks()

    def _mark_unusable(self, reason):
        self._unusable = reason
        for comm in self._communicators():
            revoke(comm)
        for child in self._children:
            child._mark_unusable(reason)

    def group(self, ranks):
        """A context of the given ranks (in that order), or None on other ranks.

        Only the members need to call it.

        Parameters
        ----------
        ranks : sequence of int
            Distinct ranks of this context.
        """
        if isinstance(ranks, (str, bytes)) or not all(map(is_integer, ranks := list(ranks))):
            raise InvalidArgumentTypeError(f"group(ranks={ranks!r}): ranks should be a sequence "
                                           "of int ranks")
        ranks = [int(r) for r in ranks]
        if not ranks or len(set(ranks)) != len(ranks) or not all(0 <= r < self.size for r in ranks):
            raise InvalidArgumentError(f"group(ranks={ranks}): ranks must be distinct and in "
                                       f"0..{self.size - 1}, and at least one")
        if self._fault_root._joining:
            raise InvalidStateError(
                "group: a replacement process cannot make a group before "
                "hpcdist.resilient.run (the other ranks made theirs long ago); with "
                "fault_tolerance='respawn' make it inside the function run calls")
        if self.rank not in ranks:
            return None
        members = self.comm.Get_group().Incl(ranks)
        try:
            with watched(self, "group"):
                return self._child(self.comm.Create_group(members))
        finally:
            members.Free()

    def split(self, color, key=0):
        """Partition the ranks by ``color``, ordered by ``key`` then rank (collective).

        Parameters
        ----------
        color : int or None
            Ranks with the same color share a new context; None gives None.
        key : int, default=0
        """
        if self._fault_root._joining:
            raise InvalidStateError(
                "split: a replacement process cannot split a context before "
                "hpcdist.resilient.run (the other ranks made theirs long ago); with "
                "fault_tolerance='respawn' split inside the function run calls")
        with validated_on_every_rank(self):
            color = None if color is None else check_int(color, "split: color", minimum=0,
                                                         hint=" (or None to take no part)")
            key = check_int(key, "split: key")
        with watched(self, "split"):
            comm = self.comm.Split(MPI.UNDEFINED if color is None else color, key)
            child = None if comm == MPI.COMM_NULL else self._child(comm)
            if self.fault_tolerance is not None:
                self._splits.append((color, key, child))
            return child

    def graph(self, sources, destinations=None):
        """A context of the same ranks with a distributed-graph topology (collective);
        see :func:`hpcdist.comm.neighbors.create_graph`."""
        return neighbors.create_graph(self, sources, destinations)

    def channel(self):
        """A :class:`~hpcdist.comm.messages.MessageChannel` of pickled messages on a
        duplicate of the communicator (collective); the caller frees it."""
        with watched(self, "channel"):
            return messages.open_channel(self)

    def barrier(self):
        """Wait until every rank of the context has arrived."""
        if self.size > 1:
            start = self._begin("barrier")
            try:
                self.comm.Barrier()
            except MPI.Exception as exc:
                raise_if_rank_failed(self, exc, "barrier")
                raise
            self._end("barrier", start, 0, 0)

    def communication_thread(self):
        """This context's :class:`~hpcdist.comm.background.CommunicationThread`, started on
        the first call (collective then: it communicates on a duplicate of the context).

        Starting it gives it one of the rank's cores where hpcdist chose the
        thread counts (:func:`~hpcdist.comm.threads.reserve_core_for_communication`).
        """
        if self._communication_thread is None:
            self._communication_thread = CommunicationThread(self.split(0))
            if self.size > 1:
                reserve_core_for_communication()
        return self._communication_thread

    def free(self):
        """Release the context's communicators and those of its children."""
        if self._communication_thread is not None:
            self._communication_thread.close()
            self._communication_thread = None
        for child in self._children:
            child.free()
        self._children.clear()
        self._topology.free()
        for comm in {id(self._private_comm): self._private_comm, id(self.comm): self.comm}.values():
            predefined = comm in (MPI.COMM_NULL, MPI.COMM_WORLD, MPI.COMM_SELF)
            if not predefined and not MPI.Is_finalized():
                comm.Free()
        self.staging.clear()

    # -- the collectives (see the module-level functions of the same name) ----------------
    @documented_by(reductions.allreduce)
    def allreduce(self, x, op="sum", *, out=None, algorithm="auto"):
        try:
            return reductions.allreduce(x, op, out=out, algorithm=algorithm, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "allreduce")
            raise

    @documented_by(reductions.reduce)
    def reduce(self, x, op="sum", *, root=0):
        try:
            return reductions.reduce(x, op, root=root, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "reduce")
            raise

    @documented_by(reductions.reduce_scatter)
    def reduce_scatter(self, x, op="sum", counts=None):
        try:
            return reductions.reduce_scatter(x, op, counts, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "reduce_scatter")
            raise

    @documented_by(movement.broadcast)
    def broadcast(self, x, root=0, *, shape_known=False):
        try:
            return movement.broadcast(x, root, shape_known=shape_known, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "broadcast")
            raise

    @documented_by(movement.allgather)
    def allgather(self, x, axis=0, *, counts=None):
        try:
            return movement.allgather(x, axis, counts=counts, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "allgather")
            raise

    @documented_by(movement.gather)
    def gather(self, x, root=0, axis=0):
        try:
            return movement.gather(x, root, axis, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "gather")
            raise

    @documented_by(movement.scatter)
    def scatter(self, x, root=0, axis=0, counts=None):
        try:
            return movement.scatter(x, root, axis, counts, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "scatter")
            raise

    @documented_by(movement.alltoall)
    def alltoall(self, x, counts=None):
        try:
            return movement.alltoall(x, counts, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "alltoall")
            raise

    @documented_by(neighbors.neighbor_allgather)
    def neighbor_allgather(self, x):
        try:
            return neighbors.neighbor_allgather(x, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "neighbor_allgather")
            raise

    @documented_by(p2p.send)
    def send(self, x, dest, tag=0, *, shape_known=False):
        try:
            return p2p.send(x, dest, tag, shape_known=shape_known, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "send")
            raise

    @documented_by(p2p.recv)
    def recv(self, source=p2p.ANY_SOURCE, tag=p2p.ANY_TAG, out=None, *, shape_known=False):
        try:
            return p2p.recv(source, tag, out, shape_known=shape_known, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "recv")
            raise

    @documented_by(p2p.isend)
    def isend(self, x, dest, tag=0, *, shape_known=False):
        try:
            return p2p.isend(x, dest, tag, shape_known=shape_known, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "isend")
            raise

    @documented_by(p2p.irecv)
    def irecv(self, source=p2p.ANY_SOURCE, tag=p2p.ANY_TAG, out=None, *, shape_known=False):
        try:
            return p2p.irecv(source, tag, out, shape_known=shape_known, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "irecv")
            raise

    @documented_by(requests.iallreduce)
    def iallreduce(self, x, op="sum", *, out=None):
        try:
            return requests.iallreduce(x, op, out=out, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "iallreduce")
            raise

    @documented_by(requests.ibroadcast)
    def ibroadcast(self, x, root=0):
        try:
            return requests.ibroadcast(x, root, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "ibroadcast")
            raise

    @documented_by(requests.iallgather)
    def iallgather(self, x, axis=0, *, counts=None):
        try:
            return requests.iallgather(x, axis, counts=counts, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "iallgather")
            raise

    @documented_by(objects.allreduce_object)
    def allreduce_object(self, obj, op="sum"):
        try:
            return objects.allreduce_object(obj, op, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "allreduce_object")
            raise

    @documented_by(objects.broadcast_object)
    def broadcast_object(self, obj, root=0):
        try:
            return objects.broadcast_object(obj, root, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "broadcast_object")
            raise

    @documented_by(objects.allgather_object)
    def allgather_object(self, obj):
        try:
            return objects.allgather_object(obj, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "allgather_object")
            raise

    @documented_by(objects.gather_object)
    def gather_object(self, obj, root=0):
        try:
            return objects.gather_object(obj, root, ctx=self)
        except MPI.Exception as exc:
            raise_if_rank_failed(self, exc, "gather_object")
            raise
