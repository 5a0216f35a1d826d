"""Quantization: QSGD (stochastic, unbiased) and deterministic int8 with per-chunk scales."""
import numpy as np

from .._checks import check_int
from .._numba import JIT, JIT_PARALLEL, njit, num_threads, prange
from ..exceptions import InvalidArgumentTypeError
from ._arrays import check_dtype, check_scales, flat_float, flat_payload, is_cupy, n_chunks

__all__ = ["qsgd_quantize", "qsgd_dequantize", "int8_quantize", "int8_dequantize"]

_BLOCK = 1 << 16

# ------------------------------------------------------- counter-based RNG
# One hash of (seed, index) per element: results depend only on the seed and
# the index, never on the thread count or the device (the CuPy kernel in
# _cupy.py uses the same formulas). Kept in this module so that Numba's cache,
# which only watches the file of the cached function, sees edits to it.
GOLDEN32 = np.uint32(0x9E3779B9)
_M1 = np.uint32(0x7FEB352D)
_M2 = np.uint32(0x846CA68B)
_S16 = np.uint32(16)
_S15 = np.uint32(15)
_S8 = np.uint32(8)


def _stream_key(seed):
    """32-bit key of a non-negative integer seed (splitmix64 finaliser, folded)."""
    z = (seed * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) % 2**64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) % 2**64
    z ^= z >> 31
    return np.uint32((z ^ (z >> 32)) & 0xFFFFFFFF)


@njit(**JIT)
def _uniform24(key, i):
    """Uniform float32 in [0, 1) on a 2**-24 grid for element ``i`` (int64) of stream
    ``key`` (uint32): the "lowbias32" integer hash, 32-bit so it vectorises."""
    # Numba widens uint32 arithmetic to 64 bits: wrap back to 32 after each step
    h = np.uint32(np.uint32(i) * GOLDEN32)
    h = np.uint32(h + (key ^ np.uint32(np.uint32(i >> 32) * _M2)))
    h = np.uint32(h ^ (h >> _S16))
    h = np.uint32(h * _M1)
    h = np.uint32(h ^ (h >> _S15))
    h = np.uint32(h * _M2)
    h = np.uint32(h ^ (h >> _S16))
    return np.float32(h >> _S8) * np.float32(1.0 / 16777216.0)


def _seed_key(seed):
    return _stream_key(check_int(seed, "seed", 0, 2**64 - 1))


# --------------------------------------------------------------------- QSGD
@njit(**JIT)
def _sumsq_range(x):
    s = 0.0
    for i in range(x.size):
        v = np.float64(x[i])
        s += v * v
    return s


