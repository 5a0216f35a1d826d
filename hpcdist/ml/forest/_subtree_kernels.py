"""Kernels that grow whole subtrees on one rank, depth first (the small nodes of :mod:`.grow`).

A subtree's rows are first copied into private contiguous arrays, which its
splits then reorder in place, so that every node's rows are contiguous and
histograms stream through memory. A node visits its features a chunk at a
time: one pass over a node's rows fills the chunk's dense histograms (a
node under :data:`TRACKED_ROWS` rows also marks each feature's occupied
bins in a bitmap, so that only those are read back and cleared), while a
node of at most :data:`SMALL_NODE_ROWS` rows sorts its few rows by bin,
feature by feature. Splits
are ranked by the functions that level-wise growth uses too
(:mod:`._split_kernels`), so either path splits a node the same way.
"""
from collections import namedtuple

import numpy as np

from ..._numba import in_threads, njit
from ._hash_kernels import LEFT, RIGHT, child_key, draw_feature
from ._kernel_flags import EXACT, HELPER, INLINED
from ._split_kernels import (
    SQUARED_ERROR,
    best_threshold,
    compact_histogram,
    impurity_decrease,
    stats_weight,
)

__all__ = ["SMALL_NODE_ROWS", "FEATURE_CHUNK", "SubtreeTasks", "SubtreeNodes", "new_subtree_nodes",
           "grow_subtrees", "grow_whole_trees"]

#: Nodes of at most this many rows sort their rows per feature instead of filling a histogram.
SMALL_NODE_ROWS = 16
#: Features histogrammed together in one pass over a node's rows.
FEATURE_CHUNK = 16
#: Nodes of fewer rows mark each feature's occupied bins while they fill its histogram.
TRACKED_ROWS = 1024
# 64-bit words of one feature's bitmap of occupied bins (max_bins <= 256)
_BIT_WORDS = 4
# the index of a 64-bit word's lowest set bit: de Bruijn multiplication of x ^ (x - 1)
_DE_BRUIJN = np.array([0, 47, 1, 56, 48, 27, 2, 60, 57, 49, 41, 37, 28, 16, 3, 61, 54, 58, 35,
                       52, 50, 42, 21, 44, 38, 32, 29, 23, 17, 11, 4, 62, 46, 55, 26, 59, 40, 36,
                       15, 53, 34, 51, 20, 43, 31, 22, 10, 45, 25, 39, 14, 33, 19, 30, 9, 24, 13,
                       18, 8, 12, 7, 6, 5, 63], dtype=np.int64)
_DE_BRUIJN_MAGIC = np.uint64(0x03F79D71B4CB0A89)
# int64 constants where an int literal would compile the helper it is passed to once more
_ZERO = np.int64(0)
_NO_PARENT = np.int64(-1)

#: The subtrees to grow (int64 arrays but ``key``, uint64): subtree ``t`` owns
#: ``rows[lo[t]:hi[t]]``, its root has key ``key[t]`` and depth ``depth[t]``, and its nodes
#: go to a :data:`SubtreeNodes` from ``base[t]`` on (room for ``2 * (hi[t] - lo[t]) - 1``).
SubtreeTasks = namedtuple("SubtreeTasks", ["lo", "hi", "key", "depth", "base"])
#: The grown nodes, each subtree's in preorder (the left child of a split is the next
#: node): split ``feature`` and ``bin`` (-1 at leaves), the ``right`` child counted from
#: the subtree's first node (-1 at leaves), ``stats`` (n, D) and impurity ``decrease``.
SubtreeNodes = namedtuple("SubtreeNodes", ["feature", "bin", "right", "stats", "decrease"])

# One subtree's working arrays. Its rows: binned features padded to whole 64-bit words
# (``words`` and ``bins`` view the same memory), targets and weights as int64.
_Rows = namedtuple("_Rows", ["bins", "words", "target", "weight"])
# The nodes waiting to be grown (a stack); ``parent`` >= 0 links a right child.
_Stack = namedtuple("_Stack", ["lo", "hi", "depth", "key", "parent", "stats"])
# The split search's buffers: the node's feature order, the chunk of features drawn and
# their dense histograms with bitmaps of occupied bins, sort keys of a small node, one
# feature's occupied bins and their stats, the running left / right / candidate stats.
_Scratch = namedtuple("_Scratch", ["order", "chunk", "hist", "bits", "sort_keys",
                                   "cbins", "cstats", "left", "right", "candidate"])


