"""The default context and the one way to get a context: :func:`resolve_context`.

:func:`init` creates the default context (on first use when not called);
:func:`resolve_context` turns any ``ctx=``/``comm=`` argument into a
:class:`~hpcdist.comm.context.Context`. A raw mpi4py communicator gets one
owned context, cached on the communicator itself (an MPI attribute) and freed
with it, so an estimator given ``comm=MPI.COMM_WORLD`` does not create a new
communicator at every call.
"""

import atexit
import contextlib
import gc
import io
import os
import sys
import warnings

from .._checks import check_bool
from .._environment import check_from_env, fault_tolerance_from_env, stall_timeout_from_env
from ..exceptions import InvalidArgumentTypeError
from .abort import install_abort_hook
from .context import Context
from .faults import check_fault_tolerance, leave_runtime_without_finalize, loss_seen
from .mpi import MPI, mpi_is_loaded
from .recovery import is_replacement, join_job, leave_job
from .threads import limit_threads_per_rank
from .watchdog import start_watchdog, stop_watchdog

__all__ = ["init", "finalize", "get_context", "resolve_context", "get_rank", "get_world_size",
           "get_local_rank", "is_main_process", "barrier"]

_DEFAULT = []        # the default context, once created
_OWNED = {}          # id(owned context) -> (communicator, context), for raw communicators
_OWNED_KEYVAL = []   # the MPI attribute key under which a communicator keeps its context
_AT_EXIT = []        # whether finalize is registered to run at exit


def _warn_if_ignored(ctx, comm, device, check, fault_tolerance=None):
    """Warn that a later :func:`init` keeps the default context ``ctx`` as it is,
    naming the arguments that differ from it."""
    ignored = []
    if comm is not None and MPI.Comm.Compare(comm, ctx.comm) not in (MPI.IDENT,
                                                                      MPI.CONGRUENT):
        ignored.append(f"comm={comm!r}")
    if device != "auto" and device != ctx.device:
        ignored.append(f"device={device!r} (the context has {ctx.device!r})")
    if check is not None and check != ctx.check:
        ignored.append(f"check={check} (the context has {ctx.check})")
    if fault_tolerance is not None and fault_tolerance != ctx.fault_tolerance:
        ignored.append(f"fault_tolerance={fault_tolerance!r} (the context has "
                       f"{ctx.fault_tolerance!r})")
    if ignored:
        warnings.warn(f"hpcdist.init: already initialised; {', '.join(ignored)} ignored; call "
                      "hpcdist.finalize() first to start a new default context",
                      UserWarning, stacklevel=3)


def _check_communicator(comm, name):
    if not isinstance(comm, MPI.Comm) or comm == MPI.COMM_NULL:
        raise InvalidArgumentTypeError(
            f"{name} must be an mpi4py communicator such as MPI.COMM_WORLD, "
            f"got {comm!r}")


