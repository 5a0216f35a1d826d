"""Exceptions raised by hpcdist.

Every error that hpcdist raises on purpose derives from :class:`HpcdistError`
or is one of Python's standard ``ValueError`` / ``TypeError`` for a bad
argument.
"""

__all__ = ["HpcdistError", "CollectiveMismatchError", "StallError"]


class HpcdistError(Exception):
    """Base class of hpcdist's own errors."""


class CollectiveMismatchError(HpcdistError):
    """Ranks called a collective with different arguments.

    Raised on every rank by the cross-rank agreement check (``check=True``);
    the message lists what each rank passed.
    """


class StallError(HpcdistError):
    """A collective did not complete within ``HPCDIST_STALL_TIMEOUT`` seconds."""
