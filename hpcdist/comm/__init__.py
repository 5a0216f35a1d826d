"""The communication layer: contexts and collectives on NumPy and device arrays.

This is hpcdist's one door to MPI; every other layer communicates through
the functions re-exported here (and at the top level of :mod:`hpcdist`).
"""

from . import devices
from .context import (Context, barrier, bind_collectives, finalize, get_context, get_local_rank,
                      get_rank, get_world_size, init, is_main_process)
from .movement import allgather, alltoall, broadcast, gather, scatter
from .objects import allgather_object, allreduce_object, broadcast_object, gather_object
from .ops import ReduceOp
from .p2p import ANY_SOURCE, ANY_TAG, irecv, isend, recv, send
from .reductions import allreduce, reduce, reduce_scatter
from .requests import Request, iallgather, iallreduce, ibroadcast
from .timeline import timeline

__all__ = [
    "Context", "init", "finalize", "get_context", "get_rank", "get_world_size",
    "get_local_rank", "is_main_process", "barrier", "ReduceOp", "Request", "ANY_SOURCE",
    "ANY_TAG", "allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
    "reduce_scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce", "ibroadcast",
    "iallgather", "allreduce_object", "broadcast_object", "allgather_object", "gather_object",
    "timeline", "devices",
]

bind_collectives([allreduce, reduce, broadcast, allgather, gather, scatter, reduce_scatter,
                  alltoall, send, recv, isend, irecv, iallreduce, ibroadcast, iallgather,
                  allreduce_object, broadcast_object, allgather_object, gather_object])