# -- working arrays ------------------------------------------------------------------------

@njit(**EXACT)
def new_subtree_nodes(total, channels):
    """A :data:`SubtreeNodes` with room for ``total`` nodes (contents undefined).

    Allocated by Numba, not NumPy: NumPy asks for transparent huge pages for
    blocks of 4 MiB and more, and each subtree's region, sized for its worst
    case (``2m - 1`` nodes) but a few percent used, then faulted in whole 2 MiB
    pages (zeroed) where 4 KiB ones do, a noticeable share of a fit's time.
    """
    return SubtreeNodes(np.empty(total, dtype=np.int64), np.empty(total, dtype=np.int64),
                        np.empty(total, dtype=np.int64),
                        np.empty((total, channels), dtype=np.int64),
                        np.empty(total, dtype=np.float64))


@njit(**HELPER)
def _new_rows(m, n_features):
    """A :data:`_Rows` for ``m`` rows, padded to whole 64-bit words (a swap moves a few
    words, not every byte); the padding is zero."""
    n_words = (n_features + 7) // 8
    packed = np.zeros(m * n_words, dtype=np.uint64)
    return _Rows(packed.view(np.uint8).reshape((m, n_words * 8)), packed.reshape((m, n_words)),
                 np.empty(m, dtype=np.int64), np.empty(m, dtype=np.int64))


@njit(**HELPER)
def _put_row(own, r, Xb, target, i, weight):
    """Row ``i`` of ``Xb`` and ``target`` with ``weight`` as row ``r`` of ``own``."""
    for f in range(Xb.shape[1]):
        own.bins[r, f] = Xb[i, f]
    own.target[r] = target[i]
    own.weight[r] = weight


@njit(**HELPER)
def _copy_rows(Xb, target, rows, weights, lo, hi):
    """The rows ``rows[lo:hi]`` with weights ``weights[lo:hi]``, as a private :data:`_Rows`."""
    own = _new_rows(hi - lo, Xb.shape[1])
    for r in range(hi - lo):
        _put_row(own, r, Xb, target, rows[lo + r], weights[lo + r])
    return own


@njit(**HELPER)
def _copy_in_bag(Xb, target, weights, m):
    """The ``m`` rows of nonzero ``weights`` (one per row of ``Xb``), as a private
    :data:`_Rows`."""
    own = _new_rows(m, Xb.shape[1])
    r = _ZERO
    for i in range(weights.shape[0]):
        if weights[i] != 0:
            _put_row(own, r, Xb, target, i, weights[i])
            r += 1
    return own


@njit(**HELPER)
def _root_stack(own, key, depth, max_depth, D, regression):
    """A :data:`_Stack` holding the root (key ``key``, depth ``depth``) of the subtree of
    rows ``own``, with room for the most nodes it can wait with (one a level, and the
    levels are fewer than the rows and than ``max_depth - depth``)."""
    m = own.target.shape[0]
    capacity = min(m, max(0, max_depth - depth)) + 2
    stack = _Stack(np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.int64),
                   np.empty(capacity, dtype=np.int64), np.empty(capacity, dtype=np.uint64),
                   np.empty(capacity, dtype=np.int64), np.zeros((capacity, D), dtype=np.int64))
    _push(stack, _ZERO, _ZERO, m, depth, key, _NO_PARENT)
    for r in range(m):
        if regression:
            stack.stats[0, 0] += own.weight[r] * own.target[r]
            stack.stats[0, 1] += own.weight[r]
        else:
            stack.stats[0, own.target[r]] += own.weight[r]
    return stack


@njit(**HELPER)
def _new_scratch(settings):
    D, max_bins = settings.channels, settings.max_bins
    return _Scratch(np.empty(settings.n_bins.shape[0], dtype=np.int64),
                    np.empty(FEATURE_CHUNK, dtype=np.int64),
                    np.zeros(FEATURE_CHUNK * max_bins * D, dtype=np.int64),
                    np.zeros(FEATURE_CHUNK * _BIT_WORDS, dtype=np.uint64),
                    np.empty(SMALL_NODE_ROWS, dtype=np.int64),
                    np.empty(max_bins, dtype=np.int64), np.empty((max_bins, D), dtype=np.int64),
                    np.empty(D, dtype=np.int64), np.empty(D, dtype=np.int64),
                    np.empty(D, dtype=np.int64))


