"""Recovery of a context from a lost rank, in place (ULFM ``Shrink``, ``Spawn``).

The same :class:`~hpcdist.comm.context.Context` object goes on: with
fault tolerance ``"shrink"`` on the survivors, with ``"respawn"`` back at its
size, the lost ranks' numbers taken by replacement processes that run the
same command line and join in :func:`~hpcdist.comm.default.init`. Its
communicators, rank, size and topology are rebuilt, its communication thread
restarted (shrink) or made again by the first set-up that asks for it
(respawn), and the objects bound to it re-bind through their
:meth:`~hpcdist.comm.context.Context.on_recovery` hooks. A loss met during
the recovery starts it over with the ranks that remain.
"""

import os
import sys
import time

import numpy as np

from .._environment import stall_timeout_from_env
from ..exceptions import InvalidStateError
from .agreement import agree_config
from .faults import is_rank_failure, note_loss, revoke
from .mpi import MPI
from .watchdog import running_watchdog, start_watchdog, stop_watchdog

__all__ = ["shrink_context", "respawn_context", "recover_context", "join_job",
           "leave_job", "is_replacement", "start_run", "replay_setups"]

#: seconds between two tests of a pending operation with the replacements
_POLL_SECONDS = 0.001
#: seconds a replacement may take to join (from its start) without a stall timeout set
_JOIN_SECONDS = 300.0
#: where replacements start (the folder the job's processes started in)
_START_FOLDER = os.getcwd()


def _survivors_in(old_group, new_comm):
    """The old ranks of ``new_comm``'s members."""
    new_group = new_comm.Get_group()
    try:
        return MPI.Group.Translate_ranks(new_group, list(range(new_group.Get_size())),
                                         old_group)
    finally:
        new_group.Free()


def _fault_root(ctx):
    root = ctx._fault_root
    if root.fault_tolerance is None:
        raise InvalidStateError("recovery from a lost rank needs fault tolerance on: "
                                "hpcdist.init(fault_tolerance='shrink') or 'respawn'")
    return root


def _restart_watchdog(watchdog, comm):
    """Start the watchdog stopped for the recovery again, on ``comm`` (collective)."""
    if watchdog is None:
        return
    start_watchdog(watchdog.timeout, comm, fault_tolerant=True)
    restarted = running_watchdog()
    for watched_ctx in watchdog.contexts():
        restarted.watch(watched_ctx)


def recover_context(ctx):
    """Recover ``ctx``'s context tree as its fault-tolerance mode says (collective over the
    surviving ranks); returns the lost ranks, numbered as before the loss."""
    if _fault_root(ctx).fault_tolerance == "respawn":
        return respawn_context(ctx)
    return shrink_context(ctx)


def shrink_context(ctx):
    """Rebuild ``ctx``'s context tree on the surviving ranks (collective over them).

    Parameters
    ----------
    ctx : Context
        A context with fault tolerance on (any context of the tree: the one it
        was derived from is recovered, with all its children).

    Returns
    -------
    tuple of int
        The lost ranks, numbered as before the loss; the survivors keep their
        old order, renumbered ``0..n-1``.
    """
    root = _fault_root(ctx)
    old_group = root.comm.Get_group()
    old_size = old_group.Get_size()
    watchdog = stop_watchdog()
    try:
        while True:
            for comm in root._communicators():
                revoke(comm)
            new = root.comm.Shrink()
            try:
                new.Set_errhandler(MPI.ERRORS_RETURN)
                new.Agree(1)  # every survivor has this communicator (or a loss shows here)
                root._rebind_after_loss(new)
                root.comm.Agree(1)  # every survivor rebuilt its contexts
                break
            except MPI.Exception as exc:
                if not is_rank_failure(exc):
                    raise
                # another rank was lost meanwhile: start over with those that remain
                root.comm = new
        survivors = set(_survivors_in(old_group, root.comm))
    finally:
        old_group.Free()
        _restart_watchdog(watchdog, root.comm)
    return tuple(r for r in range(old_size) if r not in survivors)


def _replacement_command():
    """The interpreter and arguments that started this process (its flags and ``-m``
    included), for the replacements."""
    arguments = list(getattr(sys, "orig_argv", [sys.executable, *sys.argv])[1:])
    return sys.executable, arguments


