"""The communication layer: contexts and collectives on NumPy and device arrays.

This is hpcdist's one door to MPI; every other layer communicates through
the functions re-exported here (and at the top level of :mod:`hpcdist`).
Importing it starts no MPI: :mod:`hpcdist.comm.mpi` loads ``mpi4py.MPI`` on
first communication.
"""

from . import devices
from .collectives import (
                          allgather,
                          allgather_object,
                          allreduce,
                          allreduce_object,
                          alltoall,
                          broadcast,
                          broadcast_object,
                          gather,
                          gather_object,
                          iallgather,
                          iallreduce,
                          ibroadcast,
                          irecv,
                          isend,
                          neighbor_allgather,
                          recv,
                          reduce,
                          reduce_scatter,
                          scatter,
                          send,
)
from .context import Context
from .default import (
                          barrier,
                          finalize,
                          get_context,
                          get_local_rank,
                          get_rank,
                          get_world_size,
                          init,
                          is_main_process,
                          resolve_context,
)
from .ops import ReduceOp
from .p2p import ANY_SOURCE, ANY_TAG
from .requests import Request
from .timeline import timeline

__all__ = [
    "Context", "init", "finalize", "get_context", "resolve_context", "get_rank",
    "get_world_size", "get_local_rank", "is_main_process", "barrier", "ReduceOp", "Request",
    "ANY_SOURCE", "ANY_TAG", "allreduce", "reduce", "broadcast", "allgather", "gather",
    "scatter", "reduce_scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce",
    "ibroadcast", "iallgather", "allreduce_object", "broadcast_object", "allgather_object",
    "gather_object", "neighbor_allgather", "timeline", "devices",
]