# -- one node's split search -------------------------------------------------------------------
# The helpers called per feature take plain arrays: a record passed to a function that is
# not inlined is copied field by field at every call, which showed in the time of a fit.

@njit(**HELPER)
def _draw_chunk(key, j, max_features, order, chunk):
    """Draw the node's next features ``j, j + 1, ...`` into ``chunk``; returns how many.

    At most :data:`FEATURE_CHUNK`, and while ``j < max_features`` not past it.
    """
    size = min(FEATURE_CHUNK, order.shape[0] - j)
    if j < max_features:
        size = min(size, max_features - j)
    for s in range(size):
        chunk[s] = draw_feature(key, order, j + s)
    return size


@njit(**HELPER)
def _chunk_histograms(rows, lo, hi, chunk, size, max_bins, D, regression, hist, bits):
    """Dense histograms of features ``chunk[:size]`` over rows ``lo:hi`` in one pass.

    Feature ``chunk[s]`` fills ``hist[s * max_bins * D:]`` (zero on entry). A
    node of fewer than :data:`TRACKED_ROWS` rows also sets the bits of its
    occupied bins in ``bits[s * _BIT_WORDS:]`` (zero on entry); a larger one
    skips that (scanning and clearing every bin costs less there).
    """
    if hi - lo >= TRACKED_ROWS:
        for r in range(lo, hi):
            w = rows.weight[r]
            y = rows.target[r]
            for s in range(size):
                at = (s * max_bins + np.int64(rows.bins[r, chunk[s]])) * D
                if regression:
                    hist[at] += w * y
                    hist[at + 1] += w
                else:
                    hist[at + y] += w
        return
    for r in range(lo, hi):
        w = rows.weight[r]
        y = rows.target[r]
        for s in range(size):
            b = np.int64(rows.bins[r, chunk[s]])
            bits[s * _BIT_WORDS + (b >> 6)] |= np.uint64(1) << np.uint64(b & 63)
            at = (s * max_bins + b) * D
            if regression:
                hist[at] += w * y
                hist[at + 1] += w
            else:
                hist[at + y] += w


@njit(**HELPER)
def _feature_bins(hist, s, bits, tracked, max_bins, D, regression, cbins, cstats):
    """Feature ``s``'s occupied bins (weight > 0) of a chunk filled by
    :func:`_chunk_histograms`, in ascending order with their stats; returns their count
    and leaves its histogram and bitmap zero. ``tracked``: the node marked its bins."""
    start = s * max_bins * D
    if not tracked:
        k = compact_histogram(hist, start, 0, max_bins - 1, D, regression, cbins, cstats)
        for at in range(start, start + max_bins * D):
            hist[at] = 0
        return k
    k = 0
    for word in range(_BIT_WORDS):
        x = bits[s * _BIT_WORDS + word]
        bits[s * _BIT_WORDS + word] = 0
        while x != 0:
            b = word * 64 + _DE_BRUIJN[((x ^ (x - np.uint64(1))) * _DE_BRUIJN_MAGIC)
                                       >> np.uint64(58)]
            x &= x - np.uint64(1)
            at = start + b * D
            if regression:  # (sum of w * y, sum of w)
                weight = hist[at + 1]
            else:           # the weight of each class (all >= 0)
                weight = 0
                for c in range(D):
                    weight += hist[at + c]
            cbins[k] = b
            for c in range(D):
                cstats[k, c] = hist[at + c]
                hist[at + c] = 0
            k += weight > 0  # a bin of rows of weight 0 only is left out, as by compaction
    return k


@njit(**HELPER)
def _sorted_bins(rows, lo, hi, f, D, regression, keys, cbins, cstats):
    """Occupied bins of feature ``f`` over the few rows ``lo:hi`` (insertion sort by bin)."""
    m = hi - lo
    for r in range(m):
        key = (np.int64(rows.bins[lo + r, f]) << 32) | r
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
        w = rows.weight[r]
        if regression:
            cstats[k - 1, 0] += w * rows.target[r]
            cstats[k - 1, 1] += w
        else:
            cstats[k - 1, rows.target[r]] += w
    return k