@njit(**JIT_PARALLEL)
def _sumsq(x, nblocks):
    n = x.size
    parts = np.zeros(nblocks, np.float64)
    for b in prange(nblocks):
        parts[b] = _sumsq_range(x[b * n // nblocks:(b + 1) * n // nblocks])
    return parts.sum()


@njit(**JIT)
def _qsgd_levels(x, lo, scale, levels, key, q):
    # _uniform24(key, lo + i) with its 64-bit parts hoisted: a block never
    # straddles a multiple of 2**32 (_BLOCK divides it), so the high word of
    # the index is constant here and the loop runs on 32-bit lanes only; the
    # first multiply, (lo + i) * GOLDEN32 mod 2**32, becomes an add per element.
    # The level is computed in float32 (exact: at most `levels` < 2**24) and
    # converted once: integer steps here would be widened to 64-bit lanes, half
    # as many per vector.
    mixed = np.uint32(key ^ np.uint32(np.uint32(lo >> 32) * _M2))
    spread = np.uint32(np.uint32(lo & 0xFFFFFFFF) * GOLDEN32)
    top = np.float32(levels)
    for i in range(x.size):                 # branchless so that it vectorises
        h = np.uint32(spread + mixed)
        spread = np.uint32(spread + GOLDEN32)
        h = np.uint32(h ^ (h >> _S16))
        h = np.uint32(h * _M1)
        h = np.uint32(h ^ (h >> _S15))
        h = np.uint32(h * _M2)
        h = np.uint32(h ^ (h >> _S16))
        u = np.float32(h >> _S8) * np.float32(1.0 / 16777216.0)
        v = x[i]
        a = abs(v) * scale
        f = np.floor(a)
        level = min(f + np.float32(1.0) if u < a - f else f, top)
        q[i] = np.int32(-level if v < 0 else level)  # int32: int8 stores do not vectorise


@njit(**JIT)
def _narrow(levels, q):
    for i in range(levels.size):
        q[i] = levels[i]


#: elements per int32 scratch block (small enough to stay in L1): the hashing loop
#: vectorises into the scratch, a second loop narrows it to int8/int16
_SCRATCH = 256


@njit(**JIT)
def _qsgd_range(x, lo, scale, levels, key, q):
    scratch = np.empty(min(x.size, _SCRATCH), np.int32)
    for start in range(0, x.size, _SCRATCH):
        stop = min(x.size, start + _SCRATCH)
        part = scratch[:stop - start]
        _qsgd_levels(x[start:stop], lo + start, scale, levels, key, part)
        _narrow(part, q[start:stop])


@njit(**JIT_PARALLEL)
def _qsgd_kernel(x, scale, levels, key, q):
    n = x.size
    nblocks = (n + _BLOCK - 1) // _BLOCK
    for b in prange(nblocks):
        lo = b * _BLOCK
        hi = min(n, lo + _BLOCK)
        _qsgd_range(x[lo:hi], lo, scale, levels, key, q[lo:hi])


@njit(**JIT_PARALLEL)
def _scale_ints(q, factor, out):
    for i in prange(q.size):
        out[i] = q[i] * factor


def _qsgd_driver(x, levels, key):
    nblocks = max(1, min(num_threads(), x.size // _BLOCK))
    norm = float(np.sqrt(_sumsq(x, nblocks))) if x.size else 0.0
    q = np.empty(x.size, np.int8 if levels <= 127 else np.int16)
    if norm > 0.0 and x.size:
        _qsgd_kernel(x, x.dtype.type(levels / norm), np.int32(levels), key, q)
    else:
        q[:] = 0
    return norm, q


def qsgd_quantize(x, levels, seed):
    """QSGD stochastic quantization to ``levels`` magnitude levels (unbiased).

    ``q_i = sign(x_i) * (floor(levels |x_i| / norm) + Bernoulli(frac))`` with
    ``norm = ||x||_2``, so ``E[qsgd_dequantize(norm, q, levels)] = x`` and each
    element is off by less than ``norm / levels``. The Bernoulli draws come
    from a counter-based 32-bit hash of ``(seed, i)`` with 24-bit resolution
    (bias below ``2**-24`` of a level): identical for any thread count and on
    CuPy. Inputs should be finite.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view.
    levels : int
        ``1 <= levels <= 32767``.
    seed : int
        Non-negative seed; vary it per step.

    Returns
    -------
    norm : float
        ``||x||_2`` (float64; 0.0 for an all-zero or empty x).
    q : ndarray of shape (n,) of int8 (levels <= 127) or int16 (levels > 127)
        Signed levels, ``|q_i| <= levels``.
    """
    flat = flat_float(x)
    levels = check_int(levels, "levels", 1, 32767)
    key = _seed_key(seed)
    if is_cupy(flat):
        from ._cupy import qsgd_quantize as cupy_qsgd
        return cupy_qsgd(flat, levels, key)
    return _qsgd_driver(flat, levels, key)


def qsgd_dequantize(norm, q, levels, dtype=np.float32):
    """Inverse of :func:`qsgd_quantize`: ``norm * q / levels``.

    Parameters
    ----------
    norm : float
    q : ndarray of shape (n,) of int8 or int16
    levels : int
    dtype : float32 or float64

    Returns
    -------
    x : ndarray of shape (n,) of dtype
    """
    levels = check_int(levels, "levels", 1, 32767)
    dtype = check_dtype(dtype)
    if not hasattr(q, "dtype") or q.dtype not in (np.int8, np.int16):
        raise InvalidArgumentTypeError(
            f"q should be an int8 or int16 array from qsgd_quantize, got "
            f"{getattr(q, 'dtype', type(q).__name__)}")
    q = q.reshape(-1)
    factor = dtype.type(float(norm) / levels)
    if is_cupy(q):
        return q.astype(dtype) * factor
    out = np.empty(q.size, dtype)
    _scale_ints(np.ascontiguousarray(q), factor, out)
    return out


# --------------------------------------------------------------------- int8
@njit(**JIT)
def _int8_chunk(x, u, mask, q):
    # absmax on the magnitude bits: an integer max vectorises, a float one does
    # not without ``nnan`` (and NaN, the largest pattern, propagates into the scale)
    top = u[0] & mask
    for i in range(u.size):
        top = max(top, u[i] & mask)
    amax = x.dtype.type(0)
    for i in range(u.size):
        if (u[i] & mask) == top:
            amax = abs(x[i])
            break
    if amax == 0:
        for i in range(x.size):
            q[i] = 0
        return np.float32(0.0)
    s = x.dtype.type(127.0) / amax
    for i in range(x.size):
        q[i] = np.int8(np.int32(np.rint(x[i] * s)))
    return np.float32(amax)


@njit(**JIT_PARALLEL)
def _int8_kernel(x, u, mask, chunk_size, q, scales):
    n = x.size
    for c in prange(scales.size):
        lo = c * chunk_size
        hi = min(n, lo + chunk_size)
        scales[c] = _int8_chunk(x[lo:hi], u[lo:hi], mask, q[lo:hi])


@njit(**JIT)
def _int8_dechunk(q, factor, out):
    for i in range(q.size):
        out[i] = q[i] * factor


@njit(**JIT_PARALLEL)
def _int8_dekernel(q, scales, chunk_size, out):
    n = q.size
    for c in prange(scales.size):
        lo = c * chunk_size
        hi = min(n, lo + chunk_size)
        _int8_dechunk(q[lo:hi], out.dtype.type(scales[c] / 127.0), out[lo:hi])


def int8_quantize(x, chunk_size):
    """Deterministic int8 quantization with one absmax scale per chunk.

    For chunk ``c`` (elements ``c*chunk_size`` to ``(c+1)*chunk_size - 1``),
    ``scales[c] = max |x|`` over the chunk and ``q = rint(x / scales[c] * 127)``,
    so ``|x - q * scales[c] / 127| <= scales[c] / 254`` (half a step, plus
    float32 rounding of the scale). Inputs should be finite.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view of n elements.
    chunk_size : int
        Elements per scale, ``>= 1``.

    Returns
    -------
    q : ndarray of shape (n,) of int8
    scales : ndarray of shape (ceil(n / chunk_size),) of float32
    """
    flat = flat_float(x)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if is_cupy(flat):
        from ._cupy import int8_quantize as cupy_int8
        return cupy_int8(flat, chunk_size)
    q = np.empty(flat.size, np.int8)
    scales = np.empty(n_chunks(flat.size, chunk_size), np.float32)
    if flat.size:
        if flat.dtype == np.float32:
            u, mask = flat.view(np.uint32), np.uint32(0x7FFFFFFF)
        else:
            u, mask = flat.view(np.uint64), np.uint64(0x7FFFFFFFFFFFFFFF)
        _int8_kernel(flat, u, mask, chunk_size, q, scales)
    return q, scales


def int8_dequantize(q, scales, chunk_size, dtype=np.float32):
    """Inverse of :func:`int8_quantize`: ``q * scales[chunk] / 127``.

    Parameters
    ----------
    q : ndarray of shape (n,) of int8
    scales : ndarray of shape (ceil(n / chunk_size),) of float32
    chunk_size : int
    dtype : float32 or float64

    Returns
    -------
    x : ndarray of shape (n,) of dtype
    """
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    dtype = check_dtype(dtype)
    q = flat_payload(q, np.int8, "q", "int8_quantize")
    check_scales(scales, q.size, chunk_size)
    if is_cupy(q):
        from ._cupy import int8_dequantize as cupy_int8_de
        return cupy_int8_de(q, scales, chunk_size, dtype)
    out = np.empty(q.size, dtype)
    if q.size:
        _int8_dekernel(np.ascontiguousarray(q), np.ascontiguousarray(scales, np.float32),
                       chunk_size, out)
    return out
