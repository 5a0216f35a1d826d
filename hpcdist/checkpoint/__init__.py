"""Distributed HDF5 checkpoints that survive crashes, reshard, and resume training exactly.

    CheckpointManager(directory, *, max_to_keep=3, backend="auto", async_save=False, ctx=None)
        .save(step, state, *, metadata=None)   collective
        .restore(step=None) -> dict            collective; the newest valid step by default
        .wait()                                collective; finish a background save
        .steps(), .latest_step(), .metadata(step=None)   local
    Sharded(local_array, axis=0)
        Marks a state entry as distributed along ``axis`` (every rank its block).
    CheckpointError, CheckpointCorruptError, CheckpointWarning

A checkpoint written at one world size restores at any other; loading never
unpickles. See :class:`CheckpointManager` for the state it holds, what
restore returns and the layout on disk. Importing this package does not
start MPI.
"""
from .errors import CheckpointCorruptError, CheckpointError, CheckpointWarning
from .manager import CheckpointManager
from .state import Sharded

__all__ = ["CheckpointManager", "Sharded", "CheckpointError", "CheckpointCorruptError",
           "CheckpointWarning"]
