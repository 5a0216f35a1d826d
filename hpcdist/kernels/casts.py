"""Half-precision casts: float16 (NumPy's cast) and bfloat16 (bit-level Numba kernel)."""
import ml_dtypes
import numpy as np

from ._arrays import check_dtype, flat_float, is_cupy
from ._numba import JIT_PARALLEL, njit, prange

__all__ = ["to_half", "from_half", "BFLOAT16"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_KINDS = {"float16": np.dtype(np.float16), "bfloat16": BFLOAT16}


@njit(**JIT_PARALLEL)
def _f32_to_bf16(u, out):
    """Round-to-nearest-even float32 -> bfloat16 on the bit patterns; NaN stays a quiet NaN."""
    for i in prange(u.size):
        v = u[i]
        if (v & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
            out[i] = np.uint16((v >> np.uint32(16)) | np.uint32(0x40))
        else:
            rounding = ((v >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
            out[i] = np.uint16((v + rounding) >> np.uint32(16))


def to_half(x, kind="float16"):
    """Cast to a 16-bit float.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view of n elements.
    kind : {"float16", "bfloat16"}
        ``"bfloat16"`` gives ``ml_dtypes.bfloat16`` (round to nearest even; from
        float32 through a Numba bit kernel, from float64 through ml_dtypes).

    Returns
    -------
    h : ndarray of shape (n,) of float16 or bfloat16
        For CuPy input, which has no bfloat16 dtype, ``"bfloat16"`` gives a
        uint16 array of the bfloat16 bit patterns (:func:`from_half` reads it).
    """
    if kind not in _KINDS:
        raise ValueError(f"kind={kind!r} should be 'float16' or 'bfloat16'")
    flat = flat_float(x)
    if is_cupy(flat):
        from ._cupy import to_half as cupy_to_half
        return cupy_to_half(flat, kind)
    if kind == "bfloat16" and flat.dtype == np.float32:
        out = np.empty(flat.size, np.uint16)
        _f32_to_bf16(flat.view(np.uint32), out)
        return out.view(BFLOAT16)
    with np.errstate(over="ignore"):       # overflow to +-inf is the cast's meaning
        return flat.astype(_KINDS[kind])


def from_half(h, dtype=np.float32):
    """Cast a float16/bfloat16 array back to float32 or float64 (exact).

    Parameters
    ----------
    h : ndarray of shape (...) of float16 or bfloat16
    dtype : float32 or float64

    Returns
    -------
    x : ndarray of shape (n,) of dtype
    """
    dtype = check_dtype(dtype)
    if is_cupy(h):
        from ._cupy import from_half as cupy_from_half
        return cupy_from_half(h, dtype)
    if not hasattr(h, "dtype") or np.dtype(h.dtype) not in (np.dtype(np.float16), BFLOAT16):
        raise TypeError(f"h should be a float16 or bfloat16 array, got "
                        f"{getattr(h, 'dtype', type(h).__name__)}")
    return np.ascontiguousarray(h).reshape(-1).astype(dtype)   # exact widening
