"""The split search that both growth paths share: scores, thresholds, impurity decreases.

Level-wise growth over ranks (:mod:`._level_kernels`) and whole subtrees on
one rank (:mod:`._subtree_kernels`) rank candidate splits with these
functions only, so that the same node gets the same split on either path
(see :mod:`._kernel_flags`).

Layout conventions
    ``Xb`` : uint8 array of shape (n_rows, n_features), the binned data (row-major).
    ``target`` : int64 array of shape (n_rows,): class codes, or the regression
        targets as fixed-point integers.
    ``stats`` : int64 per node (or per histogram bin), ``D`` channels: the
        (bootstrap-weighted) count of every class for classification, or
        ``(sum of fixed-point targets, weight)`` for regression.
    A histogram of one (node, feature) pair is ``n_bins[feature] * D`` int64
    values at some offset of a flat buffer; bin ``b`` holds
    ``hist[off + b*D : off + (b+1)*D]``.
"""
import math
from collections import namedtuple

import numpy as np

from ..._numba import njit
from ._kernel_flags import HELPER

__all__ = ["CRITERIA", "SQUARED_ERROR", "SplitSettings", "stats_weight", "impurity_decrease",
           "best_threshold", "compact_histogram"]

#: criterion name -> code used by the kernels
CRITERIA = {"gini": 0, "entropy": 1, "log_loss": 1, "squared_error": 2}
_GINI, _ENTROPY = 0, 1
SQUARED_ERROR = 2

#: What the kernels need to know besides the data (the same on every rank):
#: ``n_bins`` (int64 array, one per feature) and ``max_bins`` (its maximum, at least 1),
#: ``max_features`` drawn per node, ``channels`` (``D``), the ``criterion`` code, and the
#: stopping rules ``max_depth``, ``min_split`` and ``min_leaf`` (bootstrap-weighted rows).
SplitSettings = namedtuple("SplitSettings", ["n_bins", "max_bins", "max_features", "channels",
                                             "criterion", "max_depth", "min_split", "min_leaf"])


@njit(**HELPER)
def stats_weight(stats, regression):
    """The (bootstrap-weighted) number of rows behind ``stats``."""
    if regression:
        return stats[1]
    total = 0
    for c in range(stats.shape[0]):
        total += stats[c]
    return total


@njit(**HELPER)
def _side_score(counts, weight, criterion):
    """Gini: sum(n_c^2) / W; entropy: sum(n_c log(n_c / W)) (higher is purer)."""
    w = float(weight)
    score = 0.0
    if criterion == _ENTROPY:
        for c in range(counts.shape[0]):
            if counts[c] > 0:
                n = float(counts[c])
                score += n * math.log(n / w)
    else:
        for c in range(counts.shape[0]):
            n = float(counts[c])
            score += n * n
        score = score / w
    return score


@njit(**HELPER)
def _split_score(left, total, wl, wr, w, criterion, right):
    """The proxy of a split that the search maximises (see :func:`impurity_decrease`)."""
    if criterion == SQUARED_ERROR:
        d = float(left[0]) / float(wl) - float(total[0] - left[0]) / float(wr)
        return float(wl) * float(wr) / float(w) * d * d
    for c in range(total.shape[0]):
        right[c] = total[c] - left[c]
    return _side_score(left, wl, criterion) + _side_score(right, wr, criterion)


@njit(**HELPER)
def impurity_decrease(score, total, w, criterion):
    """Weighted impurity decrease W_t i_t - W_l i_l - W_r i_r of a split with ``score``."""
    if criterion == SQUARED_ERROR:
        return score
    value = score - _side_score(total, w, criterion)
    return value if value > 0.0 else 0.0


@njit(**HELPER)
def best_threshold(cbins, cstats, k, total, criterion, min_leaf, left, right, best_left):
    """Best threshold of one feature from its ``k`` occupied bins (ascending).

    Candidates are the occupied bins but the last ("go left when bin <= t");
    the first best (lowest bin) wins. Returns ``(score, bin)``, score ``-inf``
    when no threshold leaves ``min_leaf`` weight on both sides; ``best_left``
    receives the left side's stats. ``cstats`` is overwritten with the
    running sums of the left side.

    The running sums come first, then the candidates, which no longer depend
    on each other, so the processor overlaps their divisions (with the sums
    carried from one candidate to the next, each waited for the last). Gini's
    score is written out here with the operations of :func:`_split_score`
    in the same order, so it rounds the same.
    """
    regression = criterion == SQUARED_ERROR
    D = total.shape[0]
    w = stats_weight(total, regression)
    for i in range(1, k - 1):
        for c in range(D):
            cstats[i, c] += cstats[i - 1, c]
    best = -np.inf
    best_i = -1
    for i in range(k - 1):
        if regression:
            wl = cstats[i, 1]
        else:
            wl = 0
            for c in range(D):
                wl += cstats[i, c]
        wr = w - wl
        if wl < min_leaf:
            continue
        if wr < min_leaf:
            break
        if criterion == _GINI:
            on_left = 0.0
            on_right = 0.0
            for c in range(D):
                n = float(cstats[i, c])
                on_left += n * n
                n = float(total[c] - cstats[i, c])
                on_right += n * n
            score = on_left / float(wl) + on_right / float(wr)
        else:
            for c in range(D):
                left[c] = cstats[i, c]
            score = _split_score(left, total, wl, wr, w, criterion, right)
        if score > best:
            best = score
            best_i = i
    if best_i < 0:
        return best, -1
    for c in range(D):
        best_left[c] = cstats[best_i, c]
    return best, cbins[best_i]


@njit(**HELPER)
def compact_histogram(hist, base, lo, hi, D, regression, cbins, cstats):
    """The occupied bins ``lo..hi`` of a dense histogram at ``hist[base:]``; returns their count."""
    k = 0
    for b in range(lo, hi + 1):
        at = base + b * D
        if regression:
            occupied = hist[at + 1] > 0
        else:
            occupied = False
            for c in range(D):
                if hist[at + c] > 0:
                    occupied = True
                    break
        if occupied:
            cbins[k] = b
            for c in range(D):
                cstats[k, c] = hist[at + c]
            k += 1
    return k
