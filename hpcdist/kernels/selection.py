"""Sparsification: exact top-k, sampled-threshold top-k and random-k indices.

Magnitudes are compared through the IEEE bit pattern with the sign bit
cleared (``bits & 0x7fff...``), which orders exactly like ``|x|`` for all
non-NaN values; NaN compares larger than infinity (as in ``np.argpartition``).
"""
import numpy as np

from .._checks import check_int
from .._numba import JIT, JIT_PARALLEL, njit, num_threads, prange
from ._arrays import flat_float, is_cupy

__all__ = ["topk", "topk_threshold", "randomk_indices"]

_BUCKET_BITS = 16
_NB = 1 << _BUCKET_BITS
#: Below this size the selection uses ``np.argpartition`` (the histogram would dominate).
_SMALL = 1 << 14


def _keys(x):
    """Unsigned magnitude keys (sign bit still present; kernels mask it), mask, shift."""
    if x.dtype == np.float32:
        return x.view(np.uint32), np.uint32(0x7FFFFFFF), np.uint32(31 - _BUCKET_BITS)
    return (x.view(np.uint64), np.uint64(0x7FFFFFFFFFFFFFFF),
            np.uint64(63 - _BUCKET_BITS))


@njit(**JIT_PARALLEL)
def _histograms(u, mask, shift, nchunks):
    """Per-chunk histograms of the top ``_BUCKET_BITS`` magnitude bits, shape (nchunks, 2**16)."""
    n = u.size
    hist = np.zeros((nchunks, _NB), np.int64)
    for c in prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        h = hist[c]
        for i in range(lo, hi):
            h[np.intp((u[i] & mask) >> shift)] += 1
    return hist


@njit(**JIT_PARALLEL)
def _gather_bucket(u, mask, shift, bucket, offsets, nchunks, cand_idx, cand_key):
    """Indices and keys of the elements in ``bucket``, in index order."""
    n = u.size
    b = np.intp(bucket)
    for c in prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        j = offsets[c]
        for i in range(lo, hi):
            key = u[i] & mask
            if np.intp(key >> shift) == b:
                cand_idx[j] = i
                cand_key[j] = key
                j += 1


@njit(**JIT_PARALLEL)
def _gather_above(x, u, mask, threshold, quotas, offsets, nchunks, indices, values):
    """Write, per chunk and in index order, every i with key > threshold and the
    first ``quotas[c]`` ones with key == threshold."""
    n = u.size
    for c in prange(nchunks):
        lo = c * n // nchunks
        hi = (c + 1) * n // nchunks
        j = offsets[c]
        quota = quotas[c]
        for i in range(lo, hi):
            key = u[i] & mask
            if key > threshold:
                indices[j] = i
                values[j] = x[i]
                j += 1
            elif key == threshold and quota > 0:
                quota -= 1
                indices[j] = i
                values[j] = x[i]
                j += 1


@njit(**JIT)
def _count_range(u, mask, threshold, lo, hi):
    v = u[lo:hi]                  # 0-based loop: no negative-index wraparound, vectorises
    s = 0
    for i in range(v.size):
        s += np.int64((v[i] & mask) >= threshold)
    return s


#: keys tested together: one vector compare per block, a scalar gather only in
#: blocks with a hit (about 1 in 10 at k = 1%)
_BLOCK = 8


@njit(**JIT, inline="always")
def _block_hits(v, base, mask, threshold):
    hit = 0
    for t in range(_BLOCK):
        hit |= np.int32((v[base + t] & mask) >= threshold)
    return hit != 0


@njit(**JIT)
def _gather_scalar(x, u, mask, threshold, lo, hi, start, cap, indices, values, j):
    """Gather keys >= threshold of ``[lo, hi)`` into ``indices[start + j:]``
    (room for ``cap`` in all); returns the new ``j``, or ``cap + 1`` when full."""
    for i in range(lo, hi):
        if (u[i] & mask) >= threshold:
            if j == cap:
                return cap + 1
            indices[start + j] = i
            values[start + j] = x[i]
            j += 1
    return j


