"""Contiguous balanced partitions of a data set over ranks, and :func:`shard`.

Rank ``r`` of ``world_size`` owns rows ``start:stop`` of ``total_size``;
partition sizes differ by at most one and the first
``total_size % world_size`` ranks get the larger size (the same rule as the
``counts=None`` default of :func:`hpcdist.scatter`).
"""
import numpy as np

from .._checks import check_int
from .._partition import balanced_counts, offsets_of
from ..comm import resolve_context
from ..comm.agreement import Described, agree_config
from ..comm.checks import mark_raised_on_every_rank
from ..exceptions import InvalidArgumentTypeError
from ._checks import check_rank

__all__ = ["DataPartitioner", "shard"]


class DataPartitioner:
    """Split ``total_size`` items into ``world_size`` contiguous, balanced blocks.

    Parameters
    ----------
    total_size : int
        Number of items (rows) to split, >= 0.
    world_size : int, optional
        Number of blocks, >= 1; default: the size of the default context.

    Attributes
    ----------
    total_size, world_size : int
    sizes : tuple of int, length world_size
        Block sizes; they differ by at most one, the larger ones first.
    offsets : tuple of int, length world_size
        Start of each block.

    Examples
    --------
    >>> p = DataPartitioner(10, 4)
    >>> p.sizes
    (3, 3, 2, 2)
    >>> p.get_partition(2)
    (6, 8)
    >>> p.get_indices(3)
    array([8, 9])
    """

    def __init__(self, total_size, world_size=None):
        self.total_size = check_int(total_size, "total_size", minimum=0, maximum=2**63 - 1)
        if world_size is None:
            world_size = resolve_context().size
        self.world_size = check_int(world_size, "world_size", minimum=1,
                                    hint=" (the number of ranks to split over)")
        counts = balanced_counts(self.total_size, self.world_size)
        self.sizes = tuple(counts)
        self.offsets = tuple(int(o) for o in offsets_of(counts))

    def __repr__(self):
        return f"DataPartitioner(total_size={self.total_size}, world_size={self.world_size})"

    def get_partition(self, rank):
        """The half-open range of ``rank``'s block.

        Parameters
        ----------
        rank : int
            In ``0..world_size - 1``.

        Returns
        -------
        (start, stop) : tuple of int
            ``stop - start == partition_size(rank)``; ``start == stop`` for
            an empty block (``total_size < world_size``).
        """
        rank = check_rank(rank, self.world_size)
        start = self.offsets[rank]
        return start, start + self.sizes[rank]

    def get_indices(self, rank):
        """The indices of ``rank``'s block.

        Returns
        -------
        ndarray of int64, shape (partition_size(rank),)
            ``start, start + 1, ..., stop - 1``.
        """
        start, stop = self.get_partition(rank)
        return np.arange(start, stop, dtype=np.int64)

    def partition_size(self, rank):
        """The number of items in ``rank``'s block (int)."""
        return self.sizes[check_rank(rank, self.world_size)]


def shard(X, ctx=None):
    """This rank's rows of an array that every rank holds in full.

    Parameters
    ----------
    X : array of shape (n_samples, ...)
        The same array on every rank (NumPy, CuPy, or anything sliceable
        along its first axis with a length). Collective: its length is
        compared across ranks (``ConfigMismatchError`` on every rank when
        it differs).
    ctx : Context, optional
        Default: the default context. With one rank, ``X[0:n_samples]``.

    Returns
    -------
    X_local : array of shape (n_local, ...), the type of ``X``
        Rows ``start:stop`` of :meth:`DataPartitioner.get_partition` for
        this rank: a view where ``X`` supports views (copy it to let the
        full array be freed).

    Examples
    --------
    >>> X_local = shard(np.arange(10).reshape(5, 2))   # doctest: +SKIP
    """
    ctx = resolve_context(ctx)
    if (isinstance(X, (str, bytes)) or getattr(X, "ndim", 1) == 0
            or not hasattr(X, "__len__") or not hasattr(X, "__getitem__")):
        mistake = InvalidArgumentTypeError(
            f"shard: X should be an array with at least one dimension, got "
            f"{type(X).__name__} {X!r:.80}")
        n_samples = Described(f"no array ({type(X).__name__})")
    else:
        mistake, n_samples = None, len(X)
    # a length that differs by rank would duplicate or lose rows: one check, on every rank
    agree_config(ctx, "shard", {"len(X)": n_samples},
                 fix="pass the same full array on every rank")
    if mistake is not None:
        raise mark_raised_on_every_rank(mistake)
    start, stop = DataPartitioner(len(X), ctx.size).get_partition(ctx.rank)
    return X[start:stop]
