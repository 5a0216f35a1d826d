"""Pickled messages on a private communicator, for services above comm (``hpcdist.rpc``).

A :class:`MessageChannel` owns a duplicate of a context's communicator and
sends pickled objects on it as :mod:`mpi4py.util.pkl5` does: pickle protocol
5, large buffers (NumPy arrays) out of band as raw MPI messages, not copied
into the pickle, parts over 2 GiB in one piece (pkl5's large-count
datatypes). Receives are matched probes (``Improbe`` then ``Mrecv`` of the
probed message), one receiving thread at a time, so no thread takes a part
of a message another thread probed; sends from several threads post a
message's parts under one lock.

:func:`pack` and :func:`unpack` pickle a payload into bytes plus its large
buffers, so a service can send the payload inside a message whose envelope
(call ids, kinds) unpickles even when the payload does not.

A channel opened on a context with fault tolerance on turns an MPI error
that reports a lost rank into :class:`~hpcdist.exceptions.RankFailedError`,
after revoking its own communicator and the context's, so that every rank's
next receive on the channel fails too (a service polling ``ANY_SOURCE``
learns of the loss at its next poll).
"""

import pickle
import sys
import threading
import time

import numpy as np

from .faults import is_rank_failure, raise_if_rank_failed, revoke
from .mpi import MPI, load_pkl5

__all__ = ["MessageChannel", "ReceiveBuffers", "open_channel", "pack", "unpack", "thread_level",
           "IN_BAND_BYTES"]

#: buffers smaller than this stay inside the pickle (mpi4py's own threshold)
IN_BAND_BYTES = 256 * 1024
#: received buffers from this size up are kept for reuse, at most this many bytes in all
POOLED_FROM, POOL_BYTES = 1 << 20, 256 << 20
#: a send polls for its completion, sleeping at first this long between tests, at most
#: the longest: a blocking MPI wait spins a core the receiver may need to take the message
SEND_POLL_SLEEP, SEND_POLL_LONGEST_SLEEP = 1e-5, 2e-4
_UNREFERENCED = 3  # getrefcount of a kept buffer nothing else holds: the list, a name, the call
_LEVEL_NAMES = ("THREAD_SINGLE", "THREAD_FUNNELED", "THREAD_SERIALIZED", "THREAD_MULTIPLE")


def pack(obj):
    """Pickle ``obj`` (protocol 5) with its large buffers out of band.

    Returns
    -------
    data : bytes
        The pickle, with buffers under :data:`IN_BAND_BYTES` inside.
    buffers : list of pickle.PickleBuffer
        The larger contiguous buffers (NumPy arrays' memory), not copied.
    """
    buffers = []

    def out_of_band(buffer):
        if buffer.raw().nbytes < IN_BAND_BYTES:
            return True  # in band
        buffers.append(buffer)
        return False

    return pickle.dumps(obj, protocol=5, buffer_callback=out_of_band), buffers


def unpack(data, buffers):
    """The object :func:`pack` gave ``(data, buffers)`` for (arrays over the received
    buffers, no copy)."""
    return pickle.loads(data, buffers=buffers)


def thread_level():
    """The thread support MPI provides: ``(name, multiple)``, e.g.
    ``("THREAD_SERIALIZED", False)``; ``multiple`` is whether threads may call MPI
    at the same time (``MPI_THREAD_MULTIPLE``)."""
    provided = MPI.Query_thread()
    names = {getattr(MPI, name): name for name in _LEVEL_NAMES}
    return names.get(provided, str(provided)), provided >= MPI.THREAD_MULTIPLE


def open_channel(ctx):
    """A :class:`MessageChannel` on a duplicate of ``ctx``'s communicator (collective).

    Returns once every rank has the new communicator (a barrier on it), so
    no message is sent to a rank still creating it.
    """
    comm = ctx.comm.Dup()
    channel = MessageChannel(comm, ctx)
    with channel._lost_rank_errors("opening a message channel"):
        comm.Barrier()
    return channel


