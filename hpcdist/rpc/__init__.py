"""Remote procedure calls over MPI (torch.distributed.rpc's API shape).

``init_rpc`` starts a service thread on every rank; ``rpc_sync``,
``rpc_async`` and ``remote`` run a function on another rank (a registered
name or a picklable module-level callable), NumPy arrays travelling as raw
MPI buffers. Calls and their arguments are pickled, and the service
unpickles whatever the ranks of its own job send it: like ``torch.distributed.rpc``
it trusts them, so run it only among processes you trust.
"""

from .api import (
    handler_waiting,
    init_rpc,
    is_initialized,
    register_function,
    remote,
    rpc_async,
    rpc_sync,
    shutdown,
    wait_all,
)
from .errors import RpcError, RpcTimeoutError
from .rref import RRef

__all__ = ["init_rpc", "shutdown", "rpc_sync", "rpc_async", "remote", "RRef",
           "register_function", "is_initialized", "wait_all", "handler_waiting", "RpcError",
           "RpcTimeoutError"]
