"""The error of :mod:`hpcdist.dask`."""

from ..exceptions import RemoteError

__all__ = ["DaskPhaseError"]


class DaskPhaseError(RemoteError):
    """A Dask phase failed: ``func`` raised on the client rank, or the cluster did not start.

    Raised on every rank of the phase. When ``func`` raised, the message names
    the client rank and the original exception, and the attributes of
    :class:`~hpcdist.RemoteError` keep it (``remote_rank`` is the client rank).
    """
