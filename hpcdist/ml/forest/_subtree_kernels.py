"""Numba kernels of the histogram random forest (:mod:`hpcdist.ml.forest`).

No validation happens here: the estimators validate, the drivers in
``hpcdist/ml/forest`` allocate and loop, these kernels compute.

Layout conventions
    ``Xb`` : uint8 array of shape (n_rows, n_features), the binned data (row-major).
    ``target`` : int64 array of shape (n_rows,): class codes, or the regression
        targets as fixed-point integers.
    ``stats`` : int64 per node (or per histogram bin), ``D`` channels: the
        (bootstrap-weighted) count of every class for classification, or
        ``(sum of fixed-point targets, weight)`` for regression.
    A histogram of one (node, feature) pair is ``n_bins[feature] * D`` int64
    values at some offset of a flat buffer; bin ``b`` holds ``hist[off + b*D : off + (b+1)*D]``.

Determinism
    A forest must come out bit-identical at any number of ranks and whichever
    code path (level-wise over ranks, or a whole subtree on one rank) grew a
    node. Every quantity a split decision depends on is therefore an exact
    integer (counts, fixed-point sums), and the floating-point formulas that
    rank candidate splits live in one function (:func:`_best_threshold`) that
    both paths call. The kernels of this module are compiled *without*
    fastmath (``EXACT``): with reassociation or contraction allowed, the
    compiler could round the same formula differently in different callers.
    Random numbers come from counter-based hashes (SplitMix64's finaliser) of
    ``(seed, stream, tree, global row or node key)``, never from a generator
    whose state depends on how much was drawn before.
"""
import math

import numpy as np

from ..._numba import JIT, njit, prange

__all__ = [
    "EXACT", "EXACT_PARALLEL", "CRITERIA", "MAX_BOOTSTRAP_WEIGHT", "SMALL_NODE_ROWS",
    "FEATURE_CHUNK",
    "root_keys", "child_keys", "feature_orders", "hash_below", "bootstrap_weights",
    "bin_columns", "build_histograms", "evaluate_nodes", "partition_nodes", "grow_subtrees",
    "forest_mean_values", "oob_sums",
]

#: Flags of every tree kernel: those of ``JIT`` with fastmath off (see the module docstring).
EXACT = dict(JIT, fastmath=False)
EXACT_PARALLEL = dict(EXACT, parallel=True)

#: criterion name -> code used by the kernels
CRITERIA = {"gini": 0, "entropy": 1, "log_loss": 1, "squared_error": 2}
_ENTROPY = 1
_SQUARED_ERROR = 2

#: Nodes of at most this many rows sort their rows per feature instead of filling a histogram.
SMALL_NODE_ROWS = 32
#: Features histogrammed together in one pass over a node's rows.
FEATURE_CHUNK = 16

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_ONE = np.uint64(1)
_TWO = np.uint64(2)
#: stream constants: node keys, feature draws, bootstrap weights, row sample
_NODE_STREAM = np.uint64(0x6E6F646573747265)
_FEATURE_STREAM = np.uint64(0x6665617475726573)
_BOOTSTRAP_STREAM = np.uint64(0x626F6F7473747270)


def _poisson_table(limit=24):
    """Integer thresholds of Poisson(1) on 53-bit uniforms: w = #{k: u >= T[k]}."""
    table, cdf, term = [], 0.0, math.exp(-1.0)
    for k in range(limit):
        cdf += term
        term /= k + 1
        table.append(min(int(cdf * 2.0 ** 53), 2 ** 53))
    return np.array(table, dtype=np.uint64)


_POISSON = _poisson_table()
#: the largest bootstrap weight a row can get in one tree
MAX_BOOTSTRAP_WEIGHT = int(np.searchsorted(_POISSON, 2 ** 53))


@njit(**EXACT)
def _mix(x):
    """SplitMix64's finaliser of ``x + golden``: a bijective 64-bit hash."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MUL1
    x = (x ^ (x >> _S27)) * _MUL2
    return x ^ (x >> _S31)


@njit(**EXACT)
def _hash2(a, b):
    return _mix(_mix(a) ^ b)


# -- keys and random streams ---------------------------------------------------------------------

@njit(**EXACT)
def root_keys(seed, trees, out):
    """``out[i]`` = the key of tree ``trees[i]``'s root (uint64); ``seed`` is a uint64."""
    for i in range(trees.shape[0]):
        out[i] = _hash2(_hash2(seed ^ _NODE_STREAM, np.uint64(trees[i])), np.uint64(0))


@njit(**EXACT)
def _child_key(key, right):
    return _hash2(key, _TWO if right else _ONE)


@njit(**EXACT)
def child_keys(keys, left_out, right_out):
    """Keys of the two children of the nodes ``keys`` (uint64 arrays)."""
    for i in range(keys.shape[0]):
        left_out[i] = _child_key(keys[i], False)
        right_out[i] = _child_key(keys[i], True)


