"""``run(train)``: call ``train(state)`` again after every recovery from a lost rank."""

import functools

from ..comm import get_context
from ..comm.recovery import shrink_context
from ..exceptions import InvalidArgumentTypeError, RankFailedError
from .state import State

__all__ = ["run"]


def _recover(state, ctx):
    """Shrink the context to the survivors and restore the lowest survivor's commit;
    a loss during either starts over with the ranks that remain."""
    while True:
        lost = shrink_context(ctx)
        state.ranks_lost.extend(lost)
        try:
            state.sync(ctx)
            return
        except RankFailedError:
            continue


def run(train):
    """Decorate ``train(state, *args, **kwargs)`` to survive lost ranks.

    The wrapper commits ``state`` on entry when nothing is committed yet, then
    calls ``train``. On :class:`~hpcdist.exceptions.RankFailedError` every
    survivor recovers the default context in place (with fault tolerance
    ``"shrink"``: the survivors go on, renumbered 0..n-1 in their old order;
    the new rank 0 takes rank 0's role), restores the last commit of the
    lowest surviving rank, runs the state's reset callbacks and calls
    ``train`` again. Without fault tolerance it only calls ``train``.

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
        if not state.committed:
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
