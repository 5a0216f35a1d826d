"""Label-skewed (non-IID) splits of a data set, for federated training."""

import math

import numpy as np

from .._checks import check_int
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._checks import check_seed

__all__ = ["dirichlet_partition"]

_MAX_DRAWS = 100  # draws tried before giving up on a split that leaves no part empty


def dirichlet_partition(y, n_parts, alpha, *, seed=0):
    """Split rows by label so that each part sees its own mix of classes.

    For every class, the proportions of its rows that go to each part are
    drawn from a symmetric Dirichlet(``alpha``) distribution (Hsu et al.
    2019): a small ``alpha`` gives each part few classes, a large one an
    almost uniform mix. Every row lands in exactly one part. The split is
    drawn again (at most 100 times) while a part is left empty.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        The labels (any type NumPy can sort).
    n_parts : int
        Number of parts (>= 1, at most ``n_samples``).
    alpha : float
        Concentration (> 0).
    seed : int, default=0
        The same seed gives the same split on every rank.

    Returns
    -------
    list of ndarray of int64
        ``n_parts`` sorted index arrays into ``y``.

    Examples
    --------
    >>> parts = dirichlet_partition([0, 0, 1, 1, 2, 2], 2, alpha=0.5)
    >>> sorted(np.concatenate(parts).tolist())
    [0, 1, 2, 3, 4, 5]
    """
    labels = np.asarray(y)
    if labels.ndim != 1 or not len(labels):
        raise InvalidArgumentError(f"dirichlet_partition: y should be 1-D labels, one per row "
                                   f"and at least one, got shape {labels.shape}")
    if labels.dtype.kind == "f" and not np.array_equal(labels, np.round(labels)):
        raise InvalidArgumentError("dirichlet_partition: y holds non-integral or NaN values; "
                                   "pass class labels (integers or strings)")
    n_parts = check_int(n_parts, "n_parts", minimum=1)
    if n_parts > len(labels):
        raise InvalidArgumentError(f"dirichlet_partition: n_parts={n_parts} is more than the "
                                   f"{len(labels)} rows of y; use n_parts <= {len(labels)}")
    if isinstance(alpha, (bool, np.bool_)) or not isinstance(alpha, (int, float, np.number)):
        raise InvalidArgumentTypeError(f"dirichlet_partition: alpha={alpha!r} should be a "
                                       f"positive number")
    if not (math.isfinite(alpha) and alpha > 0):
        raise InvalidArgumentError(f"dirichlet_partition: alpha={alpha!r} should be a finite "
                                   f"number > 0 (e.g. 0.5 for a strong skew, 100 for almost IID)")
    rng = np.random.default_rng(check_seed(seed))
    _, label_codes = np.unique(labels, return_inverse=True)
    by_class = [np.flatnonzero(label_codes == code) for code in range(label_codes.max() + 1)]
    for _ in range(_MAX_DRAWS):
        parts = _draw(by_class, n_parts, float(alpha), rng)
        if all(len(part) for part in parts):
            return parts
    raise InvalidArgumentError(
        f"dirichlet_partition: alpha={alpha!r} left a part empty in {_MAX_DRAWS} draws of "
        f"{len(labels)} rows into n_parts={n_parts}; use a larger alpha or fewer parts")


def _draw(by_class, n_parts, alpha, rng):
    """One Dirichlet split: each class's shuffled rows cut by drawn proportions."""
    pieces = [[] for _ in range(n_parts)]
    for rows in by_class:
        proportions = rng.dirichlet(np.full(n_parts, alpha))
        cuts = np.round(np.cumsum(proportions)[:-1] * len(rows)).astype(np.int64)
        for part, piece in zip(pieces, np.split(rng.permutation(rows), cuts)):
            part.append(piece)
    return [np.sort(np.concatenate(part)).astype(np.int64) for part in pieces]
