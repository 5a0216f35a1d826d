"""Fused in-place updates: sparse scatter-add, scale-and-add, error-feedback residual."""
import numpy as np

from .._numba import JIT, JIT_PARALLEL, njit, prange
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._arrays import check_same_size, flat_float, flat_out, is_cupy

__all__ = ["scatter_add", "scale_add", "error_feedback_update"]


@njit(**JIT)
def _scatter_add_kernel(dense, indices, values, scale):
    for j in range(indices.size):          # serial: duplicate indices accumulate
        dense[indices[j]] += scale * values[j]


@njit(**JIT_PARALLEL)
def _scale_add_kernel(out, x, alpha):
    for i in prange(out.size):
        out[i] += alpha * x[i]


@njit(**JIT)
def _scale_add_serial(out, x, alpha):
    for i in range(out.size):
        out[i] += alpha * x[i]


#: below this many elements one thread is faster than waking a thread pool
#: (a parameter update of a few MiB runs in well under a millisecond)
PARALLEL_MIN_SIZE = 1 << 22


@njit(**JIT_PARALLEL)
def _difference_kernel(out, a, b):
    for i in prange(out.size):
        out[i] = a[i] - b[i]


def scatter_add(dense, indices, values, scale=1.0):
    """``dense[indices] += scale * values`` in place, accumulating duplicate indices.

    Parameters
    ----------
    dense : ndarray of shape (...) of float32 or float64
        C-contiguous and writable; addressed through its flat C-order view.
    indices : ndarray of shape (k,) of integers
        Flat indices in ``[0, dense.size)``; duplicates add up (unlike
        ``dense[indices] += values``).
    values : ndarray of shape (k,) of float
        Cast to ``dense.dtype`` if needed.
    scale : float

    Returns
    -------
    dense : the same array, updated.
    """
    flat = flat_out(dense, "dense")
    if not hasattr(indices, "dtype") or indices.dtype.kind not in "iu":
        raise InvalidArgumentTypeError(f"indices should be an integer array, got "
                                       f"{getattr(indices, 'dtype', type(indices).__name__)}")
    indices = indices.reshape(-1)
    vals = flat_float(values, "values")
    check_same_size(indices, vals, "indices", "values")
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= flat.size):
        raise InvalidArgumentError(f"indices span [{int(indices.min())}, {int(indices.max())}] but "
                                   f"should lie in [0, {flat.size}) for dense of size {flat.size}")
    if is_cupy(flat):
        from ._cupy import scatter_add as cupy_scatter_add
        cupy_scatter_add(flat, indices, vals.astype(flat.dtype, copy=False), scale)
        return dense
    if indices.size:
        _scatter_add_kernel(flat, np.ascontiguousarray(indices, np.int64),
                            vals.astype(flat.dtype, copy=False), flat.dtype.type(scale))
    return dense


def scale_add(out, x, alpha):
    """``out += alpha * x`` in place, fused in one pass.

    Parameters
    ----------
    out : ndarray of shape (...) of float32 or float64, C-contiguous, writable
    x : ndarray with out.size elements (cast to out.dtype if needed)
    alpha : float

    Returns
    -------
    out : the same array, updated.
    """
    flat = flat_out(out, "out")
    xf = flat_float(x)
    check_same_size(flat, xf, "out", "x")
    xf = xf.astype(flat.dtype, copy=False)
    if is_cupy(flat):
        flat += flat.dtype.type(alpha) * xf
        return out
    kernel = _scale_add_kernel if flat.size >= PARALLEL_MIN_SIZE else _scale_add_serial
    kernel(flat, xf, flat.dtype.type(alpha))
    return out


def error_feedback_update(residual, corrected, decompressed):
    """``residual[:] = corrected - decompressed`` in place, fused in one pass.

    With ``corrected = g + e`` this is the error-feedback step
    ``e <- g + e - decompress(compress(g + e))``.

    Parameters
    ----------
    residual : ndarray of shape (...) of float32 or float64, C-contiguous, writable
    corrected, decompressed : ndarray with residual.size elements

    Returns
    -------
    residual : the same array, updated.
    """
    flat = flat_out(residual, "residual")
    a = flat_float(corrected, "corrected")
    b = flat_float(decompressed, "decompressed")
    check_same_size(flat, a, "residual", "corrected")
    check_same_size(flat, b, "residual", "decompressed")
    a = a.astype(flat.dtype, copy=False)
    b = b.astype(flat.dtype, copy=False)
    if is_cupy(flat):
        import cupy
        cupy.subtract(a, b, out=flat)
        return residual
    _difference_kernel(flat, a, b)
    return residual
