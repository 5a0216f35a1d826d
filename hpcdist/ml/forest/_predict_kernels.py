"""Kernels of prediction: leaf values averaged over trees (:mod:`.tree`), out-of-bag sums."""
import numpy as np

from ..._numba import njit, prange
from ._hash_kernels import bootstrap_weight
from ._kernel_flags import EXACT, EXACT_PARALLEL

__all__ = ["LANES", "forest_mean_values", "oob_sums"]


@njit(**EXACT)
def _leaf_of(X, i, tree_base, feature, threshold, left, right):
    node = 0
    while feature[tree_base + node] >= 0:
        if X[i, feature[tree_base + node]] <= threshold[tree_base + node]:
            node = left[tree_base + node]
        else:
            node = right[tree_base + node]
    return tree_base + node


#: Rows traversed together, each one step deeper in turn: their cache misses overlap.
LANES = 8


@njit(**EXACT)
def _leaves_of(rows, lo, hi, tree_base, links, thresholds, node):
    """Leaves of rows ``lo:hi`` (at most :data:`LANES`) in one tree, into ``node``."""
    for j in range(hi - lo):
        node[j] = tree_base
    moving = True
    while moving:
        moving = False
        for j in range(hi - lo):
            at = node[j]
            link = links[at]
            if link >= 0:
                moving = True
                if rows[lo + j, link & 0xFFFFFFFF] <= thresholds[at]:
                    node[j] = at + 1
                else:
                    node[j] = tree_base + (link >> 32)


@njit(**EXACT_PARALLEL)
def forest_mean_values(rows, tree_offsets, links, thresholds, value, block, out):
    """``out[i]`` = the mean over trees of the value of row ``i``'s leaf (trees in order).

    ``links[n]``: ``right << 32 | feature`` of a split node ``n`` (its left
    child is ``n + 1``, trees being in preorder), -1 at leaves; a row goes
    left when ``rows[i, feature] <= thresholds[n]``: raw values against
    float thresholds, or bins against bin thresholds. Blocks of ``block``
    rows in parallel; within a block, tree after tree, so that a tree's
    nodes are reused from cache by many rows.
    """
    n_rows, n_values = rows.shape[0], value.shape[1]
    n_trees = tree_offsets.shape[0] - 1
    for b in prange((n_rows + block - 1) // block):
        start, stop = b * block, min(n_rows, (b + 1) * block)
        node = np.empty(LANES, dtype=np.int64)
        out[start:stop, :] = 0.0
        for t in range(n_trees):
            for lo in range(start, stop, LANES):
                hi = min(stop, lo + LANES)
                _leaves_of(rows, lo, hi, tree_offsets[t], links, thresholds, node)
                for j in range(hi - lo):
                    for c in range(n_values):
                        out[lo + j, c] += value[node[j], c]
        for i in range(start, stop):
            for c in range(n_values):
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
            if bootstrapped[t] == 0 or bootstrap_weight(seed, trees[t], g) != 0:
                continue
            leaf = _leaf_of(X, i, tree_offsets[t], feature, threshold, left, right)
            for c in range(value.shape[1]):
                out[i, c] += value[leaf, c]
            n_out[i] += 1
