"""hpcdist: an MPI-first toolkit for distributed machine learning.

Importing hpcdist starts no MPI: :mod:`hpcdist.comm.mpi` loads ``mpi4py.MPI``
on first communication (``hpcdist.init()`` or the first collective), so
``hpcdist run`` and ``hpcdist --help`` never initialise MPI, and a user's own
``from mpi4py import MPI`` initialises it exactly as plain mpi4py does.

Examples
--------
>>> import hpcdist, numpy as np                # doctest: +SKIP
>>> ctx = hpcdist.init()                       # doctest: +SKIP
>>> hpcdist.allreduce(np.ones(3), op="mean")   # doctest: +SKIP
"""

from ._version import __version__
from .comm import (
                   ANY_SOURCE,
                   ANY_TAG,
                   Context,
                   ReduceOp,
                   Request,
                   allgather,
                   allgather_object,
                   allreduce,
                   allreduce_object,
                   alltoall,
                   barrier,
                   broadcast,
                   broadcast_object,
                   finalize,
                   gather,
                   gather_object,
                   get_context,
                   get_local_rank,
                   get_rank,
                   get_world_size,
                   iallgather,
                   iallreduce,
                   ibroadcast,
                   init,
                   irecv,
                   is_main_process,
                   isend,
                   recv,
                   reduce,
                   reduce_scatter,
                   scatter,
                   send,
                   timeline,
)
from .exceptions import (
    CollectiveMismatchError,
    ConfigMismatchError,
    DataFileError,
    DataFileNotFoundError,
    HpcdistError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvalidStateError,
    LauncherNotFoundError,
    MissingDatasetError,
    RemoteError,
    StallError,
    StateDictKeyError,
)
from .parallel import DDP, AggregationMethod, DistributedDataParallel, TrainingStrategy

__all__ = [
    "__version__", "HpcdistError", "CollectiveMismatchError", "ConfigMismatchError",
    "InvalidArgumentError", "InvalidArgumentTypeError", "MissingDatasetError", "DataFileError",
    "DataFileNotFoundError", "StallError", "InvalidStateError", "StateDictKeyError",
    "LauncherNotFoundError", "RemoteError",
    "Context", "init", "finalize", "get_context", "get_rank", "get_world_size",
    "get_local_rank", "is_main_process", "barrier", "ReduceOp", "Request", "ANY_SOURCE",
    "ANY_TAG", "allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
    "reduce_scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce", "ibroadcast",
    "iallgather", "allreduce_object", "broadcast_object", "allgather_object", "gather_object",
    "timeline", "DistributedDataParallel", "DDP", "TrainingStrategy", "AggregationMethod",
]
