"""The Numba kernel that bins raw feature values to uint8 (:mod:`hpcdist.ml.forest.binning`)."""
from ..._numba import in_threads, njit
from ._kernel_flags import EXACT, HELPER

__all__ = ["bin_columns"]

#: Rows binned together, feature by feature (a feature's edges stay in the L1 cache).
ROW_BLOCK = 512


@njit(**HELPER)
def _bin_rows(column, edges, out_column):
    """``out_column[i]`` = the number of ``edges`` below ``column[i]``: every edge is
    compared (the comparisons are independent and vectorize)."""
    n = edges.shape[0]
    for i in range(column.shape[0]):
        x = column[i]
        b = 0
        for e in range(n):
            b += edges[e] < x
        out_column[i] = b


def bin_columns(X, edges, edge_offsets, out):
    """``out[i, f]`` = the number of edges of feature ``f`` that are ``< X[i, f]``.

    ``edges[edge_offsets[f]:edge_offsets[f + 1]]`` are feature ``f``'s sorted
    bin edges, so ``bin <= t`` exactly when ``x <= edges[t]``. Counting every
    edge below the value (at most 255) has no branches to mispredict, and so
    beats a binary search. Blocks of :data:`ROW_BLOCK` rows in parallel
    (:func:`~hpcdist._numba.in_threads`).
    """
    in_threads(_bin_blocks, (X.shape[0] + ROW_BLOCK - 1) // ROW_BLOCK, X, edges, edge_offsets,
               out)


@njit(**EXACT)
def _bin_blocks(X, edges, edge_offsets, out, first, stop):
    """Blocks ``first:stop`` of :data:`ROW_BLOCK` rows of :func:`bin_columns`."""
    n_rows = X.shape[0]
    for block in range(first, stop):
        start = block * ROW_BLOCK
        end = min(start + ROW_BLOCK, n_rows)
        for f in range(X.shape[1]):
            _bin_rows(X[start:end, f], edges[edge_offsets[f]:edge_offsets[f + 1]],
                      out[start:end, f])
