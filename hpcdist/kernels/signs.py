"""1-bit sign compression: 8 signs per byte plus one mean-magnitude scale per chunk."""
import math

import numpy as np

from .._checks import check_int
from .._numba import JIT, JIT_PARALLEL, njit, prange
from ..exceptions import InvalidArgumentError
from ._arrays import (
    check_dtype,
    check_same_size,
    check_scales,
    flat_float,
    flat_out,
    flat_payload,
    is_cupy,
    n_chunks,
)

__all__ = ["sign_pack", "sign_unpack", "sign_subtract", "sign_pack_feedback"]

_BYTES_PER_BLOCK = 1 << 13
#: elements per block of :func:`sign_pack_feedback` (rounded to whole bytes and chunks): the
#: block stays in L2 between its passes
_FEEDBACK_BLOCK = 1 << 15


@njit(**JIT)
def _pack_range(x, packed):
    """Pack ``x`` (8 * packed.size elements, the last byte possibly partial)."""
    nfull = x.size // 8
    for j in range(nfull):
        byte = 0
        for b in range(8):
            byte |= np.uint8(x[8 * j + b] >= 0) << b
        packed[j] = byte
    if nfull < packed.size:
        byte = 0
        for b in range(x.size - 8 * nfull):
            byte |= np.uint8(x[8 * nfull + b] >= 0) << b
        packed[nfull] = byte


@njit(**JIT)
def _mean_abs(x):
    s = 0.0
    for i in range(x.size):
        s += abs(np.float64(x[i]))
    return s / x.size


@njit(**JIT_PARALLEL)
def _sign_pack_kernel(x, chunk_size, packed, scales):
    n = x.size
    nblocks = (packed.size + _BYTES_PER_BLOCK - 1) // _BYTES_PER_BLOCK
    for blk in prange(nblocks):
        jlo = blk * _BYTES_PER_BLOCK
        jhi = min(packed.size, jlo + _BYTES_PER_BLOCK)
        _pack_range(x[8 * jlo:min(n, 8 * jhi)], packed[jlo:jhi])
    for c in prange(scales.size):
        scales[c] = np.float32(_mean_abs(x[c * chunk_size:min(n, (c + 1) * chunk_size)]))


@njit(**JIT)
def _signed(scale, byte, bit):
    """``+scale`` where bit ``bit`` of ``byte`` is set, else ``-scale``."""
    return scale if (byte >> np.uint8(bit)) & np.uint8(1) else -scale


