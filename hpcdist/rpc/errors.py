"""The errors of :mod:`hpcdist.rpc`."""

from ..exceptions import HpcdistError

__all__ = ["RpcError", "RpcTimeoutError"]


class RpcError(HpcdistError, RuntimeError):
    """A remote call failed: the handler raised, the call could not be made, or
    ``hpcdist.rpc`` is not usable (no ``MPI_THREAD_MULTIPLE``, not initialised).

    For a handler's exception the message names the remote rank, the function,
    the exception's type and message, and ends with the remote traceback; the
    same are attributes.

    Attributes
    ----------
    remote_rank : int or None
        The rank whose handler raised.
    remote_type : str or None
        The qualified name of the remote exception's type (``"builtins.ValueError"``).
    remote_message : str or None
    remote_traceback : str or None
        The traceback as the remote rank formatted it.
    """

    def __init__(self, message, *, remote_rank=None, remote_type=None, remote_message=None,
                 remote_traceback=None):
        super().__init__(message)
        self.remote_rank = remote_rank
        self.remote_type = remote_type
        self.remote_message = remote_message
        self.remote_traceback = remote_traceback


class RpcTimeoutError(RpcError, TimeoutError):
    """A remote call's result did not arrive within its ``timeout=``."""