class MessageChannel:
    """Pickled point-to-point messages on a communicator of their own.

    Create one with :meth:`hpcdist.comm.Context.channel` (collective: every
    rank of the context). Needs ``MPI_THREAD_MULTIPLE`` when several threads
    use it (see :func:`thread_level`).

    A message whose pickle holds no out-of-band buffer is one MPI message
    (tag ``2 * tag``); one with buffers is pkl5's layout (a header of sizes,
    the pickle, each buffer) on tag ``2 * tag + 1``, whose later parts the
    receiver polls for (they were posted with the header).

    Parameters
    ----------
    comm : mpi4py.MPI.Intracomm
        A communicator the channel owns (a ``Dup``) and frees in :meth:`free`.
    ctx : Context, optional
        The context ``comm`` duplicates: with its fault tolerance on, an
        operation that meets a lost rank raises
        :class:`~hpcdist.exceptions.RankFailedError`.

    Attributes
    ----------
    rank, size : int
    """

    def __init__(self, comm, ctx=None):
        self._pkl5 = load_pkl5()
        self._comm = comm
        self._ctx = ctx
        self._pickle = MPI.Pickle()
        self._send_lock = threading.Lock()
        # a message's later parts are matched by source and tag only: one receiver at a
        # time, or another thread's probe could take them as a message of its own
        self._receive_lock = threading.Lock()
        self._buffers = ReceiveBuffers()
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()

    def isend(self, obj, dest, tag):
        """Post ``obj`` to rank ``dest``; returns a request with ``Test()``.

        Large buffers are sent from ``obj``'s own memory: leave it unchanged
        until the request completes.
        """
        data, buffers = self._pickle.dumps_oob(obj)
        with self._lost_rank_errors("a message to rank {} (on a message channel)", dest):
            if not buffers and len(data) < 1 << 30:
                return MPI.Comm.Isend(self._comm, (data, MPI.BYTE), dest, 2 * tag)
            requests = []
            with self._send_lock, self._pkl5._BigMPI() as big:  # the parts posted in order
                sizes = np.array([len(data)] + [len(buffer) for buffer in buffers],
                                 dtype=np.int64)
                for part in [(sizes, MPI.INT64_T), *map(big, [data, *buffers])]:
                    requests.append(MPI.Comm.Isend(self._comm, part, dest, 2 * tag + 1))
        return _Requests(requests, sizes)

    def send(self, obj, dest, tag):
        """Send ``obj`` to ``dest`` and return when its buffers may be reused.

        Waits by testing with short sleeps in between (see
        :data:`SEND_POLL_SLEEP`), not in a blocking MPI wait, which spins: with
        more ranks than cores, the receiver's services share the cores with
        the senders, and a spinning sender takes the core the receiver needs.
        """
        request = self.isend(obj, dest, tag)
        pause = SEND_POLL_SLEEP
        with self._lost_rank_errors("a message to rank {} (on a message channel)", dest):
            while not request.Test():
                time.sleep(pause)
                pause = min(2 * pause, SEND_POLL_LONGEST_SLEEP)

    def poll(self):
        """Receive one waiting message, if any: ``(obj, source, tag)``, or None at once.

        The message is matched with a matched probe (``Improbe``, then
        ``Mrecv`` of that message), so another thread's receive cannot take it.
        """
        status = MPI.Status()
        with self._receive_lock, self._lost_rank_errors("a message channel's receive from "
                                                        "any rank"):
            message = MPI.Comm.improbe(self._comm, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            if message is None:
                return None
            source, wire_tag = status.Get_source(), status.Get_tag()
            return self._receive(message, status, source, wire_tag), source, wire_tag // 2

    def poll_from(self, source, tag):
        """Receive the waiting message from rank ``source`` on ``tag``, if any: the object,
        or None at once. Other messages stay for other receivers."""
        status = MPI.Status()
        comm = self._comm
        with self._receive_lock, self._lost_rank_errors("a message channel's receive from "
                                                        "rank {}", source):
            for wire_tag in (2 * tag, 2 * tag + 1):
                message = MPI.Comm.improbe(comm, source, wire_tag, status)
                if message is not None:
                    return self._receive(message, status, source, wire_tag)
        return None

    @property
    def max_tag(self):
        """The largest ``tag`` a message on this channel may have."""
        return (self._comm.Get_attr(MPI.TAG_UB) - 1) // 2

    def _receive(self, message, status, source, wire_tag):
        """The object of the matched ``message`` that ``status`` describes."""
        if wire_tag % 2 == 0:
            data = bytearray(status.Get_count(MPI.BYTE))
            message.Recv((data, MPI.BYTE))
            return self._pickle.loads(data)
        return self._receive_parts(message, status, source, wire_tag)

    def _receive_parts(self, first, status, source, tag):
        """The rest of a pkl5 message whose size header ``first`` was probed."""
        pkl5 = self._pkl5
        sizes = np.empty(status.Get_count(MPI.INT64_T), dtype=np.int64)
        first.Recv((sizes, MPI.INT64_T))
        parts = []
        with pkl5._BigMPI() as big:
            for size in sizes:
                # posted with the header, the parts are on their way: a blocking probe
                # (without the GIL) takes each at once, where a sleep between polls
                # cost 2 sleeps a message and doubled a 1 MiB round trip
                message = MPI.Comm.mprobe(self._comm, source, tag)
                part = self._buffers.take(int(size))  # the received arrays are views of it
                message.Recv(big(part))
                parts.append(part)
        return self._pickle.loads_oob(parts[0], parts[1:])

    def allreduce_sum(self, counts):
        """The sum over ranks of ``counts`` (integers), as an int64 array (collective)."""
        local = np.asarray(counts, dtype=np.int64)
        total = np.empty_like(local)
        with self._lost_rank_errors("a message channel's sum over the ranks"):
            self._comm.Allreduce(local, total, op=MPI.SUM)
        return total

    def _lost_rank_errors(self, where, peer=None):
        """A context manager around the channel's MPI calls: an MPI error in its block
        that reports a lost rank, while the channel's context has fault tolerance on,
        becomes RankFailedError (the channel's communicator revoked first); ``where``
        names the operation (``{}`` stands for ``peer``)."""
        return _LostRankErrors(self, where, peer)

    def free(self):
        """Release the communicator (collective; MPI may already be finalized). A
        communicator revoked after a lost rank is released without error."""
        if not MPI.Is_finalized() and self._comm != MPI.COMM_NULL:
            try:
                self._comm.Free()
            except MPI.Exception as exc:
                if not is_rank_failure(exc, self._comm):
                    raise


class _LostRankErrors:
    """See :meth:`MessageChannel._lost_rank_errors`."""

    __slots__ = ("_channel", "_where", "_peer")

    def __init__(self, channel, where, peer):
        self._channel, self._where, self._peer = channel, where, peer

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        channel = self._channel
        ctx = channel._ctx
        if (isinstance(exc, MPI.Exception) and ctx is not None and ctx.fault_tolerance is not None
                and is_rank_failure(exc, channel._comm)):
            revoke(channel._comm)
            raise_if_rank_failed(ctx, exc, self._where.format(self._peer))
        return False


class ReceiveBuffers:
    """Buffers for received message parts, the large ones kept and reused once nothing
    refers to them any more (the arrays unpickled over them are gone).

    A fresh large buffer costs a page fault per page, each page zeroed by the
    kernel, a large part of a large message's round trip; a reused buffer
    costs none. NumPy's allocator asks for transparent huge pages for large
    blocks, where ``MPI.buffer.allocate``'s 4 KiB pages fault many times more
    often.

    Parameters
    ----------
    smallest : int, default=POOLED_FROM
        Buffers below this many bytes are always new.
    limit : int, default=POOL_BYTES
        The most bytes kept. A new buffer that does not fit first lets go of
        the kept buffers nothing refers to (of any size); if it still does not
        fit, it is not kept.
    """

    def __init__(self, smallest=POOLED_FROM, limit=POOL_BYTES):
        self.smallest, self.limit = smallest, limit
        self.kept_bytes = 0
        self._kept = {}  # nbytes -> buffers of that size

    def take(self, nbytes):
        """A uint8 buffer of ``nbytes``: a kept one no longer referenced, or a new one."""
        if nbytes < self.smallest:
            return np.empty(nbytes, dtype=np.uint8)
        for buffer in self._kept.get(nbytes, ()):
            if sys.getrefcount(buffer) == _UNREFERENCED:
                return buffer
        if self.kept_bytes + nbytes > self.limit:
            self._release_unreferenced()
        buffer = np.empty(nbytes, dtype=np.uint8)
        if self.kept_bytes + nbytes <= self.limit:
            self._kept.setdefault(nbytes, []).append(buffer)
            self.kept_bytes += nbytes
        return buffer

    def _release_unreferenced(self):
        """Drop the kept buffers nothing else refers to (sizes no longer received)."""
        for nbytes, kept in list(self._kept.items()):
            held = []
            for buffer in kept:
                if sys.getrefcount(buffer) != _UNREFERENCED:
                    held.append(buffer)
            self.kept_bytes -= nbytes * (len(kept) - len(held))
            if held:
                self._kept[nbytes] = held
            else:
                del self._kept[nbytes]


class _Requests:
    """The requests of one message's parts (``Test()`` tests all); keeps the size header
    alive until then."""

    def __init__(self, requests, header):
        self._requests = requests
        self._header = header

    def Test(self):  # noqa: N802 - as mpi4py's MPI.Request.Test
        """Whether every part has been sent."""
        return MPI.Request.Testall(self._requests)
