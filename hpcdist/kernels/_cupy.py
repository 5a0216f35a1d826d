"""CuPy implementations behind the public kernels (imported only for CuPy arrays).

They mirror the Numba paths: same outputs (QSGD uses the same counter-based
hash, so quantized values are identical to the CPU ones for the same seed).
"""
import cupy
import numpy as np

__all__ = ["topk", "topk_threshold", "qsgd_quantize", "int8_quantize",
           "int8_dequantize", "sign_pack", "sign_unpack", "to_half", "from_half",
           "scatter_add"]

_QSGD = cupy.ElementwiseKernel(
    "T x, T scale, int32 levels, uint32 key", "Q q",
    """
    unsigned int hi = (unsigned int)((long long)i >> 32);
    unsigned int h = (unsigned int)i * 0x9E3779B9u + (key ^ (hi * 0x846CA68Bu));
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    float u = (float)(h >> 8) * (1.0f / 16777216.0f);
    T a = (x < 0 ? -x : x) * scale;
    T f = floor(a);
    int level = (int)f + ((T)u < a - f ? 1 : 0);
    if (level > levels) level = levels;
    q = (Q)(x < 0 ? -level : level);
    """, "hpcdist_qsgd")


def topk(x, k):
    n = x.size
    if k == 0:
        return cupy.empty(0, cupy.int64), cupy.empty(0, x.dtype)
    if k == n:
        return cupy.arange(n, dtype=cupy.int64), x.copy()
    idx = cupy.argpartition(cupy.abs(x), n - k)[n - k:]
    idx = cupy.sort(idx).astype(cupy.int64)
    return idx, x[idx]


def topk_threshold(x, k, sample_size, seed):
    n = x.size
    if k == 0 or k == n or n <= sample_size:
        return topk(x, k)
    rng = np.random.default_rng(seed)
    sample = cupy.abs(x[cupy.asarray(rng.integers(0, n, sample_size))])
    rank = max(1, int(np.ceil(k * sample_size / n)))
    threshold = cupy.partition(sample, sample_size - rank)[sample_size - rank]
    idx = cupy.flatnonzero(cupy.abs(x) >= threshold).astype(cupy.int64)
    if idx.size < (k + 1) // 2:
        return topk(x, k)
    if idx.size > (5 * k + 3) // 4:
        keep, _ = topk(x[idx], k)
        idx = idx[keep]
    return idx, x[idx]


def qsgd_quantize(x, levels, key):
    norm = float(cupy.sqrt(cupy.sum(cupy.square(x.astype(cupy.float64))))) if x.size else 0.0
    q = cupy.zeros(x.size, cupy.int8 if levels <= 127 else cupy.int16)
    if norm > 0.0:
        _QSGD(x, x.dtype.type(levels / norm), np.int32(levels), np.uint32(key), q)
    return norm, q


def _chunked(x, chunk_size, fill=0):
    n = x.size
    nc = -(-n // chunk_size)
    padded = cupy.full(nc * chunk_size, fill, x.dtype)
    padded[:n] = x
    return padded.reshape(nc, chunk_size)


def int8_quantize(x, chunk_size):
    if x.size == 0:
        return cupy.empty(0, cupy.int8), cupy.empty(0, cupy.float32)
    amax = cupy.abs(_chunked(x, chunk_size)).max(axis=1).astype(cupy.float32)
    per = cupy.repeat(amax, chunk_size)[:x.size].astype(x.dtype)
    safe = cupy.where(per == 0, 1, per)
    q = cupy.rint(x * (127 / safe)).astype(cupy.int8)
    return q, amax


def int8_dequantize(q, scales, chunk_size, dtype):
    per = cupy.repeat(scales.astype(dtype) / 127, chunk_size)[:q.size]
    return q.astype(dtype) * per


def sign_pack(x, chunk_size):
    n = x.size
    bits = _chunked((x >= 0).astype(cupy.uint8), 8).astype(cupy.uint8)
    weights = cupy.asarray(1 << np.arange(8), dtype=cupy.uint8)
    packed = (bits * weights).sum(axis=1, dtype=cupy.uint8) if n else cupy.empty(0, cupy.uint8)
    if n == 0:
        return packed, cupy.empty(0, cupy.float32)
    sums = _chunked(cupy.abs(x).astype(cupy.float64), chunk_size).sum(axis=1)
    counts = cupy.full(sums.size, chunk_size, cupy.float64)
    counts[-1] = n - chunk_size * (sums.size - 1)
    return packed, (sums / counts).astype(cupy.float32)


def sign_unpack(packed, scales, n, chunk_size, dtype):
    i = cupy.arange(n, dtype=cupy.int64)
    bits = (packed[i >> 3] >> (i & 7).astype(cupy.uint8)) & 1
    per = scales.astype(dtype)[i // chunk_size]
    return cupy.where(bits == 1, per, -per)


def to_half(x, kind):
    if kind == "float16":
        return x.astype(cupy.float16)
    u = x.astype(cupy.float32).view(cupy.uint32)
    rounded = ((u + (((u >> 16) & 1) + 0x7FFF)) >> 16).astype(cupy.uint16)
    nan = ((u >> 16) | 0x40).astype(cupy.uint16)
    # CuPy has no bfloat16 dtype: the bit patterns travel as uint16
    return cupy.where((u & 0x7FFFFFFF) > 0x7F800000, nan, rounded)


def from_half(h, dtype):
    h = h.reshape(-1)
    if h.dtype == cupy.uint16:           # bfloat16 bit patterns from to_half
        return (h.astype(cupy.uint32) << 16).view(cupy.float32).astype(dtype)
    return h.astype(dtype)


def scatter_add(dense, indices, values, scale):
    cupy.add.at(dense, indices, values * dense.dtype.type(scale))
