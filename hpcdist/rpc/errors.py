"""The errors of :mod:`hpcdist.rpc`."""

from ..exceptions import RemoteError

__all__ = ["RpcError", "RpcTimeoutError"]


class RpcError(RemoteError):
    """A remote call failed: the handler raised, the call could not be made, or
    ``hpcdist.rpc`` is not usable (no ``MPI_THREAD_MULTIPLE``, not initialised).

    For a handler's exception the message names the remote rank, the function,
    the exception's type and message, and ends with the remote traceback; the
    attributes of :class:`~hpcdist.RemoteError` keep them.
    """


class RpcTimeoutError(RpcError, TimeoutError):
    """A remote call's result did not arrive within its ``timeout=``."""