@njit(**EXACT)
def _draw_feature(key, order, j):
    """Step ``j`` of the node's Fisher-Yates shuffle of ``order`` (in place); returns order[j]."""
    n = order.shape[0]
    h = _hash2(key ^ _FEATURE_STREAM, np.uint64(j))
    r = j + np.int64(h % np.uint64(n - j))
    tmp = order[j]
    order[j] = order[r]
    order[r] = tmp
    return order[j]


@njit(**EXACT)
def feature_orders(keys, n_features, count, out):
    """The first ``count`` features in which each node (by key) visits them; out (k, count)."""
    order = np.empty(n_features, dtype=np.int64)
    for i in range(keys.shape[0]):
        for f in range(n_features):
            order[f] = f
        for j in range(count):
            out[i, j] = _draw_feature(keys[i], order, j)


@njit(**EXACT_PARALLEL)
def hash_below(seed, global_index, threshold, out):
    """``out[i]`` = whether the hash of row ``global_index[i]`` is below ``threshold`` (uint64)."""
    for i in prange(global_index.shape[0]):
        out[i] = _hash2(seed, np.uint64(global_index[i])) < threshold


@njit(**EXACT)
def _tree_stream(seed, tree):
    return _hash2(seed ^ _BOOTSTRAP_STREAM, np.uint64(tree))


@njit(**EXACT)
def _bootstrap_weight(tree_stream, g):
    """Poisson(1) by inversion of a 53-bit uniform against integer thresholds."""
    u = _hash2(tree_stream, g) >> _S11
    w = 0
    while u >= _POISSON[w]:
        w += 1
    return w


@njit(**EXACT_PARALLEL)
def bootstrap_weights(seed, trees, global_index, out):
    """Poisson(1) bootstrap weight of every (tree, row): out (n_trees, n_rows) uint8."""
    for i in prange(global_index.shape[0]):
        g = np.uint64(global_index[i])
        for t in range(trees.shape[0]):
            out[t, i] = _bootstrap_weight(_tree_stream(seed, trees[t]), g)


# -- binning -----------------------------------------------------------------------------------

@njit(**EXACT_PARALLEL)
def bin_columns(X, edges, edge_offsets, out):
    """``out[i, f]`` = the number of edges of feature ``f`` that are ``< X[i, f]``.

    ``edges[edge_offsets[f]:edge_offsets[f + 1]]`` are feature ``f``'s sorted
    bin edges, so ``bin <= t`` exactly when ``x <= edges[t]``. A branch-free
    binary search per value.
    """
    for i in prange(X.shape[0]):
        for f in range(X.shape[1]):
            first = edge_offsets[f]
            n = edge_offsets[f + 1] - first
            x = X[i, f]
            b = 0
            if n > 0:
                while n > 1:
                    half = n >> 1
                    if edges[first + b + half - 1] < x:
                        b += half
                    n -= half
                if edges[first + b] < x:
                    b += 1
            out[i, f] = b


# -- split evaluation (shared by both growth paths) ---------------------------------------------

@njit(**EXACT)
def _weight(stats, regression):
    if regression:
        return stats[1]
    total = 0
    for c in range(stats.shape[0]):
        total += stats[c]
    return total


@njit(**EXACT)
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


@njit(**EXACT)
def _split_score(left, total, wl, wr, w, criterion, right):
    """The proxy of a split that the search maximises (see :func:`_decrease`)."""
    if criterion == _SQUARED_ERROR:
        d = float(left[0]) / float(wl) - float(total[0] - left[0]) / float(wr)
        return float(wl) * float(wr) / float(w) * d * d
    for c in range(total.shape[0]):
        right[c] = total[c] - left[c]
    return _side_score(left, wl, criterion) + _side_score(right, wr, criterion)


@njit(**EXACT)
def _decrease(score, total, w, criterion):
    """Weighted impurity decrease W_t i_t - W_l i_l - W_r i_r of a split with ``score``."""
    if criterion == _SQUARED_ERROR:
        return score
    value = score - _side_score(total, w, criterion)
    return value if value > 0.0 else 0.0


@njit(**EXACT)
def _best_threshold(cbins, cstats, k, total, criterion, min_leaf, left, right, best_left):
    """Best threshold of one feature from its ``k`` occupied bins (ascending).

    Candidates are the occupied bins but the last ("go left when bin <= t");
    the first best (lowest bin) wins. Returns ``(score, bin)``, score ``-inf``
    when no threshold leaves ``min_leaf`` weight on both sides; ``best_left``
    receives the left side's stats.
    """
    regression = criterion == _SQUARED_ERROR
    w = _weight(total, regression)
    for c in range(total.shape[0]):
        left[c] = 0
    best = -np.inf
    best_bin = -1
    for i in range(k - 1):
        for c in range(total.shape[0]):
            left[c] += cstats[i, c]
        wl = _weight(left, regression)
        wr = w - wl
        if wl < min_leaf:
            continue
        if wr < min_leaf:
            break
        score = _split_score(left, total, wl, wr, w, criterion, right)
        if score > best:
            best = score
            best_bin = cbins[i]
            for c in range(total.shape[0]):
                best_left[c] = left[c]
    return best, best_bin


