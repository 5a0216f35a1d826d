"""K-means kernels: the fused Lloyd pass, nearest-center assignment, k-means++ potentials.

Each function works on this rank's rows only; the estimator
(:class:`hpcdist.ml.KMeans`) validates its input and combines the per-rank
results with one collective. Nothing here validates or communicates.

The distance to every center goes through GEMM arithmetic: ``||x - c||^2 =
||x||^2 - 2 x.c + ||c||^2``, and since ``||x||^2`` is the same for every center
the nearest center is the argmin of ``||c||^2 - 2 x.c``. That argmin is a
register-blocked micro-kernel (:func:`hpcdist.ml.kmeans._simd.nearest_tile`,
LLVM vector IR): ``TILE_ROWS`` rows at a time, the dot products of a block of
centers accumulate in vector registers and are reduced to each row's nearest
center at once, so the ``(rows, centers)`` distances never reach memory (ties
go to the lowest center, like scikit-learn). :func:`lloyd_step` updates each
tile's rows while they are in L1 (:func:`hpcdist.ml.kmeans._simd.lloyd_tile`):
labels, the per-cluster sums (float64) and counts, the number of changed
labels; its inertia comes from the GEMM form (``||x||^2``, computed once per
run by :func:`row_squared_norms`, plus each row's smallest ``||c||^2 - 2
x.c``). The inertia of :func:`assign` and :func:`labelled_inertia` is exact
(``sum((x - c)^2)`` in float64), for final results. Chunks are split into
``n_blocks`` contiguous blocks, one per thread (``prange``), each with its
own partial sums merged at the end, so the result is deterministic for a
given ``n_blocks``; each row's nearest center does not depend on chunks,
blocks or threads.

NumPy arrays run the Numba kernels (C-contiguous ``X``; other layouts are
copied); CuPy arrays (``X``, ``labels``, ``closest``,
``out``, ``sq_distances`` on the device; ``centers``, ``sums`` and ``counts``
on the host, they are small) run plain CuPy array expressions.

Functions
---------
column_moments(X) -> (mean, m2)
row_squared_norms(X, *, n_blocks) -> squared_norms
lloyd_step(X, centers, labels, sums, counts, *, squared_norms, chunk_rows, n_blocks)
    -> (inertia, n_changed)
assign(X, centers, labels, counts=None, sq_distances=None, *, chunk_rows, n_blocks) -> inertia
labelled_inertia(X, centers, labels, *, n_blocks) -> inertia
candidate_potentials(X, candidates, closest, out, *, n_blocks) -> potentials
"""
import numpy as np

from ..._arrays import is_cupy
from ..._numba import JIT, JIT_PARALLEL, njit, num_threads, prange
from ...kernels._arrays import aligned_empty
from ._simd import CENTER_PADDING, TILE_ROWS, lloyd_tile, nearest_tile

__all__ = ["CHUNK_ROWS", "default_blocks", "column_moments", "row_squared_norms", "lloyd_step",
           "assign", "labelled_inertia", "candidate_potentials"]

#: Rows per chunk, a whole number of register tiles: the unit that thread blocks split
#: (a kernel's result depends on its blocks, not on the chunk size).
CHUNK_ROWS = 64 * TILE_ROWS

#: chunks per thread below which a kernel runs serially (no parallel region)
MIN_CHUNKS_PER_BLOCK = 8


