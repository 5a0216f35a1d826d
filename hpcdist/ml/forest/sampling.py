"""Randomness that does not depend on the number of ranks: seeds, row samples, bootstraps.

Every random choice of the forest is a counter-based hash (see
:mod:`._hash_kernels`) of the forest's seed and of *global* names:
the tree index, the global row index (``offset of this rank's rows + local
index``, the offset being the exclusive prefix sum of the ranks' row counts)
and the node key (a hash of the path from the root). Nothing depends on
which rank holds a row or in what order rows are visited, so the same data
split over any number of ranks gives the same forest.

Bootstrap
    Row ``g`` appears ``w ~ Poisson(1)`` times in tree ``t``'s bootstrap,
    ``w`` drawn by inverting a 53-bit uniform hashed from ``(seed, t, g)``
    (independent per row, unlike scikit-learn's multinomial draw of exactly
    ``n`` rows; the expected in-bag fraction is the same ``1 - 1/e``).
"""
import numpy as np

from ._hash_kernels import bootstrap_weights, hash_below

__all__ = ["global_row_index", "row_sample", "bootstrap", "in_bag_rows", "assign_owners"]

_SAMPLE_STREAM = np.uint64(0x73616D706C65726F)


def global_row_index(counts, rank):
    """Global indices of this rank's rows: ``sum(counts[:rank]) + arange(counts[rank])``."""
    start = int(sum(counts[:rank]))
    return np.arange(start, start + int(counts[rank]), dtype=np.int64)


def row_sample(seed, global_index, n_global, sample_size):
    """Mask of this rank's rows in a sample of about ``sample_size`` of the ``n_global`` rows.

    A row is in when the hash of its global index falls below
    ``sample_size / n_global`` of the hash range: the same rows whatever the
    number of ranks. All rows when ``n_global <= sample_size``.
    """
    mask = np.empty(len(global_index), dtype=np.bool_)
    if n_global <= sample_size:
        mask[:] = True
        return mask
    threshold = np.uint64(int(sample_size / n_global * 2.0 ** 64))
    hash_below(np.uint64(seed) ^ _SAMPLE_STREAM, global_index, threshold, mask)
    return mask


def bootstrap(seed, trees, global_index, enabled):
    """Bootstrap weights of this rank's rows in ``trees``: uint8 array (n_trees, n_local).

    All ones when ``enabled`` is false.
    """
    trees = np.asarray(trees, dtype=np.int64)
    if not enabled:
        return np.ones((len(trees), len(global_index)), dtype=np.uint8)
    out = np.empty((len(trees), len(global_index)), dtype=np.uint8)
    bootstrap_weights(np.uint64(seed), trees, global_index, out)
    return out


def in_bag_rows(weights):
    """Every tree's rows of nonzero bootstrap weight, one tree after another.

    Parameters
    ----------
    weights : ndarray of uint8, shape (n_trees, n_rows)

    Returns
    -------
    rows : ndarray of int64
    counts : ndarray of int64, shape (n_trees,)
        Rows of each tree.
    """
    counts = np.count_nonzero(weights, axis=1).astype(np.int64)
    rows = np.empty(int(counts.sum()), dtype=np.int64)
    at = 0
    for tree, count in enumerate(counts):  # one tree's temporary at a time
        rows[at:at + count] = np.flatnonzero(weights[tree])
        at += count
    return rows, counts


def assign_owners(weights, size):
    """Rank that grows each subtree: the heaviest first, each to the least loaded rank.

    Parameters
    ----------
    weights : sequence of int
        Global (bootstrap-weighted) rows of each subtree.
    size : int
        Number of ranks.

    Returns
    -------
    ndarray of int64, shape (len(weights),)
        The same on every rank (ties go to the lower index and rank).
    """
    weights = np.asarray(weights, dtype=np.int64)
    owners = np.zeros(len(weights), dtype=np.int64)
    if size == 1:
        return owners
    loads = np.zeros(size, dtype=np.int64)
    for task in np.lexsort((np.arange(len(weights)), -weights)):
        rank = int(np.argmin(loads))
        owners[task] = rank
        loads[rank] += weights[task]
    return owners
