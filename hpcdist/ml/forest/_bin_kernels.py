"""The Numba kernel that bins raw feature values to uint8 (:mod:`hpcdist.ml.forest.binning`)."""
from ..._numba import njit, prange
from ._kernel_flags import EXACT_PARALLEL

__all__ = ["bin_columns"]


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