@njit(**JIT)
def _unpack_element(packed, k, scale, out, i, subtract):
    value = _signed(scale, packed[k // 8], k % 8)
    if subtract:
        out[i] -= value
    else:
        out[i] = value


@njit(**JIT)
def _unpack_range(packed, lo, scale, out, subtract):
    """``out`` (elements ``lo:lo + out.size``) set to, or decreased by, the signed scale.

    Whole bytes are read once for 8 elements (a chunk that does not start on
    a byte boundary takes its first and last elements one by one), not once
    per element.
    """
    s = out.dtype.type(scale)
    n = out.size
    head = min(n, (8 - lo % 8) % 8)
    for i in range(head):
        _unpack_element(packed, lo + i, s, out, i, subtract)
    first = (lo + head) // 8
    nbytes = (n - head) // 8
    body = out[head:head + 8 * nbytes]
    for j in range(nbytes):
        byte = packed[first + j]
        for b in range(8):
            value = _signed(s, byte, b)
            if subtract:
                body[8 * j + b] -= value
            else:
                body[8 * j + b] = value
    for i in range(head + 8 * nbytes, n):
        _unpack_element(packed, lo + i, s, out, i, subtract)


@njit(**JIT_PARALLEL)
def _sign_unpack_kernel(packed, scales, chunk_size, out, subtract):
    n = out.size
    for c in prange(scales.size):
        lo = c * chunk_size
        _unpack_range(packed, lo, scales[c], out[lo:min(n, lo + chunk_size)], subtract)


@njit(**JIT)
def _pack_feedback_block(residual, x, lo, hi, chunk_size, packed, scales):
    """Elements ``lo:hi`` (``lo`` on a byte and chunk boundary, ``hi`` too or the end):
    ``residual += x``, its signs packed and chunk scales taken, what they send subtracted."""
    r = residual[lo:hi]
    xs = x[lo:hi]
    for i in range(r.size):
        r[i] += xs[i]
    _pack_range(r, packed[lo // 8:(hi + 7) // 8])
    for c in range(lo // chunk_size, (hi + chunk_size - 1) // chunk_size):
        a = c * chunk_size
        b = min(hi, a + chunk_size)
        scales[c] = np.float32(_mean_abs(residual[a:b]))
        _unpack_range(packed, a, scales[c], residual[a:b], True)


@njit(**JIT_PARALLEL)
def _pack_feedback_kernel(residual, x, chunk_size, block, packed, scales):
    n = residual.size
    for b in prange((n + block - 1) // block):
        _pack_feedback_block(residual, x, b * block, min(n, (b + 1) * block), chunk_size,
                             packed, scales)


def sign_pack(x, chunk_size):
    """Pack the signs of ``x`` into bits, with the mean ``|x|`` of each chunk as scale.

    Bit ``b`` of byte ``j`` holds element ``8*j + b`` (little-endian bit order,
    as ``np.packbits(..., bitorder="little")``) and is 1 where ``x >= 0``
    (so -0.0 counts as positive and NaN as negative). The payload is exactly
    ``ceil(n/8) + 4*ceil(n/chunk_size)`` bytes.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view of n elements.
    chunk_size : int
        Elements per scale, ``>= 1``.

    Returns
    -------
    packed : ndarray of shape (ceil(n / 8),) of uint8
    scales : ndarray of shape (ceil(n / chunk_size),) of float32
        ``mean(|x|)`` over each chunk (the last one possibly shorter).
    """
    flat = flat_float(x)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if is_cupy(flat):
        from ._cupy import sign_pack as cupy_sign_pack
        return cupy_sign_pack(flat, chunk_size)
    packed = np.empty(n_chunks(flat.size, 8), np.uint8)
    scales = np.empty(n_chunks(flat.size, chunk_size), np.float32)
    if flat.size:
        _sign_pack_kernel(flat, chunk_size, packed, scales)
    return packed, scales


def _checked_payload(packed, scales, n, chunk_size):
    """``(packed, chunk_size)`` validated for ``n`` elements (clear errors otherwise)."""
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    packed = flat_payload(packed, np.uint8, "packed", "sign_pack")
    if packed.size != n_chunks(n, 8):
        raise InvalidArgumentError(f"packed has {packed.size} bytes; n={n} needs {n_chunks(n, 8)}")
    check_scales(scales, n, chunk_size)
    return packed, chunk_size


def sign_unpack(packed, scales, n, chunk_size, dtype=np.float32):
    """Inverse of :func:`sign_pack`: ``+scale`` where the bit is set, ``-scale`` elsewhere.

    Parameters
    ----------
    packed : ndarray of shape (ceil(n / 8),) of uint8
    scales : ndarray of shape (ceil(n / chunk_size),) of float32
    n : int
        Number of elements.
    chunk_size : int
    dtype : float32 or float64

    Returns
    -------
    x : ndarray of shape (n,) of dtype
    """
    n = check_int(n, "n", 0)
    dtype = check_dtype(dtype)
    packed, chunk_size = _checked_payload(packed, scales, n, chunk_size)
    if is_cupy(packed):
        from ._cupy import sign_unpack as cupy_sign_unpack
        return cupy_sign_unpack(packed, scales, n, chunk_size, dtype)
    out = np.empty(n, dtype)
    if n:
        _sign_unpack_kernel(np.ascontiguousarray(packed),
                            np.ascontiguousarray(scales, np.float32), chunk_size, out, False)
    return out


def sign_subtract(out, packed, scales, chunk_size):
    """``out -= sign_unpack(packed, scales, out.size, chunk_size)`` in place, in
    one pass and without the unpacked array (error feedback's residual update).

    Parameters
    ----------
    out : ndarray of shape (n,) of float32 or float64, C-contiguous, writable
    packed : ndarray of shape (ceil(n / 8),) of uint8
    scales : ndarray of shape (ceil(n / chunk_size),) of float32
    chunk_size : int

    Returns
    -------
    out : the same array, updated.
    """
    packed, chunk_size = _checked_payload(packed, scales, out.size, chunk_size)
    if out.size:
        _sign_unpack_kernel(np.ascontiguousarray(packed),
                            np.ascontiguousarray(scales, np.float32), chunk_size, out, True)
    return out


def sign_pack_feedback(residual, x, chunk_size):
    """Error feedback around sign compression, in one pass: ``residual += x``, then
    ``packed, scales = sign_pack(residual, chunk_size)``, then ``residual -=
    sign_unpack(packed, scales, ...)``.

    The same results, bit for bit, as those three calls, which read and
    write the residual three times; here each block of 32K elements goes
    through the three steps while it is in cache.

    Parameters
    ----------
    residual : ndarray of shape (...) of float32 or float64, C-contiguous, writable
        The error-feedback residual ``e``; on return ``g + e`` minus what the
        payload sends.
    x : ndarray with residual.size elements
        The gradient ``g`` (cast to residual's dtype if needed).
    chunk_size : int
        Elements per scale (``>= 1``).

    Returns
    -------
    (packed, scales)
        The payload of ``sign_pack(residual + x, chunk_size)``.
    """
    flat = flat_out(residual, "residual")
    xf = flat_float(x)
    check_same_size(flat, xf, "residual", "x")
    xf = xf.astype(flat.dtype, copy=False)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if is_cupy(flat):
        flat += xf
        packed, scales = sign_pack(flat, chunk_size)
        flat -= sign_unpack(packed, scales, flat.size, chunk_size, flat.dtype)
        return packed, scales
    packed = np.empty(n_chunks(flat.size, 8), np.uint8)
    scales = np.empty(n_chunks(flat.size, chunk_size), np.float32)
    if flat.size:
        group = 8 * chunk_size // math.gcd(8, chunk_size)  # whole bytes and whole chunks
        block = group * max(1, _FEEDBACK_BLOCK // group)
        _pack_feedback_kernel(flat, xf, chunk_size, block, packed, scales)
    return packed, scales
