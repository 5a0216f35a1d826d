"""``run(train)``: call ``train(state)`` again after every recovery from a lost rank."""

import functools

from ..comm import get_context
from ..comm.recovery import recover_context, replay_setups, start_run
from ..exceptions import InvalidArgumentTypeError, RankFailedError
from .state import State

__all__ = ["run"]


def _restore(state, ctx):
    """Restore the lowest committed copy on every rank, then (respawn) run the set-ups
    of the objects made before ``run`` again."""
    state.sync(ctx)
    if ctx.fault_tolerance == "respawn":
        replay_setups(ctx)


def _recover(state, ctx):
    """Recover the context (shrink or respawn) and restore the lowest survivor's commit;
    a loss during either starts over with the ranks that remain."""
    while True:
        lost = recover_context(ctx)
        state.ranks_lost.extend(lost)
        try:
            _restore(state, ctx)
            return
        except RankFailedError:
            continue


def _join(state, ctx):
    """In a replacement process: receive the committed state and run the deferred
    set-ups with the other ranks (a loss meanwhile: recover as they do)."""
    state._committed = None  # this process's fresh values are not the job's
    try:
        _restore(state, ctx)
    except RankFailedError:
        _recover(state, ctx)


def run(train):
    """Decorate ``train(state, *args, **kwargs)`` to survive lost ranks.

    The wrapper commits ``state`` on entry when nothing is committed yet, then
    calls ``train``. On :class:`~hpcdist.exceptions.RankFailedError` every
    survivor recovers the default context in place, restores the last
    commit of the lowest surviving rank, runs the state's reset callbacks and
    calls ``train`` again. With fault tolerance ``"shrink"`` the survivors go
    on, renumbered 0..n-1 in their old order (the new rank 0 takes rank 0's
    role). With ``"respawn"`` replacement processes take the lost ranks'
    numbers: each runs the script from its start, and its ``run`` receives
    the committed state instead of committing its own; then every rank runs
    the set-ups of the objects made before ``run`` (in creation order) and
    the callbacks, and enters ``train`` at the same committed step. Without
    fault tolerance it only calls ``train``.

    Returns
    -------
    callable
        ``wrapper(state, *args, **kwargs)`` -> ``train``'s result on every
        rank that ends.
    """
    @functools.wraps(train)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise InvalidArgumentTypeError(f"{getattr(train, '__name__', 'train')}: the first "
                                           f"argument should be a hpcdist.resilient.State, got "
                                           f"{type(state).__name__}")
        ctx = get_context()
        if start_run(ctx):
            _join(state, ctx)
            state.on_reset()
        elif not state.committed:
            state.commit()
        while True:
            try:
                return train(state, *args, **kwargs)
            except RankFailedError:
                if ctx.fault_tolerance is None:
                    raise
                _recover(state, ctx)
                state.on_reset()
    return wrapper
