"""Initial centers for distributed K-means: k-means++, k-means||, random rows.

Every function is collective: all ranks call it with their own rows and the
same random generator state, and all get the same centers. Random draws are
made on global row indices (rank ``r`` holds the global rows
``offset_r .. offset_r + n_r``), so the centers do not depend on how the rows
are split over the ranks (up to floating-point rounding in sums).
"""

import numpy as np
from sklearn.cluster import KMeans as SKLearnKMeans
from sklearn.cluster import kmeans_plusplus as sklearn_kmeans_plusplus

from ..._arrays import array_module, to_host
from ...comm import allgather, allreduce, broadcast
from .kernels import assign, candidate_potentials

__all__ = ["Shards", "random_rows", "kmeans_plusplus", "kmeans_parallel"]

#: rows per independently seeded block of k-means|| sampling uniforms
_SAMPLING_BLOCK = 4096
#: k-means|| (Bahmani et al. 2012): rounds and oversampling factor l / k
PARALLEL_ROUNDS = 5
PARALLEL_OVERSAMPLING = 2.0
#: weighted Lloyd iterations on the k-means|| candidates (as Spark MLlib's LocalKMeans)
_RECLUSTER_MAX_ITER = 30


class Shards:
    """Where this rank's rows sit in the global row order.

    Parameters
    ----------
    counts : list of int
        Rows on every rank (rank order).
    rank : int
    """

    def __init__(self, counts, rank):
        self.counts = [int(c) for c in counts]
        self.bounds = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.offset = int(self.bounds[rank])
        self.n_local = self.counts[rank]
        self.n_global = int(self.bounds[-1])


def rows_at(X, indices, shards, ctx):
    """The rows with global ``indices``, on every rank (owners fill them in; one allreduce).

    Returns
    -------
    ndarray of shape (len(indices), n_features), X's dtype
    """
    indices = np.asarray(indices, dtype=np.int64)
    rows = np.zeros((len(indices), X.shape[1]), dtype=np.float64)
    local = (indices >= shards.offset) & (indices < shards.offset + shards.n_local)
    if local.any():
        xp = array_module(X)
        rows[local] = to_host(X[xp.asarray(indices[local] - shards.offset)])
    if ctx.size > 1:
        allreduce(rows, out=rows, ctx=ctx)  # each row has one owner: the sum is exact
    return rows.astype(X.dtype)


def _distinct_indices(rng, n, k):
    """``k`` distinct integers in ``[0, n)`` (Floyd's algorithm: O(k) draws)."""
    chosen, order = set(), []
    for top in range(n - k, n):
        t = int(rng.randint(0, top + 1))
        pick = top if t in chosen else t
        chosen.add(pick)
        order.append(pick)
    return np.asarray(order, dtype=np.int64)


def random_rows(X, n_clusters, rng, shards, ctx):
    """``n_clusters`` distinct rows drawn uniformly from the global data."""
    return rows_at(X, _distinct_indices(rng, shards.n_global, n_clusters), shards, ctx)


def _owners(values, rank_totals, counts):
    """For each value in ``[0, sum(rank_totals)]``: the rank whose cumulative span holds it,
    and the value's remainder within that rank (ranks without rows are skipped)."""
    prefix = np.concatenate([[0.0], np.cumsum(rank_totals)])
    holders = [r for r, c in enumerate(counts) if c > 0]
    owners = np.empty(len(values), dtype=np.int64)
    for t, value in enumerate(values):
        owner = holders[-1]
        for r in holders:
            if prefix[r + 1] >= value:
                owner = r
                break
        owners[t] = owner
    return owners, values - prefix[owners]


def kmeans_plusplus(X, n_clusters, rng, shards, ctx, n_local_trials=None):
    """Greedy k-means++ (D^2 sampling with ``2 + log(k)`` trials per center), distributed.

    As scikit-learn's ``_kmeans_plusplus``: the first center is a uniformly
    drawn row; each next center is the best (lowest global potential) of
    ``n_local_trials`` rows drawn with probability proportional to their
    squared distance to the nearest chosen center. Two collectives per center.

    Parameters
    ----------
    X : ndarray of shape (n_local, n_features)
    n_clusters : int
    rng : numpy.random.RandomState
        The same state on every rank.
    shards : Shards
    ctx : Context

    Returns
    -------
    ndarray of shape (n_clusters, n_features), X's dtype
    """
    n_local, n_features = X.shape
    xp = array_module(X)
    if n_local_trials is None:
        n_local_trials = 2 + int(np.log(n_clusters))
    centers = np.empty((n_clusters, n_features), dtype=X.dtype)
    centers[0] = rows_at(X, [rng.randint(shards.n_global)], shards, ctx)[0]
    out = xp.empty((1, n_local))
    local = candidate_potentials(X, centers[:1], xp.full(n_local, np.inf), out)
    closest = out[0].copy()
    rank_potentials = allgather(local.reshape(1, 1), ctx=ctx)[:, 0]
    out = xp.empty((n_local_trials, n_local))
    for c in range(1, n_clusters):
        total = float(rank_potentials.sum())
        values = rng.uniform(size=n_local_trials) * total
        owners, remainders = _owners(values, rank_potentials, shards.counts)
        candidates = _sampled_rows(X, owners, remainders, closest, ctx)
        local = candidate_potentials(X, candidates, closest, out)
        table = allgather(local.reshape(1, -1), ctx=ctx)  # (size, n_local_trials)
        best = int(np.argmin(table.sum(axis=0)))
        rank_potentials = table[:, best].copy()
        closest = out[best].copy()
        centers[c] = candidates[best]
    return centers