def init(comm=None, *, device="auto", check=None, abort_on_error=True, fault_tolerance=None):
    """Create the default context (idempotent: later calls return it).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm, optional
        The communicator to work on (default ``MPI.COMM_WORLD``); hpcdist
        uses a duplicate of it.
    device : str, default="auto"
        ``"auto"`` picks ``cuda:<local_rank % n_gpus>`` when CuPy sees a GPU,
        else ``"cpu"``; or ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
    check : bool, optional
        Cross-rank agreement checks before each collective; default from
        the environment variable ``HPCDIST_CHECK`` (off when unset).
    abort_on_error : bool, default=True
        An uncaught exception on any rank aborts the whole job after
        printing its traceback with the rank, instead of hanging the others.
    fault_tolerance : {None, "shrink", "respawn"}, optional
        Survive a lost rank (needs an MPI with ULFM: the Open MPI 5 wheel
        launched with ``mpirun --with-ft ulfm`` or ``hpcdist run
        --fault-tolerant``). A lost rank then raises
        :class:`~hpcdist.exceptions.RankFailedError` on every survivor, and
        :func:`hpcdist.resilient.run` recovers: ``"shrink"`` goes on with the
        survivors, ``"respawn"`` starts replacement processes (this process's
        command line) that take the lost ranks' numbers; in a replacement,
        ``init`` joins the job. Default from the environment variable
        ``HPCDIST_FAULT_TOLERANCE`` (off when unset).

    Returns
    -------
    Context

    Warns
    -----
    UserWarning
        A later call whose ``comm``, ``device`` or ``check`` differ from
        the default context's (they are ignored; :func:`finalize` first).

    Raises
    ------
    InvalidArgumentError
        On every rank: ``fault_tolerance`` asked where the MPI library has no
        ULFM or the job was not launched with it (the message names the
        library and the command to use).
    """
    check = None if check is None else check_bool(check, "init: check")
    abort_on_error = check_bool(abort_on_error, "init: abort_on_error")
    if _DEFAULT:
        _warn_if_ignored(_DEFAULT[0], comm, device, check, fault_tolerance)
        return _DEFAULT[0]
    if comm is None:
        comm = MPI.COMM_WORLD
    _check_communicator(comm, "comm")
    check = check_from_env() if check is None else check
    fault_tolerance = check_fault_tolerance(
        fault_tolerance_from_env() if fault_tolerance is None else fault_tolerance)
    if fault_tolerance is not None:
        # errors as return codes (mpi4py raises them): a lost rank must not end the process
        comm.Set_errhandler(MPI.ERRORS_RETURN)
    timeout = stall_timeout_from_env()
    if fault_tolerance == "respawn" and is_replacement():
        return _join_as_replacement(device, check, abort_on_error, timeout)
    if not _AT_EXIT:  # registered after MPI loaded, so it runs before mpi4py finalizes MPI
        if fault_tolerance is not None:
            atexit.register(_finalize_after_loss)  # runs after finalize
        atexit.register(finalize)
        _AT_EXIT.append(True)
    world_size = MPI.COMM_WORLD.Get_size()
    if timeout > 0 and world_size > 1:
        start_watchdog(timeout, fault_tolerant=fault_tolerance is not None)
    ctx = Context(comm.Dup(), device=device, check=check, fault_tolerance=fault_tolerance)
    limit_threads_per_rank(ctx.local_size)
    if abort_on_error and world_size > 1:
        install_abort_hook()
    _DEFAULT.append(ctx)
    return ctx


def _join_as_replacement(device, check, abort_on_error, timeout):
    """``init`` in a process that replaces a lost rank: join the job (collective with the
    survivors' recovery) and make the default context at the lost rank's number.

    Its objects' set-ups wait until :func:`hpcdist.resilient.run`, where the
    other ranks run theirs again.
    """
    comm = join_job()
    try:
        ctx = Context(comm, device=device, check=check, fault_tolerance="respawn")
        ctx._joining = True
        comm.Agree(1)  # every rank, survivors included, joined
        if timeout > 0 and ctx.size > 1:
            start_watchdog(timeout, comm, fault_tolerant=True)
    except MPI.Exception as exc:
        leave_job(exc)
    if not _AT_EXIT:
        atexit.register(_finalize_after_loss)
        atexit.register(finalize)
        _AT_EXIT.append(True)
    limit_threads_per_rank(ctx.local_size)
    if abort_on_error and ctx.size > 1:
        install_abort_hook()
    _DEFAULT.append(ctx)
    return ctx


def finalize():
    """Release the default context, its children, owned contexts and the watchdog.

    MPI itself stays initialised (mpi4py finalizes it at exit); a later
    :func:`init` creates a new default context.
    """
    if not mpi_is_loaded() or MPI.Is_finalized():
        return
    stop_watchdog()
    if _DEFAULT:
        _DEFAULT.pop().free()
    for comm, _ in list(_OWNED.values()):
        comm.Delete_attr(_OWNED_KEYVAL[0])  # MPI calls _free_owned


