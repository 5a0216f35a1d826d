"""The error of :mod:`hpcdist.dask`."""

from ..exceptions import HpcdistError

__all__ = ["DaskPhaseError"]


class DaskPhaseError(HpcdistError, RuntimeError):
    """A Dask phase failed: ``func`` raised on the client rank, or the cluster did not start.

    Raised on every rank of the phase. When ``func`` raised, the message names
    the client rank and the original exception, and the attributes keep it.

    Attributes
    ----------
    rank : int or None
        The rank where the failure happened (the client rank for ``func``).
    exc_type : str or None
        The original exception's qualified type name, e.g. ``"ValueError"``.
    exc_message : str or None
        The original exception's message.
    remote_traceback : str or None
        The original traceback, formatted on the rank that raised it.
    """

    def __init__(self, message, *, rank=None, exc_type=None, exc_message=None,
                 remote_traceback=None):
        super().__init__(message)
        self.rank = rank
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return (_rebuild, (str(self), self.rank, self.exc_type, self.exc_message,
                           self.remote_traceback))


def _rebuild(message, rank, exc_type, exc_message, remote_traceback):
    return DaskPhaseError(message, rank=rank, exc_type=exc_type, exc_message=exc_message,
                          remote_traceback=remote_traceback)
