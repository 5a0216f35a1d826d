"""Recovery of a context from a lost rank, in place (ULFM ``Shrink``).

The same :class:`~hpcdist.comm.context.Context` object goes on with the
survivors: its communicators, rank, size and topology are rebuilt, its
``split`` children re-split with their colour and key, its communication
thread restarted, and the objects bound to it re-bind through their
:meth:`~hpcdist.comm.context.Context.on_recovery` hooks. A loss met during
the recovery starts it over with the ranks that remain.
"""

from ..exceptions import InvalidStateError
from .faults import is_rank_failure, revoke
from .mpi import MPI
from .watchdog import running_watchdog, start_watchdog, stop_watchdog

__all__ = ["shrink_context"]


def _survivors_in(old_group, new_comm):
    """The old ranks of ``new_comm``'s members."""
    new_group = new_comm.Get_group()
    try:
        return MPI.Group.Translate_ranks(new_group, list(range(new_group.Get_size())),
                                         old_group)
    finally:
        new_group.Free()


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
    root = ctx._fault_root
    if root.fault_tolerance is None:
        raise InvalidStateError("recovery from a lost rank needs fault tolerance on: "
                                "hpcdist.init(fault_tolerance='shrink')")
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
        if watchdog is not None:
            start_watchdog(watchdog.timeout, root.comm, fault_tolerant=True)
            restarted = running_watchdog()
            for watched_ctx in watchdog.contexts():
                restarted.watch(watched_ctx)
    return tuple(r for r in range(old_size) if r not in survivors)