def _flush_open_files():
    """Do what the end of the interpreter would do for files still open: flush Python's
    file objects (and so logging's and print's) and close HDF5 files opened by this
    process alone (closing one opened with the MPI-IO driver would be collective)."""
    h5py = sys.modules.get("h5py")  # only when the program used it
    for obj in gc.get_objects():
        with contextlib.suppress(Exception):  # a file that cannot flush keeps what it has
            if isinstance(obj, io.IOBase) and not obj.closed and obj.writable():
                obj.flush()
            elif h5py is not None and isinstance(obj, h5py.File) and obj.id.valid \
                    and obj.driver != "mpio":
                obj.close()


def _finalize_after_loss():
    """At exit, after a lost rank: end the process without MPI_Finalize.

    After a loss, Open MPI's MPI_Finalize can wait for ever on some survivors
    (holding the interpreter lock, so no timer can end it), and does in a
    process that replaced a lost rank and ends before the survivors that
    started it, waiting to disconnect from them (they end without it). Their work is
    done by then, so the process ends here with exit status 0 (this runs last:
    a normal end of the program), after flushing what the end of the
    interpreter would have (standard output and error, open file objects and
    HDF5 files); a replacement also leaves the launcher's runtime. A
    survivor does not: its end without it counts as a loss, which tells a
    peer still waiting on it, even where its revoke has not reached that
    peer yet.
    """
    if not loss_seen() or MPI.Is_finalized():
        return
    _flush_open_files()
    sys.stdout.flush()
    sys.stderr.flush()
    if is_replacement():  # a spawned process: see leave_runtime_without_finalize
        leave_runtime_without_finalize()
    os._exit(0)


def get_context():
    """The default context, created by :func:`init` on first use."""
    return _DEFAULT[0] if _DEFAULT else init()


def resolve_context(ctx=None):
    """The :class:`Context` for a ``ctx=`` or ``comm=`` argument.

    Parameters
    ----------
    ctx : None, Context or mpi4py.MPI.Comm
        None means the default context (created on first use); a Context is
        used as given; a raw communicator gets one context of its own, a
        duplicate of it, created on first use, cached for that communicator
        and freed when the communicator is freed (or at :func:`finalize`).

    Returns
    -------
    Context
    """
    if ctx is None:
        return _DEFAULT[0] if _DEFAULT else init()
    if isinstance(ctx, Context):
        return ctx
    if isinstance(ctx, MPI.Comm):
        return _owned_context(ctx)
    raise InvalidArgumentTypeError(f"ctx={ctx!r} should be None, an hpcdist Context or an mpi4py "
                                   "communicator")


def _owned_context(comm):
    _check_communicator(comm, "comm")
    if not _OWNED_KEYVAL:
        _OWNED_KEYVAL.append(MPI.Comm.Create_keyval(delete_fn=_free_owned))
    keyval = _OWNED_KEYVAL[0]
    ctx = comm.Get_attr(keyval)
    if ctx is None:
        default = get_context()  # the process-wide set-up (watchdog, abort hook) first
        ctx = Context(comm.Dup(), device=default.device, check=default.check,
                      fault_tolerance=default.fault_tolerance)
        comm.Set_attr(keyval, ctx)
        _OWNED[id(ctx)] = (comm, ctx)
    return ctx


def _free_owned(comm, keyval, ctx):
    """MPI calls this when a communicator with an owned context is freed."""
    if _OWNED.pop(id(ctx), None) is not None:
        ctx.free()


def get_rank():
    """This process's rank in the default context."""
    return get_context().rank


def get_world_size():
    """The number of ranks of the default context."""
    return get_context().size


def get_local_rank():
    """This process's index among the ranks on its node."""
    return get_context().local_rank


def is_main_process():
    """Whether this is rank 0 of the default context."""
    return get_context().is_main


def barrier(ctx=None):
    """Wait until every rank has arrived."""
    resolve_context(ctx).barrier()
