"""Mini-batches: index arrays (:func:`iterate_batches`) and array slices (:class:`BatchIterator`).

Both work on this rank's data only and never communicate. In synchronous
data-parallel training every rank must take the same number of steps: give
the ranks equally many samples (a :class:`DistributedSampler`, which pads),
or agree on the step count (with local shards whose sizes differ by one,
the number of batches can differ by one between ranks).
"""
import numpy as np

from .._checks import check_int
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._checks import check_seed
from .sampler import DistributedSampler

__all__ = ["iterate_batches", "BatchIterator"]


def _as_indices(n_or_indices):
    """``arange(n)`` for an int, a sampler's current indices, or a 1-D integer array."""
    if isinstance(n_or_indices, DistributedSampler):
        return n_or_indices.indices()
    if not hasattr(n_or_indices, "__len__") and not isinstance(n_or_indices, np.ndarray):
        n = check_int(n_or_indices, "n_or_indices", minimum=0,
                      hint=" (a number of samples, or a 1-D array of indices)")
        return np.arange(n, dtype=np.int64)
    indices = np.asarray(n_or_indices)
    if indices.ndim != 1 or (indices.size and indices.dtype.kind not in "iu"):
        raise InvalidArgumentError(
            f"n_or_indices should be an int or a 1-D integer array of indices, "
            f"got an array of shape {indices.shape} and dtype {indices.dtype}")
    return indices.astype(np.int64, copy=False)


def _rng(seed):
    """A Generator from an int seed, a Generator itself, or None (fresh entropy)."""
    if seed is None or isinstance(seed, np.random.Generator):
        return np.random.default_rng(seed)
    return np.random.default_rng(check_int(seed, "seed", minimum=0))


def _split(indices, batch_size, drop_last):
    stop = len(indices) - len(indices) % batch_size if drop_last else len(indices)
    for start in range(0, stop, batch_size):
        yield indices[start:start + batch_size]


def _count(n, batch_size, drop_last):
    return n // batch_size if drop_last else -(-n // batch_size)


def iterate_batches(n_or_indices, batch_size, *, shuffle=False, seed=None, drop_last=False):
    """Yield mini-batches of indices.

    Parameters
    ----------
    n_or_indices : int, 1-D integer array, or DistributedSampler
        ``n`` means the indices ``0..n-1`` (this rank's rows); an array is
        split as given (e.g. ``DataPartitioner.get_indices(rank)``); a
        sampler gives its indices for its current epoch.
    batch_size : int
        Samples per batch, >= 1. The last batch is smaller when the count
        does not divide evenly (unless ``drop_last``).
    shuffle : bool, default=False
        Permute the indices before splitting them.
    seed : int, numpy.random.Generator or None, default=None
        The permutation's seed (None: fresh entropy, different per call and
        per rank).
    drop_last : bool, default=False
        Leave out the last, incomplete batch.

    Yields
    ------
    batch : ndarray of int64, shape (batch_size,) or smaller for the last one

    Examples
    --------
    >>> [b.tolist() for b in iterate_batches(5, 2)]
    [[0, 1], [2, 3], [4]]
    >>> [b.tolist() for b in iterate_batches(5, 2, drop_last=True)]
    [[0, 1], [2, 3]]
    """
    indices = _as_indices(n_or_indices)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if shuffle:
        indices = _rng(seed).permutation(indices)
    return _split(indices, batch_size, bool(drop_last))


class BatchIterator:
    """Re-iterable mini-batches of one or more arrays, like a minimal DataLoader.

    Each ``for`` loop over it is one epoch and yields tuples
    ``(X[batch], y[batch], ...)`` (one entry per array given). With
    ``shuffle=True`` the order of epoch ``e`` comes from
    ``np.random.default_rng((seed, e))``, so a run is reproducible and can
    resume at any epoch with :meth:`set_epoch`; the epoch counter advances
    by one at the start of every loop.

    Parameters
    ----------
    *arrays : arrays of shape (n_samples, ...)
        Indexable along the first axis with an integer array (NumPy, CuPy),
        all of the same length.
    batch_size : int
        Samples per batch, >= 1.
    shuffle : bool, default=False
    seed : int or None, default=None
        Non-negative int; None draws one at construction (reproducible
        within this object only, different per rank).
    drop_last : bool, default=False
        Leave out the last, incomplete batch.
    sampler : DistributedSampler, optional
        Take the epoch's indices from the sampler (its ``set_epoch`` is
        called with this iterator's epoch) instead of ``0..n_samples-1``;
        then ``shuffle`` must be False (the sampler shuffles). Use it when
        every rank holds the full arrays.

    Attributes
    ----------
    epoch : int
        The epoch the next loop runs.

    Examples
    --------
    >>> X, y = np.arange(10.0).reshape(5, 2), np.arange(5)
    >>> [yb.tolist() for _, yb in BatchIterator(X, y, batch_size=2)]
    [[0, 1], [2, 3], [4]]
    >>> loader = BatchIterator(X, y, batch_size=2, shuffle=True, seed=0)
    >>> len(loader)
    3
    """

    def __init__(self, *arrays, batch_size, shuffle=False, seed=None, drop_last=False,
                 sampler=None):
        if not arrays:
            raise InvalidArgumentTypeError("BatchIterator needs at least one array, e.g. "
                                           "BatchIterator(X, y, batch_size=32)")
        lengths = [len(a) for a in arrays]
        if len(set(lengths)) != 1:
            raise InvalidArgumentError(
                f"BatchIterator: the arrays should have the same number of rows, "
                f"got lengths {lengths}")
        self.arrays = arrays
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        if sampler is not None:
            if not isinstance(sampler, DistributedSampler):
                raise InvalidArgumentTypeError(f"sampler should be a DistributedSampler, got "
                                               f"{type(sampler).__name__}")
            if self.shuffle:
                raise InvalidArgumentError(
                    "BatchIterator: shuffle=True with a sampler; the sampler "
                    "decides the order, so pass shuffle=False")
            if sampler.dataset_size != lengths[0]:
                raise InvalidArgumentError(
                    f"BatchIterator: sampler.dataset_size={sampler.dataset_size} "
                    f"should equal the arrays' length {lengths[0]}")
        self.sampler = sampler
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self.seed = check_seed(seed)
        self.epoch = 0

    def set_epoch(self, epoch):
        """Make the next loop run epoch ``epoch`` (>= 0)."""
        self.epoch = check_int(epoch, "epoch", minimum=0)

    def _indices(self, epoch):
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)
            return self.sampler.indices()
        n = len(self.arrays[0])
        if self.shuffle:
            return np.random.default_rng((self.seed, epoch)).permutation(n)
        return np.arange(n, dtype=np.int64)

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        indices = self._indices(epoch)
        for batch in _split(indices, self.batch_size, self.drop_last):
            yield tuple(a[batch] for a in self.arrays)

    def __len__(self):
        n = len(self.sampler) if self.sampler is not None else len(self.arrays[0])
        return _count(n, self.batch_size, self.drop_last)
