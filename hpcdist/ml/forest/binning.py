"""Global quantile bin edges, and the data binned to uint8 once.

The edges come from a sample of every rank's rows, chosen by a hash of the
global row index (:func:`~hpcdist.ml.forest.sampling.row_sample`), gathered
in rank order (= global order) and reduced identically on every rank, so
they do not depend on the number of ranks.

Per feature, as scikit-learn's ``HistGradientBoosting``: with at most
``max_bins`` distinct sampled values the edges are the midpoints between
consecutive ones (exact binning); otherwise the sample's quantiles at
``max_bins`` equal steps (midpoint interpolation), duplicates dropped. ``bin(x)`` is the number of
edges below ``x``, so ``bin(x) <= t`` exactly when ``x <= edges[t]``: a split
on bins is a split on raw values at ``edges[t]``, and prediction compares raw
values with that threshold.
"""
import numpy as np

from ...comm import allgather, allgather_object, alltoall
from ._bin_kernels import bin_columns
from .sampling import row_sample

__all__ = ["BinEdges", "find_bin_edges", "SAMPLE_SIZE", "FEATURES_PER_PASS"]

#: rows sampled (over all ranks) to place the bin edges
SAMPLE_SIZE = 100_000
#: features whose sample columns a rank receives at a time
FEATURES_PER_PASS = 2


class BinEdges:
    """Bin edges of every feature, flat.

    Attributes
    ----------
    edges : ndarray of float64, shape (n_edges,)
        Feature ``f``'s sorted edges are ``edges[offsets[f]:offsets[f + 1]]``.
    offsets : ndarray of int64, shape (n_features + 1,)
    n_bins : ndarray of int64, shape (n_features,)
        ``len(edges of f) + 1``.
    """

    def __init__(self, edges, offsets):
        self.edges = np.ascontiguousarray(edges, dtype=np.float64)
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self.n_bins = np.diff(self.offsets) + 1

    @property
    def n_features(self):
        return len(self.offsets) - 1

    def feature(self, f):
        """The edges of feature ``f``."""
        return self.edges[self.offsets[f]:self.offsets[f + 1]]

    def threshold(self, features, bins):
        """Raw thresholds ``edges_f[bin]`` of splits (``features`` >= 0)."""
        return self.edges[self.offsets[features] + bins]

    def transform(self, X):
        """``X`` binned: uint8 array of X's shape (rows in parallel with Numba threads)."""
        out = np.empty(X.shape, dtype=np.uint8)
        if X.size:
            bin_columns(X, self.edges, self.offsets, out)
        return out


def _feature_edges(column, max_bins):
    """Edges of one feature from its sorted sample."""
    if len(column) == 0:
        return np.empty(0)
    distinct = column[np.concatenate([[True], column[1:] != column[:-1]])]
    if len(distinct) <= max_bins:
        return 0.5 * distinct[:-1] + 0.5 * distinct[1:]
    position = np.arange(1, max_bins) * (len(column) - 1) / max_bins
    low = column[np.floor(position).astype(np.int64)]
    high = column[np.ceil(position).astype(np.int64)]
    return np.unique(0.5 * low + 0.5 * high)


def find_bin_edges(ctx, X, global_index, n_global, max_bins, seed, sample_size=SAMPLE_SIZE):
    """Bin edges from a rank-count independent sample of all ranks' rows (collective).

    Rank ``f % size`` places the edges of feature ``f`` from the whole
    sample's column, and the edges are shared. The columns travel
    :data:`FEATURES_PER_PASS` per rank at a time (one alltoall each), so that
    no rank holds more of the sample than that.

    Parameters
    ----------
    ctx : Context
    X : ndarray of shape (n_local, n_features)
        This rank's rows.
    global_index : ndarray of int64, shape (n_local,)
    n_global : int
    max_bins : int
        At most this many bins (``<= 256``) per feature.
    seed : uint64
    sample_size : int

    Returns
    -------
    BinEdges
    """
    rows = np.flatnonzero(row_sample(seed, global_index, n_global, sample_size))
    n_features, size, rank = X.shape[1], ctx.size, ctx.rank
    sampled = [len(rows)] if size == 1 else [
        int(n) for n in allgather(np.array([len(rows)], dtype=np.int64), ctx=ctx)]
    mine = {}
    step = FEATURES_PER_PASS * size
    for start in range(0, n_features, step):
        chunk = np.arange(start, min(start + step, n_features))
        local = np.asarray(X[np.ix_(rows, chunk)], dtype=np.float64)
        # feature chunk[i] is rank (i % size)'s: its columns go there, one after the other
        parts = [local[:, r::size].T.ravel() for r in range(size)]
        received = parts[0] if size == 1 else alltoall(
            np.concatenate(parts), counts=[len(part) for part in parts], ctx=ctx)
        features = chunk[rank::size]
        blocks = np.split(received, np.cumsum([len(features) * n for n in sampled])[:-1])
        columns = np.concatenate([block.reshape(len(features), n)
                                  for block, n in zip(blocks, sampled)], axis=1)
        for f, column in zip(features, columns):
            mine[int(f)] = _feature_edges(np.sort(column), max_bins)
    if size > 1:
        for theirs in allgather_object(mine, ctx=ctx):
            mine.update(theirs)
    edges = [mine[f] for f in range(n_features)]
    offsets = np.zeros(n_features + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in edges])
    return BinEdges(np.concatenate(edges) if edges else np.empty(0), offsets)
