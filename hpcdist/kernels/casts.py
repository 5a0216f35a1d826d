"""Half-precision casts: float16 and bfloat16 on their bit patterns.

Parallel kernels over the bit functions of :mod:`hpcdist.comm.sixteen_bit_floats` (which
the MPI sum of 16-bit floats uses too): from float32, rounding to nearest
even; to float32, exact. Both equal NumPy's and ml_dtypes' casts bit for bit.
"""
import ml_dtypes
import numpy as np

from .._numba import JIT_PARALLEL, njit, prange
from ..comm.sixteen_bit_floats import half_bits, half_format, half_value
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._arrays import check_dtype, flat_float, is_cupy

__all__ = ["to_half", "from_half", "BFLOAT16"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_KINDS = {"float16": np.dtype(np.float16), "bfloat16": BFLOAT16}


# The 16-bit format comes in as a flag (bfloat16 or float16) for the bit
# functions of hpcdist.comm.sixteen_bit_floats (see half_format for why not the functions).
@njit(**JIT_PARALLEL)
def _narrow_kernel(u, out, bfloat):
    for i in prange(u.size):
        out[i] = half_bits(u[i], bfloat)


@njit(**JIT_PARALLEL)
def _widen_kernel(h, table, out, bfloat):
    for i in prange(h.size):
        out[i] = half_value(h[i], table, bfloat)


def to_half(x, kind="float16"):
    """Cast to a 16-bit float.

    Parameters
    ----------
    x : ndarray of shape (...) of float32 or float64
        Any shape, taken as a flat C-order view of n elements.
    kind : {"float16", "bfloat16"}
        ``"bfloat16"`` gives ``ml_dtypes.bfloat16``. Rounding to nearest even;
        from float32 through a Numba bit kernel, from float64 through NumPy's
        and ml_dtypes' casts (one rounding, not two).

    Returns
    -------
    h : ndarray of shape (n,) of float16 or bfloat16
        For CuPy input, which has no bfloat16 dtype, ``"bfloat16"`` gives a
        uint16 array of the bfloat16 bit patterns (:func:`from_half` reads it).
    """
    if kind not in _KINDS:
        raise InvalidArgumentError(f"kind={kind!r} should be 'float16' or 'bfloat16'")
    flat = flat_float(x)
    if is_cupy(flat):
        from ._cupy import to_half as cupy_to_half
        return cupy_to_half(flat, kind)
    if flat.dtype == np.float32:
        out = np.empty(flat.size, np.uint16)
        _narrow_into(flat, kind, out)
        return out.view(_KINDS[kind])
    with np.errstate(over="ignore"):       # overflow to +-inf is the cast's meaning
        return flat.astype(_KINDS[kind])


def _narrow_into(x, kind, out):
    """float32 ``x`` rounded into ``out``, the uint16 bit patterns of ``kind``."""
    _narrow_kernel(x.view(np.uint32), out, half_format(kind)[0])


def _widen(bits, kind):
    """float32 values of ``bits``, the uint16 bit patterns of ``kind`` (exact)."""
    bfloat, table = half_format(kind)
    out = np.empty(bits.size, np.float32)
    _widen_kernel(bits, table, out, bfloat)
    return out


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
        raise InvalidArgumentTypeError(f"h should be a float16 or bfloat16 array, got "
                                       f"{getattr(h, 'dtype', type(h).__name__)}")
    flat = np.ascontiguousarray(h).reshape(-1)
    if dtype == np.float32:
        kind = "bfloat16" if flat.dtype == BFLOAT16 else "float16"
        return _widen(flat.view(np.uint16), kind)
    return flat.astype(dtype)   # exact widening
