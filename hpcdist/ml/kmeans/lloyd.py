"""The distributed Lloyd loop behind :class:`hpcdist.ml.KMeans` (no validation here).

One iteration is one fused kernel pass over this rank's rows
(:func:`hpcdist.ml.kmeans.kernels.lloyd_step`) and ONE packed allreduce of
``[sums (k*d), counts (k), inertia, changed labels]`` in float64. Everything
else (new centers, empty-cluster relocation, the shift, the convergence test)
is computed identically on every rank from the reduced values, so the centers
stay identical on all ranks without another message. Only an iteration that
leaves a cluster empty pays one more collective (an allgather of each rank's
farthest rows), as scikit-learn's ``_relocate_empty_clusters`` does in one
process.
"""

from collections import namedtuple

import numpy as np

from ..._arrays import array_module, to_host
from ...comm import allgather, allreduce
from .kernels import assign, column_moments, labelled_inertia, lloyd_step, row_squared_norms

__all__ = ["global_mean_variance", "LloydState", "lloyd_iteration", "lloyd_labels", "LloydStart",
           "LloydRun", "run_lloyd", "final_assignment", "same_clustering"]


def global_mean_variance(X, ctx):
    """Per-feature mean and (population) variance over the rows of all ranks.

    Each rank's count, mean and sum of squared deviations travel in one
    allgather and are combined with Chan et al.'s pairwise formula (no
    cancellation from sums of squares).

    Returns
    -------
    mean, variance : ndarray of float64, shape (n_features,)
    """
    n, d = X.shape
    mean, m2 = column_moments(X)
    table = allgather(np.concatenate([[float(n)], mean, m2])[None], ctx=ctx)
    counts, means, m2s = table[:, 0], table[:, 1:1 + d], table[:, 1 + d:]
    total = counts.sum()
    global_mean = (counts[:, None] * means).sum(axis=0) / total
    global_m2 = m2s.sum(axis=0) + (counts[:, None] * (means - global_mean) ** 2).sum(axis=0)
    return global_mean, global_m2 / total


class LloydState:
    """Buffers of one Lloyd run on this rank.

    Attributes
    ----------
    centers : ndarray of shape (k, d), X's dtype
        The current centers (in the centered coordinates the loop runs in).
    labels : ndarray of int32, shape (n_local,)
    packed : ndarray of float64, shape (k * d + k + 2,)
        The allreduce buffer; ``sums`` and ``counts`` are views of it.
    squared_norms : ndarray of float64, shape (n_local,)
        The rows' squared norms, for the inertia of every iteration.
    """

    def __init__(self, X, centers, labels=None):
        k, d = centers.shape
        self.centers = np.ascontiguousarray(centers, dtype=X.dtype)
        xp = array_module(X)
        self.labels = xp.full(len(X), -1, dtype=xp.int32) if labels is None else labels
        self.packed = np.zeros(k * d + k + 2)
        self.sums = self.packed[:k * d].reshape(k, d)
        self.counts = self.packed[k * d:k * d + k]
        self.squared_norms = row_squared_norms(X)


def lloyd_iteration(X, state, shards, ctx):
    """One Lloyd iteration: assign, reduce (one allreduce), update ``state.centers``.

    Returns
    -------
    inertia : float
        Global inertia of the centers *before* the update.
    n_changed : int
        Global number of rows whose label changed.
    shift : float
        Squared Frobenius norm of the center update.
    relocated : bool
        Whether empty clusters were moved to far rows.
    """
    packed = state.packed
    packed[:] = 0.0
    inertia, changed = lloyd_step(X, state.centers, state.labels, state.sums, state.counts,
                                  squared_norms=state.squared_norms)
    packed[-2] = inertia
    packed[-1] = changed
    if ctx.size > 1:
        allreduce(packed, out=packed, ctx=ctx)
    relocated = False
    if (state.counts == 0).any():
        _relocate_empty_clusters(X, state, shards, ctx)
        relocated = True
    counts = state.counts[:, None]
    new = np.where(counts > 0, state.sums / np.where(counts > 0, counts, 1.0), state.sums)
    shift = float(((new - state.centers.astype(np.float64)) ** 2).sum())
    state.centers = new.astype(X.dtype)
    return float(packed[-2]), int(packed[-1]), shift, relocated


def _relocate_empty_clusters(X, state, shards, ctx):
    """Move every empty cluster onto one of the globally farthest rows from their centers.

    scikit-learn's ``_relocate_empty_clusters_dense``: the ``n_empty`` rows
    farthest from their (old) centers, farthest first (ties: lowest global
    row), each leaves its cluster's sums and becomes a new cluster's only row.
    Labels are not changed. One allgather of each rank's candidates.
    """
    empty = np.flatnonzero(state.counts == 0)
    n_empty = len(empty)
    d = X.shape[1]
    n_local = len(X)
    take = min(n_empty, n_local)
    rows = np.empty((take, d + 3))
    if take:
        xp = array_module(X)
        centers = xp.asarray(state.centers)
        distances = ((X - centers[state.labels]).astype(xp.float64) ** 2).sum(axis=1)
        far = xp.argpartition(distances, n_local - take)[n_local - take:]
        rows[:, 0] = to_host(distances[far])
        rows[:, 1] = shards.offset + to_host(far)
        rows[:, 2] = to_host(state.labels[far])
        rows[:, 3:] = to_host(X[far])
    table = allgather(rows, ctx=ctx) if ctx.size > 1 else rows
    order = np.lexsort((table[:, 1], -table[:, 0]))[:n_empty]
    for cluster, row in zip(empty, table[order]):
        old = int(row[2])
        state.sums[old] -= row[3:]
        state.sums[cluster] = row[3:]
        state.counts[cluster] = 1.0
        state.counts[old] -= 1.0


