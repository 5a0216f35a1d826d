"""Errors and warnings of :mod:`hpcdist.checkpoint`."""

from ..exceptions import HpcdistError

__all__ = ["CheckpointError", "CheckpointCorruptError", "CheckpointWarning"]


class CheckpointError(HpcdistError):
    """A checkpoint could not be saved or restored (nothing was committed or loaded).

    Raised on every rank: a failure on one rank (a full disk, an exception
    while writing) becomes this error on all ranks, naming the failing ranks.
    """


class CheckpointCorruptError(CheckpointError):
    """A committed checkpoint failed verification and no valid one was left to use.

    The message names each unusable step and why (a missing, truncated or
    corrupted file, a bad manifest).
    """


class CheckpointWarning(UserWarning):
    """A committed step was skipped during restore (it failed verification)."""
