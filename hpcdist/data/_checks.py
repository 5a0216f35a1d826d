"""Argument checks shared by the data modules (private)."""
import numbers

import numpy as np

__all__ = ["check_int", "check_rank", "check_seed", "resolve_context"]


def check_int(value, name, *, minimum=None, hint=""):
    """``value`` as a Python int, or a ValueError/TypeError naming it.

    Booleans and non-integral numbers (``10.0``, ``"3"``) are refused: a
    size or an index given as a float is almost always a bug upstream.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} should be an int{hint}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}={value} should be >= {minimum}{hint}")
    return value


def check_rank(rank, world_size, name="rank", world_name="world_size"):
    """``rank`` as an int in ``0..world_size - 1``."""
    rank = check_int(rank, name)
    if not 0 <= rank < world_size:
        raise ValueError(f"{name}={rank} should be in 0..{world_size - 1} "
                         f"({world_name}={world_size})")
    return rank


def check_seed(seed, name="seed"):
    """A seed that every rank can reproduce: a non-negative int (None is refused)."""
    if seed is None:
        raise TypeError(f"{name}=None: every rank must draw the same numbers, so give the same "
                        f"non-negative int on every rank, e.g. {name}=0")
    return check_int(seed, name, minimum=0)


def resolve_context(ctx=None):
    """``ctx``, or the default context when None.

    The communication layer (and with it MPI) is imported here, on first
    use, so that ``import hpcdist.data`` does not start MPI.
    """
    from ..comm.context import resolve
    return resolve(ctx)
