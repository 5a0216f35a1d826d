"""hpcdist: an MPI-first toolkit for distributed machine learning.

Importing hpcdist does no work: the communication layer (and with it MPI)
loads on first use of one of its names, so ``hpcdist run`` and
``hpcdist --help`` never initialise MPI.

Examples
--------
>>> import hpcdist, numpy as np                # doctest: +SKIP
>>> ctx = hpcdist.init()                       # doctest: +SKIP
>>> hpcdist.allreduce(np.ones(3), op="mean")   # doctest: +SKIP
"""

import importlib

from ._version import __version__
from .exceptions import CollectiveMismatchError, HpcdistError, StallError

_COMM_NAMES = (
    "Context", "init", "finalize", "get_context", "get_rank", "get_world_size",
    "get_local_rank", "is_main_process", "barrier", "ReduceOp", "Request", "ANY_SOURCE",
    "ANY_TAG", "allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
    "reduce_scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce", "ibroadcast",
    "iallgather", "allreduce_object", "broadcast_object", "allgather_object", "gather_object",
    "timeline",
)

#: names re-exported lazily from sub-packages other than hpcdist.comm
_LAZY_NAMES = {"DistributedDataParallel": "hpcdist.parallel", "DDP": "hpcdist.parallel"}

__all__ = ["__version__", "HpcdistError", "CollectiveMismatchError", "StallError",
           *_COMM_NAMES, *_LAZY_NAMES]


def __getattr__(name):
    if name in _COMM_NAMES or name in _LAZY_NAMES:
        value = getattr(importlib.import_module(_LAZY_NAMES.get(name, "hpcdist.comm")), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
