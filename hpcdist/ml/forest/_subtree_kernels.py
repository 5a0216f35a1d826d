"""Kernels that grow whole subtrees on one rank, depth first (the small nodes of :mod:`.grow`).

A subtree's rows are copied into private contiguous arrays that its splits
reorder in place; a node's features are histogrammed a chunk at a time
(dense histograms) or, for a few rows, sorted by bin. Splits are ranked by
the functions that level-wise growth uses too (:mod:`._split_kernels`).
"""
import numpy as np

from ..._numba import njit, prange
from ._hash_kernels import child_key, draw_feature
from ._kernel_flags import EXACT, EXACT_PARALLEL
from ._split_kernels import (SQUARED_ERROR, best_threshold, compact_histogram,
                             impurity_decrease, stats_weight)

__all__ = ["SMALL_NODE_ROWS", "FEATURE_CHUNK", "grow_subtrees"]

#: Nodes of at most this many rows sort their rows per feature instead of filling a histogram.
SMALL_NODE_ROWS = 32
#: Features histogrammed together in one pass over a node's rows.
FEATURE_CHUNK = 16


@njit(**EXACT)
def _sorted_bins(Xt, yt, wt, lo, hi, f, D, regression, keys, cbins, cstats):
    """Occupied bins of feature ``f`` over the few rows ``lo:hi`` (insertion sort by bin)."""
    m = hi - lo
    for r in range(m):
        key = (np.int64(Xt[lo + r, f]) << 32) | r
        s = r
        while s > 0 and keys[s - 1] > key:
            keys[s] = keys[s - 1]
            s -= 1
        keys[s] = key
    k = 0
    previous = -1
    for s in range(m):
        b = keys[s] >> 32
        r = lo + (keys[s] & 0xFFFFFFFF)
        if b != previous:
            cbins[k] = b
            for c in range(D):
                cstats[k, c] = 0
            k += 1
            previous = b
        w = np.int64(wt[r])
        if regression:
            cstats[k - 1, 0] += w * yt[r]
            cstats[k - 1, 1] += w
        else:
            cstats[k - 1, yt[r]] += w
    return k


@njit(**EXACT)
def _chunk_histograms(Xt, yt, wt, lo, hi, chunk, size, max_bins, D, regression, hist, lows,
                      highs):
    """Dense histograms of features ``chunk[:size]`` over rows ``lo:hi`` in one pass.

    Feature ``chunk[s]`` fills ``hist[s * max_bins * D:]`` (zero on entry) and
    its occupied range ``lows[s]..highs[s]``.
    """
    for s in range(size):
        lows[s] = max_bins
        highs[s] = -1
    for r in range(lo, hi):
        w = np.int64(wt[r])
        y = yt[r]
        for s in range(size):
            b = np.int64(Xt[r, chunk[s]])
            if b < lows[s]:
                lows[s] = b
            if b > highs[s]:
                highs[s] = b
            at = (s * max_bins + b) * D
            if regression:
                hist[at] += w * y
                hist[at + 1] += w
            else:
                hist[at + y] += w