def final_assignment(X, centers, labels, ctx):
    """Labels of the rows for ``centers`` and the global counts and inertia (one allreduce)."""
    k = len(centers)
    packed = np.zeros(k + 1)
    packed[-1] = assign(X, centers, labels, counts=packed[:k])
    if ctx.size > 1:
        allreduce(packed, out=packed, ctx=ctx)
    return packed[:k], float(packed[-1])


def lloyd_labels(X, centers):
    """The labels :func:`lloyd_iteration` gives this rank's rows for ``centers`` (no collective).

    The same fused kernel (:func:`lloyd_step`), so the labels are
    bitwise those of the loop (what a resumed run needs as its previous
    labels); its sums, counts and inertia are dropped.
    """
    xp = array_module(X)
    centers = np.ascontiguousarray(centers, dtype=X.dtype)
    k, d = centers.shape
    labels = xp.full(len(X), -1, dtype=xp.int32)
    # zero row norms: the inertia is dropped, so no pass over X to compute them
    lloyd_step(X, centers, labels, np.zeros((k, d)), np.zeros(k), squared_norms=xp.zeros(len(X)))
    return labels


#: Where :func:`run_lloyd` resumes a run: after ``n_iter`` iterations, the last of which
#: started from the centers ``previous`` (the current centers are ``centers_init``).
LloydStart = namedtuple("LloydStart", ["previous", "n_iter"])


class LloydRun(tuple):
    """:func:`run_lloyd`'s result ``(labels, inertia, centers, n_iter, counts)``.

    Attributes
    ----------
    strict : bool
        Ended because no label changed (the labels are those of ``previous``).
    cut : bool
        Ended by ``max_iter``, not converged.
    previous : ndarray of shape (k, d)
        The centers the last iteration started from (``centers`` before its update).
    """

    def __new__(cls, values, *, strict, cut, previous):
        run = super().__new__(cls, values)
        run.strict, run.cut, run.previous = strict, cut, previous
        return run


def run_lloyd(X, centers_init, shards, ctx, *, max_iter, tol, verbose=False, start=None,
              on_iteration=None):
    """scikit-learn's ``_kmeans_single_lloyd`` over ranks.

    Stops when no label changed anywhere (strict convergence) or when the
    squared center shift is ``<= tol``; without strict convergence the
    labels are recomputed for the final centers, as scikit-learn does. The
    final inertia is exact (``sum((x - c)^2)``), which costs one more pass
    and one more (scalar) allreduce.

    Parameters
    ----------
    start : LloydStart, optional
        Resume a run (``centers_init`` are then its current centers): the
        previous labels are recomputed from ``start.previous`` with the
        loop's kernel and the iterations go on from ``start.n_iter``, so the
        run ends as if it had not been interrupted.
    on_iteration : callable, optional
        ``on_iteration(n_iter, centers, previous)`` after each iteration that
        the run goes on from (not after the last one): a state to resume
        from with ``start=LloydStart(previous, n_iter)``.

    Returns
    -------
    LloydRun, a tuple of:

    labels : ndarray of int32, shape (n_local,)
    inertia : float
        Global inertia of the final centers and labels.
    centers : ndarray of shape (k, d)
    n_iter : int
    counts : ndarray of float64, shape (k,)
        Global rows per cluster.
    """
    state = LloydState(X, centers_init)
    n_iter, previous = 0, state.centers
    if start is not None:
        previous = np.ascontiguousarray(start.previous, dtype=X.dtype)
        state.labels = lloyd_labels(X, previous)
        n_iter = int(start.n_iter)
    strict = converged = False
    for iteration in range(n_iter, max_iter):
        previous = state.centers
        inertia, changed, shift, _ = lloyd_iteration(X, state, shards, ctx)
        n_iter = iteration + 1
        if verbose and ctx.rank == 0:
            print(f"Iteration {iteration}, inertia {inertia}.", flush=True)
        if changed == 0:
            strict = converged = True
            if verbose and ctx.rank == 0:
                print(f"Converged at iteration {iteration}: strict convergence.", flush=True)
            break
        if shift <= tol:
            converged = True
            if verbose and ctx.rank == 0:
                print(f"Converged at iteration {iteration}: center shift {shift} within "
                      f"tolerance {tol}.", flush=True)
            break
        if on_iteration is not None and n_iter < max_iter:
            on_iteration(n_iter, state.centers, previous)
    if strict:  # the labels stand: the exact inertia of the final centers
        counts = state.counts.copy()
        inertia = labelled_inertia(X, state.centers, state.labels)
        if ctx.size > 1:
            inertia = float(allreduce(np.array([inertia]), ctx=ctx)[0])
    else:
        counts, inertia = final_assignment(X, state.centers, state.labels, ctx)
    return LloydRun((state.labels, inertia, state.centers, n_iter, counts), strict=strict,
                    cut=not converged, previous=previous)


def same_clustering(labels_a, labels_b, n_clusters, ctx):
    """scikit-learn's ``_is_same_clustering`` over all ranks' rows (one allgather)."""
    pairs = np.unique(to_host(labels_a).astype(np.int64) * n_clusters + to_host(labels_b))
    mapping = np.full(n_clusters + 1, -1, dtype=np.int64)
    sources = pairs // n_clusters
    if len(np.unique(sources)) < len(sources):
        mapping[-1] = 1  # this rank maps one cluster onto two
    else:
        mapping[sources] = pairs % n_clusters
    table = allgather(mapping[None], ctx=ctx) if ctx.size > 1 else mapping[None]
    if (table[:, -1] == 1).any():
        return False
    for column in table[:, :-1].T:
        seen = column[column >= 0]
        if len(seen) and (seen != seen[0]).any():
            return False
    return True