def _spawn(survivors, count):
    """``Spawn`` ``count`` replacements (collective over ``survivors``); every survivor
    learns whether it worked everywhere.

    Returns
    -------
    mpi4py.MPI.Intercomm or None
        None when another rank was lost meanwhile (start over).

    Raises
    ------
    InvalidStateError
        On every survivor, when the MPI library refused to start the processes.
    """
    command, arguments = _replacement_command()
    intercomm, refusal = None, None
    info = MPI.Info.Create()
    try:
        info.Set("wdir", _START_FOLDER)
        intercomm = survivors.Spawn(command, args=arguments, maxprocs=count, info=info, root=0)
        intercomm.Set_errhandler(MPI.ERRORS_RETURN)
    except MPI.Exception as exc:
        if not is_rank_failure(exc):
            refusal = exc
    finally:
        info.Free()
    # bit 0: spawned here; bit 1: no refusal here (Agree gives the AND over the survivors)
    try:
        outcome = survivors.Agree((intercomm is not None) | (refusal is None) << 1)
    except MPI.Exception:
        if intercomm is not None:
            revoke(intercomm)  # its replacements give up
        raise
    if outcome & 1:
        return intercomm
    if intercomm is not None:
        revoke(intercomm)
    if not outcome & 2:
        raise InvalidStateError(
            f"respawn: the MPI library could not start {count} replacement process(es) for "
            f"the lost ranks ({refusal or 'refused on another rank'}); it needs free slots: "
            "launch with `hpcdist run --fault-tolerant respawn` or `mpirun --with-ft ulfm "
            "--oversubscribe`, or use fault_tolerance='shrink'")
    return None


def _completed(request, deadline):
    """Wait for ``request`` (raises the MPI error of a lost process); past ``deadline``
    (a ``time.monotonic()`` value) raise one as for a lost process.

    Nonblocking operations with the replacements report the loss of one of them
    at once, where blocking ones were seen to wait for ever.
    """
    while not request.Test():
        if time.monotonic() > deadline:  # the request ends when its communicator is revoked
            raise _JoinTimeout("a replacement process has not joined in time")
        time.sleep(_POLL_SECONDS)


class _JoinTimeout(Exception):
    """A replacement that has not joined in time: it counts as lost (internal to the
    respawn, never raised to the user)."""


def _is_loss(exc):
    """Whether ``exc``, met during a respawn, means a lost process (start over)."""
    return isinstance(exc, _JoinTimeout) or is_rank_failure(exc)


def _join_deadline():
    timeout = stall_timeout_from_env()
    return time.monotonic() + (timeout if timeout > 0 else _JOIN_SECONDS)


def _handshake(intercomm, root, lost):
    """Collective over the survivors (``root``: ``MPI.ROOT`` on one, else
    ``MPI.PROC_NULL``) and the replacements (``root=0``, ``lost=None``): every
    replacement is there, and learns the ranks the replacements take.

    Returns
    -------
    list of int
        The lost ranks, in the replacements' order.
    """
    deadline = _join_deadline()
    _completed(intercomm.Ibarrier(), deadline)
    count = np.array([len(lost) if lost is not None else 0], dtype=np.int64)
    _completed(intercomm.Ibcast(count, root=root), deadline)
    ranks = np.array(lost if lost is not None else np.zeros(count[0]), dtype=np.int64)
    _completed(intercomm.Ibcast(ranks, root=root), deadline)
    return [int(rank) for rank in ranks]


def _spawn_replacements(survivors, lost, old_rank):
    """Start one replacement per lost rank, tell them the ranks they take, and return
    the communicator of survivors and replacements ordered by rank (collective over
    ``survivors``) with the communicators made on the way, or ``(None, [])`` when
    another rank was lost meanwhile."""
    intercomm = _spawn(survivors, len(lost))
    if intercomm is None:
        return None, []
    made = [intercomm]
    try:
        is_root = survivors.Get_rank() == 0
        _handshake(intercomm, MPI.ROOT if is_root else MPI.PROC_NULL, lost)
        merged = intercomm.Merge(high=False)
        made.append(merged)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        joined = merged.Split(0, old_rank)
        made.append(joined)
        joined.Set_errhandler(MPI.ERRORS_RETURN)
        return joined, made
    except (MPI.Exception, _JoinTimeout):
        for comm in made:
            revoke(comm)  # replacements waiting on them give up
        raise


