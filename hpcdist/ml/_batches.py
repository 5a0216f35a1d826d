"""The global batch of the MLPs and each rank's rows of it.

``batch_size="auto"`` is scikit-learn's ``min(200, n_samples)`` over the rows
of all ranks, and a ``batch_size`` above those rows is clipped to them with a
warning, as scikit-learn does, so default settings fit small data. Each rank
takes a balanced share of the global batch, but never more rows than it
holds: what a short rank (even one without rows) lacks goes to ranks with
rows to spare. Each rank weighs its gradient by its share, so the average over
ranks stays the mean over the global batch.
"""

import warnings

from .._partition import balanced_counts

__all__ = ["AUTO_BATCH_SIZE", "global_batch_size", "batch_shares"]

#: ``batch_size="auto"`` takes at most this many rows a step (scikit-learn's rule)
AUTO_BATCH_SIZE = 200


def global_batch_size(batch_size, n_global, where, stacklevel):
    """The rows of one global step: ``batch_size`` resolved against ``n_global``.

    Parameters
    ----------
    batch_size : int or "auto"
        The estimator's setting (already checked).
    n_global : int
        Rows over all ranks (at least 1).
    where : str
        The estimator's method, for the warning, e.g. ``"MLPClassifier.fit"``.
    stacklevel : int
        Of the warning, counted from here: the user's call.

    Returns
    -------
    int
        ``min(200, n_global)`` for ``"auto"``; else ``batch_size`` clipped to ``n_global``
        (with a ``UserWarning`` when it was above).
    """
    if isinstance(batch_size, str):
        return min(AUTO_BATCH_SIZE, n_global)
    batch_size = int(batch_size)
    if batch_size > n_global:
        warnings.warn(f"{where}: batch_size={batch_size} is larger than the {n_global} "
                      f"sample(s) of all ranks; it is clipped to {n_global}", UserWarning,
                      stacklevel=stacklevel + 1)
        return n_global
    return batch_size


def batch_shares(batch, counts):
    """Each rank's rows of a global batch of ``batch`` rows.

    Parameters
    ----------
    batch : int
        Rows of the global batch, at most ``sum(counts)``.
    counts : list of int
        Rows each rank holds.

    Returns
    -------
    list of int
        The balanced split of ``batch`` where every rank holds enough rows; a rank
        never gets more than it holds, and what it lacks goes to the ranks with rows
        to spare (balanced over them, in rank order).

    Examples
    --------
    >>> batch_shares(8, [10, 10])
    [4, 4]
    >>> batch_shares(8, [1, 0, 20])
    [1, 0, 7]
    """
    shares = [min(share, rows) for share, rows in zip(balanced_counts(batch, len(counts)), counts)]
    missing = batch - sum(shares)
    while missing > 0:
        spare = [rank for rank, (share, rows) in enumerate(zip(shares, counts)) if share < rows]
        for rank, extra in zip(spare, balanced_counts(missing, len(spare))):
            shares[rank] += min(extra, counts[rank] - shares[rank])
        missing = batch - sum(shares)
    return shares
