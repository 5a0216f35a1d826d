"""The public functions of :mod:`hpcdist.rpc` (torch.distributed.rpc's shape, over MPI)."""

import numbers
import threading

from ..comm import resolve_context
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, RankFailedError
from . import agent as _agent
from .rref import create_rref

__all__ = ["init_rpc", "shutdown", "rpc_sync", "rpc_async", "remote", "register_function",
           "is_initialized", "wait_all", "handler_waiting"]

_REGISTRY = {}
_REGISTRY_LOCK = threading.Lock()


def init_rpc(ctx=None):
    """Start this rank's RPC service (collective: every rank of ``ctx`` calls it).

    Each rank gets a service thread that receives calls on a duplicate of the
    context's communicator, so only the job's own ranks can call it, and a
    small pool of handler threads that run them. Needs
    ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it by default; RpcError names
    the level MPI provides otherwise).

    Parameters
    ----------
    ctx : Context or mpi4py.MPI.Comm, optional
        Whose ranks take part (default: the default context); ``to=`` ranks
        are ranks of it.
    """
    _agent.check_not_running()
    ctx = resolve_context(ctx)
    agent = _agent.Agent(ctx, _REGISTRY)
    _agent.install(agent)
    agent.start()


def shutdown(graceful=True):
    """Stop the RPC service on this rank.

    Parameters
    ----------
    graceful : bool, default=True
        Collective: wait until no call is outstanding on any rank (every
        request answered and every answer received, nested calls included),
        then stop every rank's service. False stops this rank's service at
        once; its calls still pending fail with RpcError.

    Raises
    ------
    RankFailedError
        ``graceful=True`` after a rank was lost (fault tolerance on): this
        rank's service is stopped all the same, so ``init_rpc`` may start it again.
    """
    agent = _agent.current_agent()
    try:
        if graceful:
            agent.wait_quiet()
    except RankFailedError:
        _agent.uninstall()
        agent.stop(free=False)
        raise
    _agent.uninstall()
    agent.stop(free=graceful)


def is_initialized():
    """Whether :func:`init_rpc` has started this rank's RPC service (and no shutdown since)."""
    return _agent.running()


def wait_all():
    """Collective: return once every rank has called it and no call is outstanding on any
    rank (nested calls included). The RPC service keeps running."""
    _agent.current_agent().wait_quiet()


def handler_waiting():
    """A context manager around a handler's wait on something other than an RPC result (a
    condition, a lock): the handler pool counts the thread as waiting and starts another
    one for queued calls, so a call that would end the wait still runs. Elsewhere it does
    nothing."""
    return _agent.current_agent().pool.waiting()


def register_function(name, func):
    """Register ``func`` under ``name`` on this rank, so calls may name it.

    ``rpc_sync(to, "name", ...)`` runs the function registered as ``name``
    on rank ``to``: register it on the ranks that serve it (usually on every
    rank, before any call). Registering a name again replaces its function.
    """
    if not isinstance(name, str) or not name:
        raise InvalidArgumentTypeError(f"register_function: name={name!r} should be a "
                                       f"non-empty str")
    if not callable(func):
        raise InvalidArgumentTypeError(f"register_function({name!r}, func): func={func!r} is "
                                       f"not callable")
    with _REGISTRY_LOCK:
        _REGISTRY[name] = func


def _checked(to, func, args, kwargs, timeout, what):
    agent = _agent.current_agent()
    if not isinstance(to, numbers.Integral) or isinstance(to, bool):
        raise InvalidArgumentTypeError(f"{what}: to={to!r} should be a rank (int)")
    if not 0 <= to < agent.size:
        raise InvalidArgumentError(f"{what}: to={to} should be a rank in 0..{agent.size - 1}")
    if not (isinstance(func, str) or callable(func)):
        raise InvalidArgumentTypeError(f"{what}: func={func!r} should be a registered name "
                                       f"(str) or a picklable module-level callable")
    if not isinstance(args, (tuple, list)):
        raise InvalidArgumentTypeError(f"{what}: args={args!r} should be a tuple")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise InvalidArgumentTypeError(f"{what}: kwargs={kwargs!r} should be a dict or None")
    if timeout is not None:
        if not isinstance(timeout, numbers.Real) or isinstance(timeout, bool):
            raise InvalidArgumentTypeError(f"{what}: timeout={timeout!r} should be seconds "
                                           f"(a number) or None")
        if not timeout > 0:
            raise InvalidArgumentError(f"{what}: timeout={timeout!r} should be > 0 (None "
                                       f"waits as long as it takes)")
        timeout = float(timeout)
    return agent, int(to), tuple(args), dict(kwargs or {}), timeout


def rpc_async(to, func, args=(), kwargs=None, *, timeout=None):
    """Call ``func(*args, **kwargs)`` on rank ``to`` without waiting.

    Parameters
    ----------
    to : int
        The rank that runs it (this rank too).
    func : str or callable
        A name given to :func:`register_function` on rank ``to``, or a
        picklable module-level callable (pickled by reference: rank ``to``
        imports it).
    args : tuple, default=()
    kwargs : dict, optional
        NumPy arrays among them travel as raw buffers (not copied into the
        pickle). Large ones are sent from their own memory before this
        function returns, so they may be changed afterwards.
    timeout : float, optional
        Seconds until the future fails with RpcTimeoutError (the call may still
        run on ``to``; its late result is dropped).

    Returns
    -------
    concurrent.futures.Future
        Its result is the function's return value; a handler's exception
        comes as RpcError naming rank ``to``, the type, the message and the
        remote traceback.
    """
    agent, to, args, kwargs, timeout = _checked(to, func, args, kwargs, timeout, "rpc_async")
    return agent.call(to, func, args, kwargs, timeout)


def rpc_sync(to, func, args=(), kwargs=None, *, timeout=None):
    """Call ``func(*args, **kwargs)`` on rank ``to`` and return its result.

    Arguments as :func:`rpc_async`. A handler may itself call ``rpc_sync``
    on any rank (nested and circular chains do not deadlock).

    Raises
    ------
    RpcError
        The remote function raised (its type, message, rank and traceback).
    RpcTimeoutError
        No result within ``timeout`` seconds.
    RankFailedError
        A rank was lost (fault tolerance on): every pending and later call of
        every survivor raises it, until the context is recovered
        (:func:`hpcdist.resilient.run`); then calls go to the survivors' new ranks.
    """
    agent, to, args, kwargs, timeout = _checked(to, func, args, kwargs, timeout, "rpc_sync")
    return agent.call(to, func, args, kwargs, timeout).result()


def remote(to, func, args=(), kwargs=None):
    """Run ``func(*args, **kwargs)`` on rank ``to`` and keep the result there.

    Returns at once an :class:`RRef`: ``rref.to_here()`` copies the value to
    the calling rank, ``rref.owner`` is ``to``. The value is freed on its
    owner when the returned RRef is garbage collected (or at shutdown).
    """
    agent, to, args, kwargs, _ = _checked(to, func, args, kwargs, None, "remote")
    return create_rref(agent, to, func, args, kwargs)