@njit(**EXACT)
def _grow_one(Xb, target, rows, weights, lo0, hi0, key0, depth0, n_bins, max_features, D,
              criterion, max_depth, min_split, min_leaf, base, out_feature, out_bin, out_right,
              out_stats, out_decrease):
    """Grow the subtree of ``rows[lo0:hi0]`` depth first; nodes in preorder from ``base``.

    The rows are first copied into private contiguous arrays, which splits
    then reorder in place, so that every node's rows are contiguous and
    histograms stream through memory. The left child of an internal node is
    the next node; ``out_right`` holds the right child relative to ``base``.
    Returns the number of nodes.
    """
    regression = criterion == SQUARED_ERROR
    n_features = n_bins.shape[0]
    max_bins = 1
    for f in range(n_features):
        max_bins = max(max_bins, n_bins[f])
    capacity = hi0 - lo0 + 2
    st_lo = np.empty(capacity, dtype=np.int64)
    st_hi = np.empty(capacity, dtype=np.int64)
    st_depth = np.empty(capacity, dtype=np.int64)
    st_key = np.empty(capacity, dtype=np.uint64)
    st_parent = np.empty(capacity, dtype=np.int64)
    st_stats = np.empty((capacity, D), dtype=np.int64)
    hist = np.zeros(FEATURE_CHUNK * max_bins * D, dtype=np.int64)
    chunk = np.empty(FEATURE_CHUNK, dtype=np.int64)
    lows = np.empty(FEATURE_CHUNK, dtype=np.int64)
    highs = np.empty(FEATURE_CHUNK, dtype=np.int64)
    keys = np.empty(SMALL_NODE_ROWS, dtype=np.int64)
    cbins = np.empty(max_bins, dtype=np.int64)
    cstats = np.empty((max_bins, D), dtype=np.int64)
    order = np.empty(n_features, dtype=np.int64)
    left = np.empty(D, dtype=np.int64)
    right = np.empty(D, dtype=np.int64)
    candidate = np.empty(D, dtype=np.int64)
    best_left = np.empty(D, dtype=np.int64)
    total = np.empty(D, dtype=np.int64)
    m = hi0 - lo0
    # rows padded to whole 64-bit words: a swap moves a few words, not every byte
    words = (n_features + 7) // 8
    packed = np.zeros(m * words, dtype=np.uint64)
    row_words = packed.reshape((m, words))
    Xt = packed.view(np.uint8).reshape((m, words * 8))
    yt = np.empty(m, dtype=np.int64)
    wt = np.empty(m, dtype=np.int64)
    for r in range(m):
        i = rows[lo0 + r]
        for f in range(n_features):
            Xt[r, f] = Xb[i, f]
        yt[r] = target[i]
        wt[r] = weights[lo0 + r]

    top = 0
    st_lo[0] = 0
    st_hi[0] = m
    st_depth[0] = depth0
    st_key[0] = key0
    st_parent[0] = -1
    for c in range(D):
        st_stats[0, c] = 0
    for r in range(m):
        if regression:
            st_stats[0, 0] += wt[r] * yt[r]
            st_stats[0, 1] += wt[r]
        else:
            st_stats[0, yt[r]] += wt[r]
    top = 1
    n_nodes = 0
    while top > 0:
        top -= 1
        lo = st_lo[top]
        hi = st_hi[top]
        depth = st_depth[top]
        key = st_key[top]
        node = base + n_nodes
        n_nodes += 1
        if st_parent[top] >= 0:
            out_right[st_parent[top]] = node - base
        for c in range(D):
            total[c] = st_stats[top, c]
            out_stats[node, c] = total[c]
        out_feature[node] = -1
        out_bin[node] = -1
        out_right[node] = -1
        out_decrease[node] = 0.0
        w = stats_weight(total, regression)
        leaf = depth >= max_depth or w < min_split or w < 2 * min_leaf
        if not leaf and not regression:
            classes = 0
            for c in range(D):
                if total[c] > 0:
                    classes += 1
            leaf = classes <= 1
        if leaf:
            continue
        # visit features in the node's order: max_features of them, and on
        # until one is non-constant; larger nodes histogram a chunk of
        # features in one pass over their rows
        for f in range(n_features):
            order[f] = f
        best_score = -np.inf
        best_feature = -1
        best_bin = -1
        found = False
        j = 0
        while j < n_features and not (found and j >= max_features):
            size = min(FEATURE_CHUNK, n_features - j)
            if j < max_features:
                size = min(size, max_features - j)
            for s in range(size):
                chunk[s] = draw_feature(key, order, j + s)
            dense = hi - lo > SMALL_NODE_ROWS
            if dense:
                _chunk_histograms(Xt, yt, wt, lo, hi, chunk, size, max_bins, D, regression, hist,
                                  lows, highs)
            for s in range(size):
                f = chunk[s]
                if dense:
                    start = s * max_bins * D
                    n = compact_histogram(hist, start, lows[s], highs[s], D, regression, cbins,
                                       cstats)
                    for at in range(start + lows[s] * D, start + (highs[s] + 1) * D):
                        hist[at] = 0
                else:
                    n = _sorted_bins(Xt, yt, wt, lo, hi, f, D, regression, keys, cbins, cstats)
                if n < 2:
                    continue
                score, b = best_threshold(cbins, cstats, n, total, criterion, min_leaf, left,
                                           right, candidate)
                if score > best_score:
                    best_score = score
                    best_feature = f
                    best_bin = b
                    for c in range(D):
                        best_left[c] = candidate[c]
                if j + s >= max_features:  # the continued draw stops at a non-constant one
                    found = True
                    break
                found = True
            if dense and found and j + size > max_features:
                for s2 in range(size):  # clear what the early stop left behind
                    start = s2 * max_bins * D
                    if highs[s2] >= lows[s2]:
                        for at in range(start + lows[s2] * D, start + (highs[s2] + 1) * D):
                            hist[at] = 0
            j += size
        if best_feature < 0 or (regression and not best_score > 0.0):
            continue
        out_feature[node] = best_feature
        out_bin[node] = best_bin
        out_decrease[node] = impurity_decrease(best_score, total, w, criterion)
        i = lo
        j = hi - 1
        while i <= j:
            if Xt[i, best_feature] <= best_bin:
                i += 1
            else:
                for k in range(words):
                    tmp = row_words[i, k]
                    row_words[i, k] = row_words[j, k]
                    row_words[j, k] = tmp
                ty = yt[i]
                yt[i] = yt[j]
                yt[j] = ty
                tw = wt[i]
                wt[i] = wt[j]
                wt[j] = tw
                j -= 1
        # push the right child first so that the left one is next (preorder)
        st_lo[top] = i
        st_hi[top] = hi
        st_depth[top] = depth + 1
        st_key[top] = child_key(key, True)
        st_parent[top] = node
        for c in range(D):
            st_stats[top, c] = total[c] - best_left[c]
        top += 1
        st_lo[top] = lo
        st_hi[top] = i
        st_depth[top] = depth + 1
        st_key[top] = child_key(key, False)
        st_parent[top] = -1
        for c in range(D):
            st_stats[top, c] = best_left[c]
        top += 1
    return n_nodes


@njit(**EXACT_PARALLEL)
def grow_subtrees(Xb, target, rows, weights, task_lo, task_hi, task_key, task_depth, n_bins,
                  max_features, D, criterion, max_depth, min_split, min_leaf, out_base,
                  out_feature, out_bin, out_right, out_stats, out_decrease, out_count):
    """Grow every task's subtree to the end (parallel over tasks).

    Task ``t`` owns ``rows[task_lo[t]:task_hi[t]]`` (indices into ``Xb`` and
    ``target``) with bootstrap weights ``weights[task_lo[t]:task_hi[t]]``;
    its nodes go to the output arrays from
    ``out_base[t]`` (room for ``2 * rows - 1``), their number to ``out_count[t]``.
    ``rows`` and ``weights`` are read only.
    """
    for t in prange(task_lo.shape[0]):
        out_count[t] = _grow_one(Xb, target, rows, weights, task_lo[t], task_hi[t], task_key[t],
                                 task_depth[t], n_bins, max_features, D, criterion, max_depth,
                                 min_split, min_leaf, out_base[t], out_feature, out_bin,
                                 out_right, out_stats, out_decrease)

