"""Exceptions raised by hpcdist.

Every error that hpcdist raises on purpose is a public class deriving from
:class:`HpcdistError` and from the built-in exception a user would catch
(``ValueError``, ``TypeError``, ``KeyError``, ``OSError``, ...), so both
``except hpcdist.HpcdistError`` and ``except ValueError`` work.
"""

__all__ = [
    "HpcdistError", "CollectiveMismatchError", "ConfigMismatchError", "InvalidArgumentError",
    "InvalidArgumentTypeError", "MissingDatasetError", "DataFileError", "DataFileNotFoundError",
    "StallError", "InvalidStateError", "StateDictKeyError", "LauncherNotFoundError",
    "RemoteError", "RankFailedError",
]


class HpcdistError(Exception):
    """Base class of hpcdist's own errors."""


class CollectiveMismatchError(HpcdistError, ValueError):
    """Ranks called a collective with different arguments.

    Raised on every rank by the cross-rank agreement check (``check=True``);
    the message lists what each rank passed.
    """


class ConfigMismatchError(HpcdistError, ValueError):
    """Configuration that must agree across ranks differs between them.

    Raised on every rank at the start of a distributed fit, sampler or save;
    the message names the parameter and each rank's value.
    """


class InvalidArgumentError(HpcdistError, ValueError):
    """An argument has a bad value; the message names the value and the fix."""


class InvalidArgumentTypeError(HpcdistError, TypeError):
    """An argument has a bad type; the message names the argument and the type expected."""


class _KeyErrorMessage(KeyError):
    """A KeyError whose str() is its message as written (KeyError's is the repr)."""

    def __str__(self):
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class MissingDatasetError(HpcdistError, _KeyErrorMessage):
    """A dataset is missing from an HDF5 file; the message lists the datasets it has."""


class StateDictKeyError(HpcdistError, _KeyErrorMessage):
    """A state dict lacks keys a module needs, or has keys it does not know."""


class DataFileError(HpcdistError, OSError):
    """A data file cannot be read or written; the message names the file."""


class DataFileNotFoundError(DataFileError, FileNotFoundError):
    """A data file does not exist; the message names the file."""


class StallError(HpcdistError, TimeoutError):
    """A collective did not complete within ``HPCDIST_STALL_TIMEOUT`` seconds."""


class RankFailedError(HpcdistError, ConnectionError):
    """A rank of the job died or stopped answering (fault tolerance on).

    Raised on every surviving rank by the hpcdist call that meets the loss;
    :func:`hpcdist.resilient.run` catches it and recovers.

    Attributes
    ----------
    failed_ranks : tuple of int
        The lost ranks, numbered as before the loss (those known to this rank
        when it raised).
    """

    def __init__(self, message, failed_ranks=()):
        super().__init__(message)
        self.failed_ranks = tuple(failed_ranks)

    def __reduce__(self):
        return (type(self), (str(self), self.failed_ranks))


class InvalidStateError(HpcdistError, RuntimeError):
    """An object was used out of order (e.g. ``backward`` before ``forward``); the
    message says what to do first."""


class LauncherNotFoundError(HpcdistError, FileNotFoundError):
    """No MPI launcher (``mpiexec``, ``srun``) was found; the message says what to install."""


class RemoteError(HpcdistError, RuntimeError):
    """Code running on another rank raised; the original is kept as text.

    The base of :class:`hpcdist.rpc.RpcError` (a remote call's handler) and
    :class:`hpcdist.dask.DaskPhaseError` (a Dask phase's ``func``). Pickles
    with its attributes.

    Attributes
    ----------
    remote_rank : int or None
        The rank where the exception was raised.
    remote_type : str or None
        The original exception's type name, e.g. ``"ValueError"``.
    remote_message : str or None
        The original exception's message.
    remote_traceback : str or None
        The traceback as that rank formatted it.
    """

    def __init__(self, message, *, remote_rank=None, remote_type=None, remote_message=None,
                 remote_traceback=None):
        super().__init__(message)
        self.remote_rank = remote_rank
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback

    def __reduce__(self):
        return (_rebuild_remote_error, (type(self), str(self), self.remote_rank,
                                        self.remote_type, self.remote_message,
                                        self.remote_traceback))


def _rebuild_remote_error(cls, message, remote_rank, remote_type, remote_message,
                          remote_traceback):
    return cls(message, remote_rank=remote_rank, remote_type=remote_type,
               remote_message=remote_message, remote_traceback=remote_traceback)