@njit(**JIT)
def _gather_capped_range(x, u, mask, threshold, lo, hi, start, cap, indices, values):
    """Indices and values of the keys >= threshold of ``[lo, hi)``, in index
    order, into ``indices[start:start+cap]``; returns the count, or ``cap + 1``
    as soon as the room is exceeded."""
    v = u[lo:hi]
    whole = v.size - v.size % _BLOCK
    j = 0
    for base in range(0, whole, _BLOCK):
        if _block_hits(v, base, mask, threshold):
            j = _gather_scalar(x, u, mask, threshold, lo + base, lo + base + _BLOCK, start, cap,
                               indices, values, j)
            if j > cap:
                return j
    return _gather_scalar(x, u, mask, threshold, lo + whole, hi, start, cap, indices, values, j)


@njit(**JIT_PARALLEL)
def _gather_capped(x, u, mask, threshold, nchunks, cap, indices, values):
    """One pass: chunk c gathers into its own slot of ``cap`` entries."""
    n = u.size
    counts = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        counts[c] = _gather_capped_range(x, u, mask, threshold, c * n // nchunks,
                                         (c + 1) * n // nchunks, c * cap, cap,
                                         indices, values)
    return counts


@njit(**JIT_PARALLEL)
def _count_at_least(u, mask, threshold, nchunks):
    """Per-chunk counts of keys >= threshold (serial helpers vectorise, prange bodies do not)."""
    n = u.size
    counts = np.zeros(nchunks, np.int64)
    for c in prange(nchunks):
        counts[c] = _count_range(u, mask, threshold, c * n // nchunks, (c + 1) * n // nchunks)
    return counts


def _chunk_bounds(n, nchunks):
    c = np.arange(nchunks + 1, dtype=np.int64)
    return c * n // nchunks


def _topk_small(x, k):
    n = x.size
    idx = np.argpartition(np.abs(x), n - k)[n - k:] if k < n else np.arange(n)
    idx = np.sort(idx).astype(np.int64, copy=False)
    return idx, x[idx]


_SAMPLE = 1 << 16


def _gather_at_least_once(x, u, mask, threshold, expected):
    """Indices and values of the keys >= threshold in one pass, into per-chunk
    slots sized for ``expected`` results in all; None when a slot overflows."""
    n = x.size
    nchunks = max(1, min(num_threads(), n // 65536))
    cap = int(expected / nchunks) + 4096
    slots = np.empty(nchunks * cap, np.int64)
    slot_val = np.empty(nchunks * cap, x.dtype)
    counts = _gather_capped(x, u, mask, threshold, nchunks, cap, slots, slot_val)
    if np.any(counts > cap):
        return None
    if nchunks == 1:
        return slots[:counts[0]], slot_val[:counts[0]]
    return (np.concatenate([slots[c * cap:c * cap + counts[c]] for c in range(nchunks)]),
            np.concatenate([slot_val[c * cap:c * cap + counts[c]] for c in range(nchunks)]))


def _topk_numba(x, k):
    """Driver: a sampled lower bound of the k-th key, gather the candidates above
    it (about 1.2 k of them) and select exactly among them; falls back to the
    histogram selection when the bound was not low enough."""
    n = x.size
    u, mask, _ = _keys(x)
    rank = int(np.ceil(k * _SAMPLE / n + 4.0 * np.sqrt(k * _SAMPLE / n) + 1))
    if rank >= _SAMPLE // 4:
        return _topk_histogram(x, k)
    sample = u[np.random.default_rng(0).integers(0, n, _SAMPLE)] & mask
    low = np.partition(sample, _SAMPLE - rank)[_SAMPLE - rank]
    # one pass into per-chunk slots sized from the sample (1.5x the expected count)
    gathered = _gather_at_least_once(x, u, mask, low, 1.5 * rank / _SAMPLE * n)
    if gathered is None or gathered[0].size < k:
        return _topk_histogram(x, k)
    cand, cand_val = gathered
    m = cand.size
    keys = cand_val.view(u.dtype) & mask
    threshold = np.partition(keys, m - k)[m - k]
    indices = np.empty(k, np.int64)
    values = np.empty(k, x.dtype)
    _keep_top(cand, cand_val, keys, threshold, int(np.count_nonzero(keys > threshold)),
              indices, values)
    return indices, values


@njit(**JIT)
def _keep_top(cand, cand_val, keys, threshold, above, indices, values):
    """Copy, in order, the candidates with key > threshold and the first
    ``indices.size - above`` ones with key == threshold."""
    ties = indices.size - above
    j = 0
    for i in range(keys.size):
        key = keys[i]
        if key > threshold or (key == threshold and ties > 0):
            if key == threshold:
                ties -= 1
            indices[j] = cand[i]
            values[j] = cand_val[i]
            j += 1


def _topk_histogram(x, k):
    """Driver: histogram -> bucket of the k-th key -> exact key -> ordered gather."""
    n = x.size
    u, mask, shift = _keys(x)
    nchunks = max(1, min(num_threads(), n // 65536))
    hist = _histograms(u, mask, shift, nchunks)
    total = hist.sum(axis=0)
    above = np.cumsum(total[::-1])[::-1]          # above[b] = count with bucket >= b
    bucket = int(np.flatnonzero(above >= k)[-1])  # highest bucket reaching k
    need = k - (int(above[bucket + 1]) if bucket + 1 < _NB else 0)
    per_chunk = hist[:, bucket]
    cand_off = np.concatenate(([0], np.cumsum(per_chunk)))
    m = int(cand_off[-1])
    cand_idx = np.empty(m, np.int64)
    cand_key = np.empty(m, u.dtype)
    _gather_bucket(u, mask, shift, u.dtype.type(bucket), cand_off, nchunks, cand_idx, cand_key)
    threshold = np.partition(cand_key, m - need)[m - need]
    # per-chunk counts of keys > threshold and quotas of keys == threshold
    bounds = _chunk_bounds(n, nchunks)
    chunk_of = np.searchsorted(bounds, cand_idx, side="right") - 1
    gt = (np.cumsum(hist[:, ::-1], axis=1)[:, _NB - 2 - bucket] if bucket + 1 < _NB
          else np.zeros(nchunks, np.int64))
    gt = gt + np.bincount(chunk_of[cand_key > threshold], minlength=nchunks)
    eq = np.bincount(chunk_of[cand_key == threshold], minlength=nchunks)
    eq_needed = k - int(gt.sum())
    quotas = np.minimum(eq, np.maximum(0, eq_needed - (np.cumsum(eq) - eq)))
    counts = gt + quotas
    offsets = np.concatenate(([0], np.cumsum(counts)))
    indices = np.empty(k, np.int64)
    values = np.empty(k, x.dtype)
    _gather_above(x, u, mask, threshold, quotas, offsets, nchunks, indices, values)
    return indices, values


def _topk_driver(x, k):
    if k == 0:
        return np.empty(0, np.int64), np.empty(0, x.dtype)
    if k == x.size:
        return np.arange(x.size, dtype=np.int64), x.copy()
    if x.size < _SMALL:
        return _topk_small(x, k)
    return _topk_numba(x, k)


def topk(x, k):
    """Exact top-k of ``x`` by magnitude, in O(n) (selection, no sort of x).

    A lower bound of the k-th magnitude is taken from a fixed random sample;
    one parallel pass gathers the ~1.2 k candidates above it and an exact
    partition among them gives the result. If the bound misses, a 16-bit
    radix histogram of the magnitude bits finds the k-th magnitude instead.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        NumPy or CuPy array; any shape, taken as a flat C-order view.
    k : int
        Number of elements to keep, ``0 <= k <= x.size``.

    Returns
    -------
    indices : ndarray of shape (k,) of int64
        Flat indices of the k largest ``|x|``, sorted ascending. Among equal
        magnitudes at the boundary the lowest indices are taken. NaN ranks
        above infinity.
    values : ndarray of shape (k,) of x.dtype
        ``x.ravel()[indices]`` (signed).
    """
    flat = flat_float(x)
    k = check_int(k, "k", 0, flat.size)
    if is_cupy(flat):
        from ._cupy import topk as cupy_topk
        return cupy_topk(flat, k)
    return _topk_driver(flat, k)


@njit(**JIT_PARALLEL)
def _gather_at_least(x, u, mask, threshold, offsets, nchunks, indices, values):
    n = u.size
    for c in prange(nchunks):  # the counts are exact: each chunk fills its room
        _gather_capped_range(x, u, mask, threshold, c * n // nchunks, (c + 1) * n // nchunks,
                             offsets[c], offsets[c + 1] - offsets[c], indices, values)


def _gather_at_least_counted(x, u, mask, threshold):
    """Indices and values of the keys >= threshold: a counting pass, then the gather."""
    nchunks = max(1, min(num_threads(), x.size // 65536))
    counts = _count_at_least(u, mask, threshold, nchunks)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    indices = np.empty(int(offsets[-1]), np.int64)
    values = np.empty(indices.size, x.dtype)
    _gather_at_least(x, u, mask, threshold, offsets, nchunks, indices, values)
    return indices, values


def _default_sample_size(n):
    return max(1000, n // 100)


def _threshold_driver(x, k, sample_size, seed):
    n = x.size
    if k == 0 or k == n or n <= sample_size:
        return _topk_driver(x, k)
    u, mask, _ = _keys(x)
    rng = np.random.default_rng(seed)
    sample = u[rng.integers(0, n, sample_size)] & mask
    rank = max(1, int(np.ceil(k * sample_size / n)))
    threshold = np.partition(sample, sample_size - rank)[sample_size - rank]
    gathered = _gather_at_least_once(x, u, mask, threshold, 1.5 * k)
    if gathered is None:          # far more than k: count first, then gather
        gathered = _gather_at_least_counted(x, u, mask, threshold)
    indices, values = gathered
    count = indices.size
    if count < (k + 1) // 2:      # threshold far too high: fall back to exact
        return _topk_driver(x, k)
    if count > _upper(k):         # too many: exact top-k of the selected
        keep, _ = _topk_driver(values, k)
        return indices[keep], values[keep]
    return indices, values


def _upper(k):
    return (5 * k + 3) // 4


def topk_threshold(x, k, *, sample_size=None, seed=0):
    """Approximate top-k by a magnitude threshold estimated from a random sample.

    As in Deep Gradient Compression: the threshold is the ``k/n`` upper
    quantile of ``|x|`` over ``sample_size`` elements drawn (with
    replacement) by ``numpy.random.default_rng(seed)``; every element with
    ``|x| >=`` threshold is selected in one pass. If that selects more than
    ``ceil(1.25 k)`` elements the exact top-k of the selection is returned;
    if it selects fewer than ``ceil(k / 2)`` the exact :func:`topk` is
    returned. Small inputs (``x.size <= sample_size``) use :func:`topk`.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view.
    k : int
        Target count, ``0 <= k <= x.size``.
    sample_size : int, optional
        Default ``max(1000, x.size // 100)``.
    seed : int
        Seed of the sample; the result is a pure function of (x, k, sample_size, seed).

    Returns
    -------
    indices : ndarray of shape (m,) of int64
        Sorted ascending, with ``ceil(k / 2) <= m <= ceil(1.25 k)`` (``m = k``
        whenever the exact path was taken). Every element with a magnitude
        above the returned threshold is included.
    values : ndarray of shape (m,) of x.dtype
        ``x.ravel()[indices]``.
    """
    flat = flat_float(x)
    k = check_int(k, "k", 0, flat.size)
    if sample_size is None:
        sample_size = _default_sample_size(flat.size)
    sample_size = check_int(sample_size, "sample_size", 1)
    if is_cupy(flat):
        from ._cupy import topk_threshold as cupy_topk_threshold
        return cupy_topk_threshold(flat, k, sample_size, seed)
    return _threshold_driver(flat, k, sample_size, seed)


def randomk_indices(n, k, seed):
    """``k`` distinct indices in ``[0, n)``, sorted ascending, from ``seed`` alone.

    Every rank calling with the same ``(n, k, seed)`` gets the same array
    (``numpy.random.default_rng(seed).choice(n, k, replace=False)``), so the
    selected values can be summed with an allreduce.

    Parameters
    ----------
    n : int
        Population size, ``n >= 0``.
    k : int
        ``0 <= k <= n``.
    seed : int
        Non-negative seed (vary it per step and per tensor).

    Returns
    -------
    indices : ndarray of shape (k,) of int64
    """
    n = check_int(n, "n", 0)
    k = check_int(k, "k", 0, n)
    seed = check_int(seed, "seed", 0)
    if k == 0:
        return np.empty(0, np.int64)
    if k == n:
        return np.arange(n, dtype=np.int64)
    idx = np.random.default_rng(seed).choice(n, k, replace=False)
    idx.sort()
    return idx.astype(np.int64, copy=False)