@njit(**EXACT)
def _compact_dense(hist, base, lo, hi, D, regression, cbins, cstats):
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


# -- level-wise growth over ranks ----------------------------------------------------------------

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
    regression = criterion == _SQUARED_ERROR
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
        w = _weight(total, regression)
        best_feature[k] = -1
        best_bin[k] = -1
        best_score[k] = -np.inf
        decrease[k] = 0.0
        found[k] = False
        for j in range(feature_ptr[k], feature_ptr[k + 1]):
            f = features[j]
            n = _compact_dense(hist, offsets[j], 0, n_bins[f] - 1, D, regression, cbins, cstats)
            if n < 2:
                continue
            found[k] = True
            score, b = _best_threshold(cbins, cstats, n, total, criterion, min_leaf, left,
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
            decrease[k] = _decrease(best_score[k], total, w, criterion)


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


# -- whole subtrees on one rank ------------------------------------------------------------------

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
    regression = criterion == _SQUARED_ERROR
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
        w = _weight(total, regression)
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
                chunk[s] = _draw_feature(key, order, j + s)
            dense = hi - lo > SMALL_NODE_ROWS
            if dense:
                _chunk_histograms(Xt, yt, wt, lo, hi, chunk, size, max_bins, D, regression, hist,
                                  lows, highs)
            for s in range(size):
                f = chunk[s]
                if dense:
                    start = s * max_bins * D
                    n = _compact_dense(hist, start, lows[s], highs[s], D, regression, cbins,
                                       cstats)
                    for at in range(start + lows[s] * D, start + (highs[s] + 1) * D):
                        hist[at] = 0
                else:
                    n = _sorted_bins(Xt, yt, wt, lo, hi, f, D, regression, keys, cbins, cstats)
                if n < 2:
                    continue
                score, b = _best_threshold(cbins, cstats, n, total, criterion, min_leaf, left,
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
        out_decrease[node] = _decrease(best_score, total, w, criterion)
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
        st_key[top] = _child_key(key, True)
        st_parent[top] = node
        for c in range(D):
            st_stats[top, c] = total[c] - best_left[c]
        top += 1
        st_lo[top] = lo
        st_hi[top] = i
        st_depth[top] = depth + 1
        st_key[top] = _child_key(key, False)
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


# -- prediction --------------------------------------------------------------------------------

@njit(**EXACT)
def _leaf_of(X, i, tree_base, feature, threshold, left, right):
    node = 0
    while feature[tree_base + node] >= 0:
        if X[i, feature[tree_base + node]] <= threshold[tree_base + node]:
            node = left[tree_base + node]
        else:
            node = right[tree_base + node]
    return tree_base + node


@njit(**EXACT_PARALLEL)
def forest_mean_values(X, tree_offsets, feature, threshold, left, right, value, out):
    """``out[i]`` = the mean over trees of the value of row ``i``'s leaf (trees in order)."""
    n_trees = tree_offsets.shape[0] - 1
    for i in prange(X.shape[0]):
        for c in range(value.shape[1]):
            out[i, c] = 0.0
        for t in range(n_trees):
            leaf = _leaf_of(X, i, tree_offsets[t], feature, threshold, left, right)
            for c in range(value.shape[1]):
                out[i, c] += value[leaf, c]
        for c in range(value.shape[1]):
            out[i, c] = out[i, c] / n_trees


@njit(**EXACT_PARALLEL)
def oob_sums(X, global_index, seed, trees, bootstrapped, tree_offsets, feature, threshold, left,
             right, value, out, n_out):
    """Sum of the leaf values of the trees whose bootstrap left row ``i`` out (and their number).

    Trees with ``bootstrapped[t] == 0`` saw every row (no row is out of their bag).
    """
    for i in prange(X.shape[0]):
        g = np.uint64(global_index[i])
        for c in range(value.shape[1]):
            out[i, c] = 0.0
        n_out[i] = 0
        for t in range(tree_offsets.shape[0] - 1):
            if bootstrapped[t] == 0 or _bootstrap_weight(_tree_stream(seed, trees[t]), g) != 0:
                continue
            leaf = _leaf_of(X, i, tree_offsets[t], feature, threshold, left, right)
            for c in range(value.shape[1]):
                out[i, c] += value[leaf, c]
            n_out[i] += 1
