"""Kernels of prediction: leaf values averaged over trees (:mod:`.tree`), out-of-bag sums."""
import numpy as np

from ..._numba import njit, prange
from ._hash_kernels import bootstrap_weight
from ._kernel_flags import EXACT, EXACT_PARALLEL

__all__ = ["forest_mean_values", "oob_sums"]


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
            if bootstrapped[t] == 0 or bootstrap_weight(seed, trees[t], g) != 0:
                continue
            leaf = _leaf_of(X, i, tree_offsets[t], feature, threshold, left, right)
            for c in range(value.shape[1]):
                out[i, c] += value[leaf, c]
            n_out[i] += 1
