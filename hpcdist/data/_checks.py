"""Argument checks shared by the data modules (private)."""

from .._checks import check_int
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["check_rank", "check_seed"]


def check_rank(rank, world_size, name="rank", world_name="world_size"):
    """``rank`` as an int in ``0..world_size - 1``."""
    rank = check_int(rank, name)
    if not 0 <= rank < world_size:
        raise InvalidArgumentError(f"{name}={rank} should be in 0..{world_size - 1} "
                                   f"({world_name}={world_size})")
    return rank


def check_seed(seed, name="seed"):
    """A seed that every rank can reproduce: a non-negative int (None is refused)."""
    if seed is None:
        raise InvalidArgumentTypeError(
            f"{name}=None: every rank must draw the same numbers, so give the same "
            f"non-negative int on every rank, e.g. {name}=0")
    return check_int(seed, name, minimum=0)