def respawn_context(ctx):
    """Replace the lost ranks of ``ctx``'s context tree by new processes (collective over
    the surviving ranks), so that the context is back at its size.

    The survivors shrink their communicator, spawn one process per lost rank
    with this process's command line, and merge with them; the replacements
    take the lost ranks' numbers (:func:`join_job`), the survivors keep
    theirs. The context's communicators, topology and private duplicate are
    made again on the joined communicator; its communication thread ends (the
    first set-up that asks for it makes a new one, on every rank at the same
    point); its ``split`` and ``group`` children made before cannot follow.

    Returns
    -------
    tuple of int
        The lost ranks (the replacements' ranks).
    """
    root = _fault_root(ctx)
    old_group = root.comm.Get_group()
    old_size, old_rank = old_group.Get_size(), root.rank
    watchdog = stop_watchdog()
    survivors = root.comm
    try:
        while True:
            for comm in root._communicators():
                revoke(comm)
            revoke(survivors)
            survivors = survivors.Shrink()
            made = []
            try:
                survivors.Set_errhandler(MPI.ERRORS_RETURN)
                survivors.Agree(1)
                kept = set(_survivors_in(old_group, survivors))
                lost = tuple(r for r in range(old_size) if r not in kept)
                joined, made = _spawn_replacements(survivors, lost, old_rank)
                if joined is None:
                    continue  # another rank was lost while spawning: start over
                root._rebind_after_respawn(joined)
                joined.Agree(1)  # every rank, replacements included, joined
                break
            except (MPI.Exception, _JoinTimeout) as exc:
                if not _is_loss(exc):
                    raise
                for comm in made:  # a loss during the respawn: start over
                    revoke(comm)
        _restart_watchdog(watchdog, root.comm)  # (not after a failed respawn: the job ends)
    finally:
        old_group.Free()
    return lost


def is_replacement():
    """Whether this process was started by :func:`respawn_context` to replace a lost rank."""
    return MPI.Comm.Get_parent() != MPI.COMM_NULL


def join_job():
    """In a replacement process: join the job that spawned it (collective with the
    survivors' :func:`respawn_context`).

    Returns
    -------
    mpi4py.MPI.Comm
        The job's communicator, with this process at the rank it replaces.

    A replacement that cannot join (another rank was lost meanwhile: the
    survivors start the respawn over, with new replacements) ends here.
    """
    # a replacement belongs to a job that lost a rank: at exit its MPI_Finalize would wait
    # for ever to disconnect from the survivors, which end without one
    note_loss()
    parent = MPI.Comm.Get_parent()
    parent.Set_errhandler(MPI.ERRORS_RETURN)
    try:
        lost = _handshake(parent, 0, None)
        merged = parent.Merge(high=True)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
        index = merged.Get_rank() - (merged.Get_size() - len(lost))
        joined = merged.Split(0, lost[index])
        joined.Set_errhandler(MPI.ERRORS_RETURN)
        return joined
    except (MPI.Exception, _JoinTimeout) as exc:
        leave_job(exc)


def leave_job(exc):
    """End a replacement that could not join (the survivors start over without it)."""
    print(f"hpcdist: a replacement process could not join the job ({exc}); the survivors "
          "start the recovery over", file=sys.stderr, flush=True)
    os._exit(1)


def start_run(ctx):
    """At the entry of :func:`hpcdist.resilient.run`: stop recording set-ups (the objects
    made from now on are made again when ``train`` is called again); returns whether
    this process is a replacement joining there."""
    root = ctx._fault_root
    joining = root._joining
    root._joining = False
    root._recording_setups = False
    return joining


def replay_setups(ctx):
    """After a respawn, on every rank: run the set-ups of the objects made before
    :func:`hpcdist.resilient.run`, in creation order (a replacement's for the first
    time). The ranks first agree that they made the same objects.

    Raises
    ------
    ConfigMismatchError
        On every rank, when the script made other objects (or other numbers of them)
        on some rank before ``run``.
    """
    root = ctx._fault_root
    setups = list(root._setups)
    agree_config(root, "respawn", {"set-ups made before run": tuple(
        getattr(setup, "__qualname__", type(setup).__name__) for setup in setups)},
        fix="every process must build the same objects before hpcdist.resilient.run, "
            "replacements included (they run the script from its start)")
    for setup in setups:
        setup()