def default_blocks(n_rows, chunk_rows):
    """Thread blocks for ``n_rows``: Numba's thread count, but at least
    ``MIN_CHUNKS_PER_BLOCK`` chunks per block (1 block: the serial kernel)."""
    chunks = -(-int(n_rows) // int(chunk_rows))
    return int(max(1, min(num_threads(), chunks // MIN_CHUNKS_PER_BLOCK)))


def _prepared_centers(centers, dtype):
    """``-2 * centers.T`` (exact scaling, shape (d, k_padded)) and ``||c||^2`` in ``dtype``,
    64-byte aligned.

    The padding columns (up to a multiple of ``CENTER_PADDING``) are zero
    with an infinite norm, so they are never nearest.
    """
    k, d = centers.shape
    padded = -(-k // CENTER_PADDING) * CENTER_PADDING
    neg2t = aligned_empty((d, padded), dtype)
    neg2t[:, k:] = 0
    np.multiply(np.asarray(centers, dtype).T, -2, out=neg2t[:, :k])
    norms = aligned_empty(padded, dtype)
    norms[k:] = np.inf
    norms[:k] = (np.asarray(centers, np.float64) ** 2).sum(axis=1)
    return neg2t, norms


# -- Numba kernels (no validation) ----------------------------------------------------------

@njit(**JIT)
def _row_inertia(best, squared_norms, start, stop):
    """``sum(max(squared_norms[start:stop] + best[:stop - start], 0))``: the chunk's
    squared distances in GEMM form (rounding can make one slightly negative), vectorised."""
    total = 0.0
    for i in range(stop - start):
        total += max(squared_norms[start + i] + best[i], 0.0)
    return total


@njit(**JIT)
def _squared_distance(X, i, centers, j):
    """Exact ``sum((X[i] - centers[j])^2)`` in float64."""
    q = 0.0
    for f in range(X.shape[1]):
        r = np.float64(X[i, f]) - np.float64(centers[j, f])
        q += r * r
    return q


# Each kernel is a serial block function (a contiguous range of rows or chunks, its own
# partial results) plus a parallel driver running one block per thread. Small inputs call
# the block function directly: no parallel region to enter (costly on a loaded machine).

@njit(**JIT)
def _lloyd_block(X, squared_norms, neg2t, norms, labels, chunk_rows, first, last, sums,
                 counts):
    """Chunks ``first:last``: labels set, sums (float64) and counts (int64) added to;
    returns (inertia, changed)."""
    n = X.shape[0]
    best = np.empty(chunk_rows + TILE_ROWS)
    inertia = 0.0
    changed = 0
    for c in range(first, last):
        start = c * chunk_rows
        stop = min(start + chunk_rows, n)
        for row in range(start, stop, TILE_ROWS):
            changed += lloyd_tile(X, row, stop, neg2t, norms, labels, sums, counts, best,
                                  row - start)
        inertia += _row_inertia(best, squared_norms, start, stop)
    return inertia, changed


@njit(**JIT_PARALLEL)
def _lloyd_kernel(X, squared_norms, neg2t, norms, labels, part_sums, part_counts, chunk_rows):
    n_blocks = part_sums.shape[0]
    n_chunks = (X.shape[0] + chunk_rows - 1) // chunk_rows
    part_inertia = np.zeros(n_blocks)
    part_changed = np.zeros(n_blocks, np.int64)
    for b in prange(n_blocks):
        part_inertia[b], part_changed[b] = _lloyd_block(
            X, squared_norms, neg2t, norms, labels, chunk_rows, b * n_chunks // n_blocks,
            (b + 1) * n_chunks // n_blocks, part_sums[b], part_counts[b])
    return part_inertia.sum(), part_changed.sum()


@njit(**JIT)
def _squared_norms_block(X, lo, hi, out):
    for i in range(lo, hi):
        q = 0.0
        for f in range(X.shape[1]):
            x = np.float64(X[i, f])
            q += x * x
        out[i] = q


@njit(**JIT_PARALLEL)
def _squared_norms_kernel(X, out, n_blocks):
    n = X.shape[0]
    for b in prange(n_blocks):
        _squared_norms_block(X, b * n // n_blocks, (b + 1) * n // n_blocks, out)


@njit(**JIT)
def _assign_block(X, centers, neg2t, norms, labels, counts, sq_distances, chunk_rows, first,
                  last):
    """Chunks ``first:last``: labels (counts, distances when non-empty); returns the inertia."""
    n = X.shape[0]
    with_counts = counts.size > 0
    with_distances = sq_distances.size > 0
    nearest = np.empty(chunk_rows + TILE_ROWS, np.int32)
    inertia = 0.0
    for c in range(first, last):
        start = c * chunk_rows
        m = min(chunk_rows, n - start)
        for row in range(start, start + m, TILE_ROWS):
            nearest_tile(X, row, neg2t, norms, nearest, row - start)
        for i in range(m):
            j = nearest[i]
            labels[start + i] = j
            q = _squared_distance(X, start + i, centers, j)
            if with_distances:
                sq_distances[start + i] = q
            if with_counts:
                counts[j] += 1.0
            inertia += q
    return inertia


@njit(**JIT_PARALLEL)
def _assign_kernel(X, centers, neg2t, norms, labels, counts, sq_distances, chunk_rows,
                   n_blocks):
    k = centers.shape[0]
    n_chunks = (X.shape[0] + chunk_rows - 1) // chunk_rows
    part_counts = np.zeros((n_blocks, k if counts.size > 0 else 0))
    part_inertia = np.zeros(n_blocks)
    for b in prange(n_blocks):
        part_inertia[b] = _assign_block(X, centers, neg2t, norms, labels, part_counts[b],
                                        sq_distances, chunk_rows, b * n_chunks // n_blocks,
                                        (b + 1) * n_chunks // n_blocks)
    for b in range(n_blocks):
        for j in range(counts.size):
            counts[j] += part_counts[b, j]
    return part_inertia.sum()


@njit(**JIT)
def _labelled_inertia_block(X, centers, labels, lo, hi):
    s = 0.0
    for i in range(lo, hi):
        s += _squared_distance(X, i, centers, labels[i])
    return s


@njit(**JIT_PARALLEL)
def _labelled_inertia_kernel(X, centers, labels, n_blocks):
    n = X.shape[0]
    part = np.zeros(n_blocks)
    for b in prange(n_blocks):
        part[b] = _labelled_inertia_block(X, centers, labels, b * n // n_blocks,
                                          (b + 1) * n // n_blocks)
    return part.sum()


@njit(**JIT)
def _candidate_block(X, candidates, closest, out, lo, hi, potentials):
    for i in range(lo, hi):
        for t in range(candidates.shape[0]):
            v = min(_squared_distance(X, i, candidates, t), closest[i])
            out[t, i] = v
            potentials[t] += v


@njit(**JIT_PARALLEL)
def _candidate_kernel(X, candidates, closest, out, n_blocks):
    n = X.shape[0]
    n_candidates = candidates.shape[0]
    part = np.zeros((n_blocks, n_candidates))
    for b in prange(n_blocks):
        _candidate_block(X, candidates, closest, out, b * n // n_blocks, (b + 1) * n // n_blocks,
                         part[b])
    potentials = np.zeros(n_candidates)
    for b in range(n_blocks):
        for t in range(n_candidates):
            potentials[t] += part[b, t]
    return potentials


@njit(**JIT)
def _merge_moments(count, mean, m2, other_count, other_mean, other_m2):
    """Chan et al.'s pairwise update of (count, mean, m2) in place; returns the count."""
    if other_count == 0:
        return count
    total = count + other_count
    for f in range(mean.size):
        delta = other_mean[f] - mean[f]
        mean[f] += delta * (other_count / total)
        m2[f] += other_m2[f] + delta * delta * (count * other_count / total)
    return total


@njit(**JIT)
def _moments_block(X, lo, hi, mean, m2):
    """Rows ``lo:hi`` into (mean, m2) (zeros on entry), 256-row chunks; returns the count."""
    d = X.shape[1]
    chunk_mean = np.empty(d)
    chunk_m2 = np.empty(d)
    count = 0.0
    for start in range(lo, hi, 256):
        stop = min(start + 256, hi)
        chunk_mean[:] = 0.0
        chunk_m2[:] = 0.0
        for i in range(start, stop):
            for f in range(d):
                chunk_mean[f] += X[i, f]
        for f in range(d):
            chunk_mean[f] /= stop - start
        for i in range(start, stop):
            for f in range(d):
                r = np.float64(X[i, f]) - chunk_mean[f]
                chunk_m2[f] += r * r
        count = _merge_moments(count, mean, m2, float(stop - start), chunk_mean, chunk_m2)
    return count


@njit(**JIT_PARALLEL)
def _column_moments_kernel(X, n_blocks):
    """Per-feature mean and sum of squared deviations, in float64."""
    n, d = X.shape
    block_mean = np.zeros((n_blocks, d))
    block_m2 = np.zeros((n_blocks, d))
    block_n = np.zeros(n_blocks)
    for b in prange(n_blocks):
        block_n[b] = _moments_block(X, b * n // n_blocks, (b + 1) * n // n_blocks,
                                    block_mean[b], block_m2[b])
    mean = np.zeros(d)
    m2 = np.zeros(d)
    count = 0.0
    for b in range(n_blocks):
        count = _merge_moments(count, mean, m2, block_n[b], block_mean[b], block_m2[b])
    return mean, m2


# -- CuPy versions (simple array expressions; the counts and sums come back to the host) ------

def _cupy_nearest(X, centers):
    import cupy

    C = cupy.asarray(centers, dtype=X.dtype)
    scores = (C * C).sum(axis=1)[None, :] - 2 * (X @ C.T)
    nearest = scores.argmin(axis=1).astype(cupy.int32)
    return C, nearest, scores[cupy.arange(len(X)), nearest]


def _cupy_row_norms(X):
    import cupy

    return (X.astype(cupy.float64) ** 2).sum(axis=1)


def _cupy_lloyd_step(X, centers, labels, sums, counts, squared_norms):
    import cupy
    import cupyx

    _, nearest, best = _cupy_nearest(X, centers)
    changed = int((labels != nearest).sum())
    labels[...] = nearest
    k, d = sums.shape
    device_sums = cupy.zeros((k, d), cupy.float64)
    cupyx.scatter_add(device_sums, nearest, X.astype(cupy.float64))
    sums += cupy.asnumpy(device_sums)
    counts += cupy.asnumpy(cupy.bincount(nearest, minlength=k)).astype(np.float64)
    if squared_norms is None:
        squared_norms = _cupy_row_norms(X)
    inertia = cupy.maximum(best.astype(cupy.float64) + squared_norms, 0.0).sum()
    return float(inertia), changed


def _cupy_exact(X, C, labels):
    import cupy

    return ((X - C[labels]).astype(cupy.float64) ** 2).sum(axis=1)


def _cupy_assign(X, centers, labels, counts, sq_distances):
    import cupy

    C, nearest, _ = _cupy_nearest(X, centers)
    labels[...] = nearest
    sq = _cupy_exact(X, C, nearest)
    if counts is not None:
        counts += cupy.asnumpy(cupy.bincount(nearest, minlength=len(counts))).astype(np.float64)
    if sq_distances is not None:
        sq_distances[...] = sq
    return float(sq.sum())


def _cupy_labelled_inertia(X, centers, labels):
    import cupy

    return float(_cupy_exact(X, cupy.asarray(centers, dtype=X.dtype), labels).sum())


def _cupy_candidate_potentials(X, candidates, closest, out):
    import cupy

    C = cupy.asarray(candidates, dtype=X.dtype)
    potentials = np.empty(len(C))
    for t in range(len(C)):
        sq = ((X - C[t]).astype(cupy.float64) ** 2).sum(axis=1)
        cupy.minimum(sq, closest, out=out[t])
        potentials[t] = float(out[t].sum())
    return potentials


def _cupy_column_moments(X):
    import cupy

    mean = X.mean(axis=0, dtype=cupy.float64)
    return cupy.asnumpy(mean), cupy.asnumpy(((X - mean) ** 2).sum(axis=0))


# -- dispatch -------------------------------------------------------------------------------

_EMPTY_F64 = np.empty(0)


def column_moments(X, *, n_blocks=None):
    """Per-feature mean and sum of squared deviations from it (float64), in one pass.

    Returns
    -------
    mean, m2 : ndarray of float64, shape (n_features,)
        Zeros for an empty ``X``.
    """
    if not len(X):
        return np.zeros(X.shape[1]), np.zeros(X.shape[1])
    if is_cupy(X):
        return _cupy_column_moments(X)
    if n_blocks is None:
        n_blocks = default_blocks(len(X), 256)
    if n_blocks == 1:
        mean, m2 = np.zeros(X.shape[1]), np.zeros(X.shape[1])
        _moments_block(X, 0, len(X), mean, m2)
        return mean, m2
    return _column_moments_kernel(X, n_blocks)


def row_squared_norms(X, *, n_blocks=None):
    """``||X[i]||^2`` of every row, in float64 (what :func:`lloyd_step` takes to skip them)."""
    if is_cupy(X):
        return _cupy_row_norms(X)
    out = np.empty(len(X))
    if n_blocks is None:
        n_blocks = default_blocks(len(X), 256)
    if n_blocks == 1:
        _squared_norms_block(X, 0, len(X), out)
    else:
        _squared_norms_kernel(X, out, n_blocks)
    return out


def lloyd_step(X, centers, labels, sums, counts, *, squared_norms=None, chunk_rows=CHUNK_ROWS,
               n_blocks=None):
    """One fused Lloyd pass over this rank's rows (assignment + accumulation).

    Parameters
    ----------
    X : ndarray of shape (n, d), float32 or float64, C-contiguous
    centers : ndarray of shape (k, d), X's dtype, C-contiguous
    labels : ndarray of int32, shape (n,)
        The previous labels (-1 for none); overwritten with the new ones.
    sums : ndarray of float64, shape (k, d)
        Incremented by the sum of the rows assigned to each center.
    counts : ndarray of float64, shape (k,)
        Incremented by the number of rows assigned to each center.
    squared_norms : ndarray of float64, shape (n,), optional
        ``row_squared_norms(X)``, for the inertia; computed here (one more
        pass over ``X``) when not given. A Lloyd run passes them once for all
        its iterations.
    chunk_rows : int, optional
        Rows per chunk, the unit thread blocks are made of (default ``CHUNK_ROWS``).
    n_blocks : int, optional
        Thread blocks (default :func:`default_blocks`).

    Returns
    -------
    inertia : float
        Sum over the rows of the squared distance to the nearest of ``centers``
        (through ``||x||^2 + ||c||^2 - 2 x.c``: use :func:`labelled_inertia`
        for an exact value).
    n_changed : int
        Rows whose label changed.
    """
    if not len(X):
        return 0.0, 0
    if is_cupy(X):
        return _cupy_lloyd_step(X, centers, labels, sums, counts, squared_norms)
    X = np.ascontiguousarray(X)
    if squared_norms is None:
        squared_norms = row_squared_norms(X)
    if n_blocks is None:
        n_blocks = default_blocks(len(X), chunk_rows)
    neg2t, norms = _prepared_centers(centers, X.dtype)
    # each block's sums in its own aligned buffer (no vector load split across cache lines),
    # added to the caller's sums in block order
    part_sums = aligned_empty((n_blocks,) + sums.shape, np.float64)
    part_sums[...] = 0.0
    part_counts = np.zeros((n_blocks, len(counts)), np.int64)
    if n_blocks == 1:
        n_chunks = -(-len(X) // chunk_rows)
        inertia, changed = _lloyd_block(X, squared_norms, neg2t, norms, labels, chunk_rows, 0,
                                        n_chunks, part_sums[0], part_counts[0])
    else:
        inertia, changed = _lloyd_kernel(X, squared_norms, neg2t, norms, labels, part_sums,
                                         part_counts, chunk_rows)
    for block_sums, block_counts in zip(part_sums, part_counts):
        sums += block_sums
        counts += block_counts
    return float(inertia), int(changed)


def assign(X, centers, labels, counts=None, sq_distances=None, *, chunk_rows=CHUNK_ROWS,
           n_blocks=None):
    """Nearest center of every row; returns the inertia (sum of squared distances).

    Parameters
    ----------
    X : ndarray of shape (n, d)
    centers : ndarray of shape (k, d), X's dtype
    labels : ndarray of int32, shape (n,)
        Overwritten with the nearest center of each row.
    counts : ndarray of float64, shape (k,), optional
        Incremented by the rows per center.
    sq_distances : ndarray of float64, shape (n,), optional
        Filled with each row's squared distance to its nearest center.
    chunk_rows, n_blocks : int
        As in :func:`lloyd_step`.
    """
    if not len(X):
        return 0.0
    if is_cupy(X):
        return _cupy_assign(X, centers, labels, counts, sq_distances)
    X = np.ascontiguousarray(X)
    if n_blocks is None:
        n_blocks = default_blocks(len(X), chunk_rows)
    counts = _EMPTY_F64 if counts is None else counts
    sq_distances = _EMPTY_F64 if sq_distances is None else sq_distances
    neg2t, norms = _prepared_centers(centers, X.dtype)
    if n_blocks == 1:
        n_chunks = -(-len(X) // chunk_rows)
        return float(_assign_block(X, centers, neg2t, norms, labels, counts, sq_distances,
                                   chunk_rows, 0, n_chunks))
    return float(_assign_kernel(X, centers, neg2t, norms, labels, counts, sq_distances,
                                chunk_rows, n_blocks))


def labelled_inertia(X, centers, labels, *, n_blocks=None):
    """``sum_i ||X[i] - centers[labels[i]]||^2`` in float64 (labels given, not recomputed)."""
    if not len(X):
        return 0.0
    if is_cupy(X):
        return _cupy_labelled_inertia(X, centers, labels)
    if n_blocks is None:
        n_blocks = default_blocks(len(X), 256)
    if n_blocks == 1:
        return float(_labelled_inertia_block(X, centers, labels, 0, len(X)))
    return float(_labelled_inertia_kernel(X, centers, labels, n_blocks))


def candidate_potentials(X, candidates, closest, out, *, n_blocks=None):
    """k-means++ trials: ``out[t, i] = min(closest[i], ||X[i] - candidates[t]||^2)``.

    Parameters
    ----------
    X : ndarray of shape (n, d)
    candidates : ndarray of shape (t, d), X's dtype
    closest : ndarray of float64, shape (n,)
        Each row's squared distance to its nearest chosen center (``inf`` before the first).
    out : ndarray of float64, shape (t, n)

    Returns
    -------
    ndarray of float64, shape (t,)
        ``out.sum(axis=1)``: this rank's potential if candidate ``t`` is added.
    """
    if not len(X):
        return np.zeros(len(candidates))
    if is_cupy(X):
        return _cupy_candidate_potentials(X, candidates, closest, out)
    if n_blocks is None:
        n_blocks = default_blocks(len(X) * len(candidates), 256)
    if n_blocks == 1:
        potentials = np.zeros(len(candidates))
        _candidate_block(X, candidates, closest, out, 0, len(X), potentials)
        return potentials
    return _candidate_kernel(X, candidates, closest, out, n_blocks)
