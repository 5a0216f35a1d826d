"""Kernels of level-wise growth over ranks: histograms, split search, row partitioning.

Every rank histograms its own rows of all open nodes (:func:`build_histograms`),
the drivers sum the histograms over ranks (:mod:`hpcdist.ml.forest.histograms`),
every rank finds the same splits in the same global histograms
(:func:`evaluate_nodes`) and reorders its own rows into the children
(:func:`partition_nodes`). Layouts: :mod:`._split_kernels`.
"""
from collections import namedtuple

import numpy as np

from ..._numba import njit, prange
from ._kernel_flags import EXACT_PARALLEL, HELPER
from ._split_kernels import (
    SQUARED_ERROR,
    best_threshold,
    compact_histogram,
    impurity_decrease,
    stats_weight,
)

__all__ = ["HistogramLayout", "NodeSplits", "build_histograms", "evaluate_nodes",
           "partition_nodes"]

#: Where a level's histograms live in a flat buffer: node ``k`` has the histograms of
#: ``features[feature_ptr[k]:feature_ptr[k + 1]]`` (in visiting order) at
#: ``offsets[feature_ptr[k]:feature_ptr[k + 1]]`` (int64 arrays).
HistogramLayout = namedtuple("HistogramLayout", ["feature_ptr", "features", "offsets"])
#: The best split of every node: ``feature`` (-1 when none) and ``bin``, its ``score`` and
#: impurity ``decrease``, the ``left`` side's stats and the node's ``totals`` (n, D), and
#: whether some feature was ``found`` non-constant.
NodeSplits = namedtuple("NodeSplits", ["feature", "bin", "score", "decrease", "left", "totals",
                                       "found"])


# A prange loop's index is typed int64 when Numba first types the kernel and uint64 in the
# parallel region: passed on as np.int64(k), the helpers compile for one signature.
# A prange body reaches a record's arrays only inside a function it calls: writes through
# a namedtuple's arrays directly in a prange body are lost (Numba's bugs
# github.com/numba/numba/issues/5872 and /7135).

@njit(**HELPER)
def _add_node_rows(Xb, target, weights, rows, node_lo, node_hi, node_tree, k, layout, settings,
                   hist):
    """Add node ``k``'s rows to its histograms."""
    D = settings.channels
    regression = settings.criterion == SQUARED_ERROR
    feature_ptr, features, offsets = layout
    tree = node_tree[k]
    for r in range(node_lo[k], node_hi[k]):
        i = rows[r]
        w = np.int64(weights[tree, i])
        y = target[i]
        for j in range(feature_ptr[k], feature_ptr[k + 1]):
            at = offsets[j] + np.int64(Xb[i, features[j]]) * D
            if regression:
                hist[at] += w * y
                hist[at + 1] += w
            else:
                hist[at + y] += w


@njit(**EXACT_PARALLEL)
def build_histograms(Xb, target, weights, rows, node_lo, node_hi, node_tree, layout, settings,
                     hist):
    """Add this rank's rows of every node to its histograms (``hist`` zeroed by the caller).

    Node ``k`` owns ``rows[node_lo[k]:node_hi[k]]`` (local row indices) of tree
    ``node_tree[k]`` (a row of ``weights``) and fills its histograms of ``layout``.
    """
    for k in prange(node_lo.shape[0]):
        _add_node_rows(Xb, target, weights, rows, node_lo, node_hi, node_tree, np.int64(k),
                       layout, settings, hist)


@njit(**HELPER)
def _node_total(hist, layout, k, n_bins, total):
    """Node ``k``'s stats: the sum of the bins of its first histogram (zero without one)."""
    D = total.shape[0]
    for c in range(D):
        total[c] = 0
    if layout.feature_ptr[k + 1] > layout.feature_ptr[k]:
        j = layout.feature_ptr[k]
        for b in range(n_bins[layout.features[j]]):
            for c in range(D):
                total[c] += hist[layout.offsets[j] + b * D + c]


@njit(**HELPER)
def _evaluate_node(hist, layout, k, settings, first_only, out):
    """Node ``k``'s best split (see :func:`evaluate_nodes`)."""
    D = settings.channels
    criterion = settings.criterion
    regression = criterion == SQUARED_ERROR
    n_bins = settings.n_bins
    cbins = np.empty(settings.max_bins, dtype=np.int64)
    cstats = np.empty((settings.max_bins, D), dtype=np.int64)
    left = np.empty(D, dtype=np.int64)
    right = np.empty(D, dtype=np.int64)
    candidate = np.empty(D, dtype=np.int64)
    total = out.totals[k]
    _node_total(hist, layout, k, n_bins, total)
    out.feature[k] = -1
    out.bin[k] = -1
    out.score[k] = -np.inf
    out.decrease[k] = 0.0
    out.found[k] = False
    for j in range(layout.feature_ptr[k], layout.feature_ptr[k + 1]):
        f = layout.features[j]
        n = compact_histogram(hist, layout.offsets[j], 0, n_bins[f] - 1, D, regression, cbins,
                              cstats)
        if n < 2:
            continue
        out.found[k] = True
        score, b = best_threshold(cbins, cstats, n, total, criterion, settings.min_leaf, left,
                                  right, candidate)
        if score > out.score[k]:
            out.score[k] = score
            out.feature[k] = f
            out.bin[k] = b
            for c in range(candidate.shape[0]):  # a loop: no shape check to compile
                out.left[k, c] = candidate[c]
        if first_only[k]:
            break
    if out.feature[k] >= 0:
        out.decrease[k] = impurity_decrease(out.score[k], total, stats_weight(total, regression),
                                            criterion)


@njit(**EXACT_PARALLEL)
def evaluate_nodes(hist, layout, settings, first_only, out):
    """Best split of every node from its global histograms, features in visiting order.

    ``first_only[k]``: stop at the first non-constant feature (the continued
    draw after ``max_features`` constant ones). The results go to ``out``, a
    :data:`NodeSplits`.
    """
    for k in prange(layout.feature_ptr.shape[0] - 1):
        _evaluate_node(hist, layout, np.int64(k), settings, first_only, out)


@njit(**EXACT_PARALLEL)
def partition_nodes(Xb, rows, node_lo, node_hi, node_feature, node_bin, n_left):
    """Reorder each node's ``rows`` segment: rows with ``bin <= node_bin`` first."""
    for k in prange(node_lo.shape[0]):
        f = node_feature[k]
        t = node_bin[k]
        i = node_lo[k]
        j = node_hi[k] - 1
        while i <= j:
            if Xb[rows[i], f] <= t:
                i += 1
            else:
                tmp = rows[i]
                rows[i] = rows[j]
                rows[j] = tmp
                j -= 1
        n_left[k] = i - node_lo[k]
