"""Kernels of level-wise growth over ranks: histograms, split search, row partitioning.

Every rank histograms its own rows of all open nodes (:func:`build_histograms`),
the drivers sum the histograms over ranks (:mod:`hpcdist.ml.forest.histograms`),
every rank finds the same splits in the same global histograms
(:func:`evaluate_nodes`) and reorders its own rows into the children
(:func:`partition_nodes`). Layouts: :mod:`._split_kernels`.
"""
import numpy as np

from ..._numba import njit, prange
from ._kernel_flags import EXACT_PARALLEL
from ._split_kernels import (SQUARED_ERROR, best_threshold, compact_histogram,
                             impurity_decrease, stats_weight)

__all__ = ["build_histograms", "evaluate_nodes", "partition_nodes"]


@njit(**EXACT_PARALLEL)
def build_histograms(Xb, target, weights, rows, node_lo, node_hi, node_tree, feature_ptr,
                     features, offsets, D, regression, hist):
    """Add this rank's rows of every node to its histograms (``hist`` zeroed by the caller).

    Node ``k`` owns ``rows[node_lo[k]:node_hi[k]]`` (local row indices) of tree
    ``node_tree[k]`` (a row of ``weights``) and fills the histograms of
    ``features[feature_ptr[k]:feature_ptr[k + 1]]`` at ``offsets[...]``.
    """
    for k in prange(node_lo.shape[0]):
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
def evaluate_nodes(hist, feature_ptr, features, offsets, n_bins, D, criterion, min_leaf,
                   first_only, best_feature, best_bin, best_score, decrease, left_stats, totals,
                   found):
    """Best split of every node from its global histograms, features in visiting order.

    ``first_only[k]``: stop at the first non-constant feature (the continued
    draw after ``max_features`` constant ones). Outputs per node: the best
    feature (-1 when none) and bin, its score and impurity decrease, the left
    stats, the node's total stats, and whether some feature was non-constant.
    """
    regression = criterion == SQUARED_ERROR
    max_bins = 1
    for f in range(n_bins.shape[0]):
        max_bins = max(max_bins, n_bins[f])
    for k in prange(feature_ptr.shape[0] - 1):
        cbins = np.empty(max_bins, dtype=np.int64)
        cstats = np.empty((max_bins, D), dtype=np.int64)
        left = np.empty(D, dtype=np.int64)
        right = np.empty(D, dtype=np.int64)
        candidate = np.empty(D, dtype=np.int64)
        total = totals[k]
        for c in range(D):
            total[c] = 0
        if feature_ptr[k + 1] > feature_ptr[k]:
            j = feature_ptr[k]
            for b in range(n_bins[features[j]]):
                for c in range(D):
                    total[c] += hist[offsets[j] + b * D + c]
        w = stats_weight(total, regression)
        best_feature[k] = -1
        best_bin[k] = -1
        best_score[k] = -np.inf
        decrease[k] = 0.0
        found[k] = False
        for j in range(feature_ptr[k], feature_ptr[k + 1]):
            f = features[j]
            n = compact_histogram(hist, offsets[j], 0, n_bins[f] - 1, D, regression, cbins, cstats)
            if n < 2:
                continue
            found[k] = True
            score, b = best_threshold(cbins, cstats, n, total, criterion, min_leaf, left,
                                       right, candidate)
            if score > best_score[k]:
                best_score[k] = score
                best_feature[k] = f
                best_bin[k] = b
                for c in range(D):
                    left_stats[k, c] = candidate[c]
            if first_only[k]:
                break
        if best_feature[k] >= 0:
            decrease[k] = impurity_decrease(best_score[k], total, w, criterion)


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