@njit(**INLINED)
def _best_split(rows, lo, hi, key, total, settings, scratch, best_left):
    """Best split of the node of rows ``lo:hi``, key ``key`` and stats ``total``.

    The node visits ``max_features`` features of its random order, and on
    until one is not constant; a large node histograms a chunk of them in
    one pass over its rows. Returns ``(score, feature, bin)``, feature -1
    when every visited feature is constant or no threshold leaves
    ``min_leaf`` on both sides; ``best_left`` receives the left side's stats.
    """
    order, chunk, hist, bits, sort_keys, cbins, cstats, left, right, candidate = scratch
    max_features, max_bins, D = settings.max_features, settings.max_bins, settings.channels
    criterion = settings.criterion
    regression = criterion == SQUARED_ERROR
    n_features = order.shape[0]
    for f in range(n_features):
        order[f] = f
    best_score = -np.inf
    best_feature = -1
    best_bin = -1
    found = False
    dense = hi - lo > SMALL_NODE_ROWS
    tracked = hi - lo < TRACKED_ROWS
    j = _ZERO
    while j < n_features and not (found and j >= max_features):
        size = _draw_chunk(key, j, max_features, order, chunk)
        if dense:
            _chunk_histograms(rows, lo, hi, chunk, size, max_bins, D, regression, hist, bits)
        for s in range(size):
            if dense:
                n = _feature_bins(hist, s, bits, tracked, max_bins, D, regression, cbins,
                                  cstats)
            else:
                n = _sorted_bins(rows, lo, hi, chunk[s], D, regression, sort_keys, cbins, cstats)
            if n < 2:
                continue
            score, b = best_threshold(cbins, cstats, n, total, criterion, settings.min_leaf, left,
                                      right, candidate)
            if score > best_score:
                best_score = score
                best_feature = chunk[s]
                best_bin = b
                for c in range(D):  # loops, not slices: no shape check to compile
                    best_left[c] = candidate[c]
            found = True
            if j + s >= max_features:  # the continued draw stops at a non-constant one
                break
        if dense and found and j + size > max_features:
            for s in range(size):  # clear what the early stop left behind (the features
                # read already are zero: little work)
                _feature_bins(hist, s, bits, tracked, max_bins, D, regression, cbins, cstats)
        j += size
    return best_score, best_feature, best_bin


# -- the subtree ---------------------------------------------------------------------------

@njit(**HELPER)
def _is_leaf(total, depth, settings):
    """The stopping rules that need no split search: depth, too few rows, a single class."""
    regression = settings.criterion == SQUARED_ERROR
    w = stats_weight(total, regression)
    if depth >= settings.max_depth or w < settings.min_split or w < 2 * settings.min_leaf:
        return True
    if regression:
        return False
    classes = 0
    for c in range(total.shape[0]):
        if total[c] > 0:
            classes += 1
    return classes <= 1


@njit(**HELPER)
def _record_leaf(nodes, node, base, parent, stats):
    """Write ``node`` as a leaf with ``stats``; a right child is linked from ``parent`` >= 0."""
    if parent >= 0:
        nodes.right[parent] = node - base
    for c in range(stats.shape[0]):
        nodes.stats[node, c] = stats[c]
    nodes.feature[node] = -1
    nodes.bin[node] = -1
    nodes.right[node] = -1
    nodes.decrease[node] = 0.0


@njit(**HELPER)
def _partition_rows(rows, lo, hi, feature, threshold):
    """Reorder rows ``lo:hi``, those with ``bin <= threshold`` first; returns where they end."""
    i = lo
    j = hi - 1
    while i <= j:
        if rows.bins[i, feature] <= threshold:
            i += 1
        else:
            for k in range(rows.words.shape[1]):
                rows.words[i, k], rows.words[j, k] = rows.words[j, k], rows.words[i, k]
            rows.target[i], rows.target[j] = rows.target[j], rows.target[i]
            rows.weight[i], rows.weight[j] = rows.weight[j], rows.weight[i]
            j -= 1
    return i


@njit(**HELPER)
def _push(stack, top, lo, hi, depth, key, parent):
    """Put a node on the stack (its stats are the caller's to fill); returns the new top."""
    stack.lo[top] = lo
    stack.hi[top] = hi
    stack.depth[top] = depth
    stack.key[top] = key
    stack.parent[top] = parent
    return top + 1


@njit(**HELPER)
def _push_children(stack, top, node, cut, total, left_stats):
    """Replace the split node on top of the stack by its children.

    The right child (rows ``cut:hi``) goes first, so that the left one
    (rows ``lo:cut``) is grown next: nodes come out in preorder.
    """
    lo, hi, depth, key = stack.lo[top], stack.hi[top], stack.depth[top], stack.key[top]
    _push(stack, top, cut, hi, depth + 1, child_key(key, RIGHT), node)
    _push(stack, top + 1, lo, cut, depth + 1, child_key(key, LEFT), _NO_PARENT)
    for c in range(total.shape[0]):
        stack.stats[top, c] = total[c] - left_stats[c]
        stack.stats[top + 1, c] = left_stats[c]
    return top + 2


