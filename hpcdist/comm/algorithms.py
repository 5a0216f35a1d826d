"""Allreduce algorithms built on point-to-point messages.

Each takes the context, the contiguous host input and the result buffer
(which may be the input itself) and leaves the reduction in the result on
every rank. Messages travel as raw bytes on the context's private
communicator; NumPy ufuncs reduce them, so every supported dtype (16-bit
floats included) works the same way.
"""

import numpy as np

from .._partition import balanced_counts, offsets_of
from .calls import spec_of
from .mpi import MPI
from .ops import local_reducer, mpi_op

__all__ = ["ALGORITHMS", "ring_allreduce", "tree_allreduce", "hierarchical_allreduce"]

_TAG = 7001


def _as_bytes(array):
    return array.reshape(-1).view(np.uint8)


def _start_from_input(data, result, op):
    """Copy the input into the result; return its flat view and the local reducer."""
    if result is not data:
        result[...] = data
    return result.reshape(-1), local_reducer(op, data.dtype)


def ring_allreduce(ctx, data, result, op):
    """Bandwidth-optimal ring: a reduce-scatter then an allgather, ``size - 1`` steps each.

    Every rank sends ``2 (size - 1) / size`` of the array in total, whatever
    the number of ranks; blocks differ by at most one element.
    """
    flat, reducer = _start_from_input(data, result, op)
    if flat.size == 0:
        return result
    comm, rank, size = ctx._private_comm, ctx.rank, ctx.size
    counts = balanced_counts(flat.size, size)
    offsets = offsets_of(counts)
    blocks = [flat[offsets[i]:offsets[i] + counts[i]] for i in range(size)]
    incoming = np.empty(max(counts), dtype=flat.dtype)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        send_block, recv_block = blocks[(rank - step) % size], blocks[(rank - step - 1) % size]
        received = incoming[:recv_block.size]
        comm.Sendrecv(_as_bytes(send_block), right, _TAG, _as_bytes(received), left, _TAG)
        reducer(received, recv_block, out=recv_block)
    for step in range(size - 1):
        send_block, recv_block = blocks[(rank - step + 1) % size], blocks[(rank - step) % size]
        comm.Sendrecv(_as_bytes(send_block), right, _TAG, _as_bytes(recv_block), left, _TAG)
    return result


def tree_allreduce(ctx, data, result, op):
    """Recursive doubling: ``log2(size)`` exchanges of the whole array.

    Latency-optimal for small arrays. With a size that is not a power of
    two, the first ``2 * remainder`` ranks pair up first (the even one hands
    its data to the odd one and waits for the result), as in MPICH.
    """
    flat, reducer = _start_from_input(data, result, op)
    if flat.size == 0:
        return result
    comm, rank, size = ctx._private_comm, ctx.rank, ctx.size
    incoming = np.empty_like(flat)
    power = 1 << (size.bit_length() - 1)
    remainder = size - power
    if rank < 2 * remainder:
        if rank % 2 == 0:
            comm.Send(_as_bytes(flat), rank + 1, _TAG)
            comm.Recv(_as_bytes(flat), rank + 1, _TAG)
            return result
        comm.Recv(_as_bytes(incoming), rank - 1, _TAG)
        reducer(incoming, flat, out=flat)
        virtual = rank // 2
    else:
        virtual = rank - remainder
    mask = 1
    while mask < power:
        partner_virtual = virtual ^ mask
        partner = (partner_virtual * 2 + 1 if partner_virtual < remainder
                   else partner_virtual + remainder)
        comm.Sendrecv(_as_bytes(flat), partner, _TAG, _as_bytes(incoming), partner, _TAG)
        reducer(incoming, flat, out=flat)
        mask <<= 1
    if rank < 2 * remainder:
        comm.Send(_as_bytes(flat), rank - 1, _TAG)
    return result


def hierarchical_allreduce(ctx, data, result, op):
    """Reduce inside each node, allreduce among node leaders, broadcast inside each node.

    Only one rank per node talks across nodes, which pays off when the
    network is slower than shared memory.
    """
    topology = ctx._topology
    datatype_op = mpi_op(op, data.dtype)
    is_leader = topology.local_rank == 0
    if topology.local_size > 1:
        send = MPI.IN_PLACE if (is_leader and result is data) else spec_of(data)
        topology.node_comm.Reduce(send, spec_of(result) if is_leader else None, datatype_op,
                                  root=0)
    elif result is not data:
        result[...] = data
    if is_leader and topology.num_nodes > 1:
        topology.leader_comm.Allreduce(MPI.IN_PLACE, spec_of(result), datatype_op)
    if topology.local_size > 1:
        topology.node_comm.Bcast(spec_of(result), root=0)
    return result


ALGORITHMS = {"ring": ring_allreduce, "tree": tree_allreduce,
              "hierarchical": hierarchical_allreduce}
