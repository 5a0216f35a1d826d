"""Balanced contiguous partitions: the arithmetic shared by collectives, data and checkpoints."""

import numpy as np

from ._checks import is_integer
from .exceptions import InvalidArgumentError

__all__ = ["balanced_counts", "validate_counts", "offsets_of"]


def balanced_counts(total, parts):
    """Sizes of ``parts`` contiguous blocks of ``total`` items, differing by at most one.

    The first ``total % parts`` blocks get the larger size.

    Examples
    --------
    >>> balanced_counts(10, 4)
    [3, 3, 2, 2]
    """
    base, extra = divmod(int(total), int(parts))
    return [base + 1 if index < extra else base for index in range(parts)]


def _is_whole_number(value):
    """Whether ``value`` is an integer (Python or NumPy; not a bool) or a float with no
    fractional part."""
    if is_integer(value):
        return True
    return isinstance(value, (float, np.floating)) and float(value).is_integer()


def validate_counts(counts, parts, total, name):
    """Check user-given block sizes; return them as a list of int.

    Parameters
    ----------
    counts : sequence of int
    parts : int
        How many blocks there must be.
    total : int or None
        What they must sum to (None: any total).
    name : str
        The operation, for error messages.

    Raises
    ------
    ValueError
        When there are not ``parts`` non-negative integers summing to ``total``.
    """
    try:
        values = list(counts)
    except TypeError:
        raise InvalidArgumentError(f"{name}: counts={counts!r} should be a sequence of {parts} "
                                   f"non-negative integers (one per rank)") from None
    wrong = [c for c in values if not _is_whole_number(c)]
    if wrong:
        raise InvalidArgumentError(f"{name}: counts={values!r} holds {wrong[0]!r}, not an integer; "
                                   f"pass {parts} non-negative integers (one per rank; counts are "
                                   f"never rounded)")
    counts = [int(c) for c in values]
    if len(counts) != parts or min(counts, default=0) < 0:
        raise InvalidArgumentError(
            f"{name}: counts={counts} should be {parts} non-negative integers "
            f"(one per rank)")
    if total is not None and sum(counts) != total:
        raise InvalidArgumentError(
            f"{name}: counts={counts} should sum to {total}, the length of the "
            f"split axis (they sum to {sum(counts)})")
    return counts


def offsets_of(counts):
    """Start offset of each block (exclusive prefix sum)."""
    offsets = np.zeros(len(counts), dtype=np.int64)
    np.cumsum(counts[:-1], out=offsets[1:])
    return offsets