@njit(**INLINED)
def _grow_rows(own, key, depth, base, settings, nodes):
    """Grow the subtree of the private rows ``own`` (root key ``key`` at depth ``depth``)
    depth first into ``nodes`` from ``base`` on; returns its number of nodes."""
    D = settings.channels
    regression = settings.criterion == SQUARED_ERROR
    stack = _root_stack(own, key, depth, settings.max_depth, D, regression)
    scratch = _new_scratch(settings)
    total = np.empty(D, dtype=np.int64)
    best_left = np.empty(D, dtype=np.int64)
    top = 1
    n_nodes = 0
    while top > 0:
        top -= 1
        node = base + n_nodes
        n_nodes += 1
        for c in range(D):
            total[c] = stack.stats[top, c]
        _record_leaf(nodes, node, base, stack.parent[top], total)
        if _is_leaf(total, stack.depth[top], settings):
            continue
        score, feature, threshold = _best_split(own, stack.lo[top], stack.hi[top],
                                                stack.key[top], total, settings, scratch,
                                                best_left)
        if feature < 0 or (regression and not score > 0.0):
            continue
        nodes.feature[node] = feature
        nodes.bin[node] = threshold
        nodes.decrease[node] = impurity_decrease(score, total, stats_weight(total, regression),
                                                 settings.criterion)
        cut = _partition_rows(own, stack.lo[top], stack.hi[top], feature, threshold)
        top = _push_children(stack, top, node, cut, total, best_left)
    return n_nodes


@njit(**EXACT)
def _grow_subtree_range(Xb, target, rows, weights, tasks, settings, nodes, count, first, stop):
    """Grow subtrees ``first:stop`` of ``tasks`` into ``nodes`` (see :func:`grow_subtrees`)."""
    for t in range(first, stop):
        own = _copy_rows(Xb, target, rows, weights, tasks.lo[t], tasks.hi[t])
        count[t] = _grow_rows(own, tasks.key[t], tasks.depth[t], tasks.base[t], settings, nodes)


@njit(**EXACT)
def _grow_whole_range(Xb, target, weights, sizes, keys, base, settings, nodes, count, first,
                      stop):
    """Grow trees ``first:stop`` whole into ``nodes`` (see :func:`grow_whole_trees`)."""
    for t in range(first, stop):
        own = _copy_in_bag(Xb, target, weights[t], sizes[t])
        count[t] = _grow_rows(own, keys[t], _ZERO, base[t], settings, nodes)


def grow_whole_trees(Xb, target, weights, sizes, keys, base, settings, nodes, count):
    """Grow whole trees from every row (parallel over trees).

    Tree ``t`` grows from the ``sizes[t]`` rows of nonzero ``weights[t]``
    (uint8, one per row of ``Xb``), its root has key ``keys[t]``, and its
    nodes go to ``nodes`` from ``base[t]`` on; ``count[t]`` receives their number.
    """
    in_threads(_grow_whole_range, weights.shape[0], Xb, target, weights, sizes, keys, base,
                settings, nodes, count)


def grow_subtrees(Xb, target, rows, weights, tasks, settings, nodes, count):
    """Grow every subtree of ``tasks`` to the end (parallel over subtrees).

    Parameters
    ----------
    Xb : ndarray of uint8, shape (n_rows, n_features)
    target : ndarray of int64, shape (n_rows,)
    rows : ndarray of int64
        Rows of ``Xb`` and ``target``: subtree ``t`` owns ``rows[tasks.lo[t]:tasks.hi[t]]``.
    weights : ndarray of uint8, shape like ``rows``
        The bootstrap weight of each entry of ``rows``.
    tasks : SubtreeTasks
    settings : SplitSettings
    nodes : SubtreeNodes
        Receives the nodes.
    count : ndarray of int64, shape (n_tasks,)
        Receives the number of nodes of each subtree.

    ``rows`` and ``weights`` are read only.
    """
    in_threads(_grow_subtree_range, tasks.lo.shape[0], Xb, target, rows, weights, tasks,
                settings, nodes, count)