def _sampled_rows(X, owners, remainders, closest, ctx):
    """The rows where the cumulative sum of ``closest`` first reaches each remainder, on
    the rank that owns them; every rank gets them all (one allreduce)."""
    rows = np.zeros((len(owners), X.shape[1]), dtype=np.float64)
    mine = owners == ctx.rank
    if mine.any():
        xp = array_module(X)
        picks = xp.searchsorted(xp.cumsum(closest), xp.asarray(remainders[mine]))
        rows[mine] = to_host(X[xp.minimum(picks, len(X) - 1)])
    if ctx.size > 1:
        allreduce(rows, out=rows, ctx=ctx)
    return rows.astype(X.dtype)


def _row_uniforms(seed, round_index, start, stop):
    """Uniforms for global rows ``start:stop``, the same whatever the rank layout."""
    out = np.empty(stop - start)
    for block in range(start // _SAMPLING_BLOCK, -(-stop // _SAMPLING_BLOCK)):
        first = block * _SAMPLING_BLOCK
        values = np.random.default_rng([seed, round_index, block]).random(_SAMPLING_BLOCK)
        lo, hi = max(start, first), min(stop, first + _SAMPLING_BLOCK)
        out[lo - start:hi - start] = values[lo - first:hi - first]
    return out


def kmeans_parallel(X, n_clusters, rng, shards, ctx, rounds=PARALLEL_ROUNDS,
                    oversampling=PARALLEL_OVERSAMPLING):
    """k-means|| (Bahmani et al., "Scalable K-Means++", 2012), distributed.

    A uniformly drawn first row; then ``rounds`` rounds in which every row is
    kept independently with probability ``min(1, l d^2(x) / phi)``, ``l =
    oversampling * n_clusters`` (about ``l`` new candidates per round);
    candidates are weighted by the rows nearest to them; rank 0 reclusters
    the weighted candidates into ``n_clusters`` centers (weighted k-means++
    then weighted Lloyd, with scikit-learn) and broadcasts them.

    Parameters are those of :func:`kmeans_plusplus`.
    """
    n_local, n_features = X.shape
    xp = array_module(X)
    l_factor = oversampling * n_clusters
    seed = int(rng.randint(np.iinfo(np.int32).max))
    candidates = rows_at(X, [rng.randint(shards.n_global)], shards, ctx)
    out = xp.empty((1, n_local))
    local = candidate_potentials(X, candidates, xp.full(n_local, np.inf), out)
    closest = out[0].copy()
    phi = float(allreduce(np.array([local[0]]), ctx=ctx)[0])
    labels = xp.empty(n_local, dtype=xp.int32)
    distances = xp.empty(n_local)
    for round_index in range(rounds):
        if not phi > 0:
            break
        uniforms = xp.asarray(_row_uniforms(seed, round_index, shards.offset,
                                            shards.offset + n_local))
        keep = xp.flatnonzero(uniforms * phi < l_factor * closest)
        new = allgather(np.ascontiguousarray(to_host(X[keep]), dtype=np.float64), ctx=ctx)
        if not len(new):
            continue
        new = new.astype(X.dtype)
        assign(X, new, labels, sq_distances=distances)
        xp.minimum(closest, distances, out=closest)
        candidates = np.concatenate([candidates, new])
        phi = float(allreduce(np.array([float(closest.sum())]), ctx=ctx)[0])
    if len(candidates) <= n_clusters:  # few distinct rows: top up with random rows
        extra = random_rows(X, n_clusters - len(candidates), rng, shards, ctx)
        return np.concatenate([candidates, extra])
    weights = np.zeros(len(candidates))
    assign(X, candidates, labels, counts=weights)
    if ctx.size > 1:
        allreduce(weights, out=weights, ctx=ctx)
    recluster_seed = int(rng.randint(np.iinfo(np.int32).max))
    centers = np.empty((n_clusters, n_features), dtype=X.dtype)
    if ctx.rank == 0:
        centers[...] = _recluster(candidates, weights, n_clusters, recluster_seed)
    if ctx.size > 1:
        broadcast(centers, root=0, ctx=ctx)
    return centers


def _recluster(candidates, weights, n_clusters, seed):
    """Weighted k-means++ then weighted Lloyd on the candidates (rank 0 only)."""
    used = weights > 0
    if used.sum() <= n_clusters:  # every weighted candidate becomes a center
        order = np.argsort(~used, kind="stable")[:n_clusters]
        return candidates[order]
    points, weights = candidates[used], weights[used]
    centers, _ = sklearn_kmeans_plusplus(points, n_clusters, sample_weight=weights,
                                         random_state=seed)
    model = SKLearnKMeans(n_clusters, init=centers, n_init=1, max_iter=_RECLUSTER_MAX_ITER,
                          algorithm="lloyd").fit(points, sample_weight=weights)
    return model.cluster_centers_.astype(candidates.dtype)
