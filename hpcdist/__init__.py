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

The communication layer and DDP (Numba, SciPy) load on first use of one of
their names here, so that ``hpcdist run``, ``hpcdist --help`` and each rank
of ``hpcdist run`` start in a tenth of a second; ``import hpcdist.comm``
(or any submodule) loads them as usual, and so does ``hpcdist.comm`` or
``hpcdist.ml.KMeans`` after ``import hpcdist``.
"""

import importlib
import importlib.util

from ._version import __version__
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
    RankFailedError,
    RemoteError,
    StallError,
    StateDictKeyError,
)

#: public name -> the subpackage that defines it, imported on first use (PEP 562)
_LAZY = {name: ".comm" for name in (
    "ANY_SOURCE", "ANY_TAG", "Context", "ReduceOp", "Request", "allgather", "allgather_object",
    "allreduce", "allreduce_object", "alltoall", "barrier", "broadcast", "broadcast_object",
    "finalize", "gather", "gather_object", "get_context", "get_local_rank", "get_rank",
    "get_world_size", "iallgather", "iallreduce", "ibroadcast", "init", "irecv",
    "is_main_process", "isend", "recv", "reduce", "reduce_scatter", "scatter", "send",
    "timeline")}
_LAZY.update({name: ".parallel" for name in (
    "DDP", "AggregationMethod", "DistributedDataParallel", "TrainingStrategy")})


def __getattr__(name):
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module, __name__), name)
    elif not name.startswith("__") and importlib.util.find_spec(f"{__name__}.{name}"):
        value = importlib.import_module(f".{name}", __name__)  # hpcdist.ml.KMeans and such
    else:
        raise AttributeError(f"module 'hpcdist' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "__version__", "HpcdistError", "CollectiveMismatchError", "ConfigMismatchError",
    "InvalidArgumentError", "InvalidArgumentTypeError", "MissingDatasetError", "DataFileError",
    "DataFileNotFoundError", "StallError", "InvalidStateError", "StateDictKeyError",
    "LauncherNotFoundError", "RemoteError", "RankFailedError",
    "Context", "init", "finalize", "get_context", "get_rank", "get_world_size",
    "get_local_rank", "is_main_process", "barrier", "ReduceOp", "Request", "ANY_SOURCE",
    "ANY_TAG", "allreduce", "reduce", "broadcast", "allgather", "gather", "scatter",
    "reduce_scatter", "alltoall", "send", "recv", "isend", "irecv", "iallreduce", "ibroadcast",
    "iallgather", "allreduce_object", "broadcast_object", "allgather_object", "gather_object",
    "timeline", "DistributedDataParallel", "DDP", "TrainingStrategy", "AggregationMethod",
]
