"""Half-precision casts and sums: float16 and bfloat16 on their bit patterns.

float32 -> float16/bfloat16 rounds to nearest even in integer arithmetic
(the float16 subnormals through one exact float multiply); float16 ->
float32 reads a 65536-entry table built from NumPy's own cast, bfloat16 ->
float32 is a shift. All of them equal NumPy's and ml_dtypes' casts bit for
bit (NaN stays a quiet NaN). :func:`half_sum_into` adds two 16-bit arrays the
way NumPy and ml_dtypes do (in float32, rounded once), for MPI's user-defined
sum of 16-bit floats.
"""
import ml_dtypes
import numpy as np

from ._arrays import check_dtype, flat_float, is_cupy
from ._numba import JIT, JIT_PARALLEL, njit, prange

__all__ = ["to_half", "from_half", "half_sum_into", "BFLOAT16"]

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_KINDS = {"float16": np.dtype(np.float16), "bfloat16": BFLOAT16}


_U32 = np.uint32
# Numba widens uint32 arithmetic to 64 bits: every step is wrapped back to 32
# bits so that the loops run on 32-bit vector lanes (twice as many per vector)


@njit(**JIT)
def _bf16_bits(v):
    """bfloat16 bits of the float32 bits ``v``: round to nearest even, NaN quiet."""
    if _U32(v & _U32(0x7FFFFFFF)) > _U32(0x7F800000):
        return np.uint16(_U32(_U32(v >> _U32(16)) | _U32(0x40)))
    rounding = _U32(_U32(_U32(v >> _U32(16)) & _U32(1)) + _U32(0x7FFF))
    return np.uint16(_U32(_U32(v + rounding) >> _U32(16)))


@njit(**JIT)
def _f16_bits(bits):
    """float16 bits of the float32 bit pattern ``bits``, as NumPy rounds: to
    nearest even, subnormals included, overflow to inf, NaN quiet."""
    magnitude = _U32(bits & _U32(0x7FFFFFFF))
    sign = _U32(_U32(bits >> _U32(16)) & _U32(0x8000))
    # normal: rebias the exponent (-112 << 23), round the 13 dropped bits to even
    odd = _U32(_U32(magnitude >> _U32(13)) & _U32(1))
    normal = _U32(_U32(_U32(magnitude + _U32(0xC8000FFF)) + odd) >> _U32(13))
    # subnormal (|x| < 2**-14): adding 0.5 makes the float adder round |x| to a
    # multiple of 2**-24, left in the low mantissa bits (an integer subtract
    # after the bit cast, which no fast-math licence can fold away)
    rounded = np.float32(magnitude.view(np.float32) + np.float32(0.5)).view(np.uint32)
    subnormal = _U32(rounded - _U32(0x3F000000))
    h = normal if magnitude >= _U32(0x38800000) else subnormal
    h = _U32(0x7C00) if magnitude >= _U32(0x47800000) else h     # >= 65536: inf
    h = _U32(0x7E00) if magnitude > _U32(0x7F800000) else h      # NaN
    return np.uint16(_U32(h | sign))


@njit(**JIT)
def _bf16_value(h, table):
    """float32 value of the bfloat16 bits ``h`` (``table`` unused: same signature
    as :func:`_f16_value`)."""
    return _U32(_U32(h) << _U32(16)).view(np.float32)


@njit(**JIT)
def _f16_value(h, table):
    """float32 value of the float16 bits ``h``: ``table`` has all 65536 of them."""
    return table[h]


# One kernel per job; the 16-bit format comes in as the functions bits_of
# (float32 bits -> 16-bit bits) and value_of (16-bit bits -> float32), which
# Numba compiles into each specialisation.
@njit(**JIT_PARALLEL)
def _narrow_kernel(u, out, bits_of):
    for i in prange(u.size):
        out[i] = bits_of(u[i])


@njit(**JIT_PARALLEL)
def _widen_kernel(h, table, out, value_of):
    for i in prange(h.size):
        out[i] = value_of(h[i], table)


@njit(**JIT_PARALLEL)
def _sum_kernel(incoming, accumulated, table, value_of, bits_of):
    for i in prange(accumulated.size):
        total = np.float32(value_of(incoming[i], table) + value_of(accumulated[i], table))
        accumulated[i] = bits_of(total.view(np.uint32))


_F16_TABLE = []  # float32 value of every float16 bit pattern, built on first use


def _f16_table():
    if not _F16_TABLE:
        patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        _F16_TABLE.append(patterns.view(np.float16).astype(np.float32))
    return _F16_TABLE[0]


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
        raise ValueError(f"kind={kind!r} should be 'float16' or 'bfloat16'")
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


def _format(kind):
    """``(bits_of, value_of, table)`` of a 16-bit format for the kernels."""
    if kind == "bfloat16":
        return _bf16_bits, _bf16_value, _f16_table()[:1]
    return _f16_bits, _f16_value, _f16_table()


def _narrow_into(x, kind, out):
    """float32 ``x`` rounded into ``out``, the uint16 bit patterns of ``kind``."""
    _narrow_kernel(x.view(np.uint32), out, _format(kind)[0])


def _widen(bits, kind):
    """float32 values of ``bits``, the uint16 bit patterns of ``kind`` (exact)."""
    _, value_of, table = _format(kind)
    out = np.empty(bits.size, np.float32)
    _widen_kernel(bits, table, out, value_of)
    return out


def half_sum_into(incoming, accumulated, kind):
    """``accumulated += incoming`` on 16-bit float bit patterns, in place.

    Each pair is added in float32 and rounded once to ``kind``, as NumPy's
    float16 and ml_dtypes' bfloat16 additions do, so the result equals
    theirs bit for bit (NaN payloads aside).

    Parameters
    ----------
    incoming, accumulated : ndarray of shape (n,) of uint16
        Bit patterns; ``accumulated`` is overwritten with the sums.
    kind : {"float16", "bfloat16"}
    """
    bits_of, value_of, table = _format(kind)
    _sum_kernel(incoming, accumulated, table, value_of, bits_of)


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
    flat = np.ascontiguousarray(h).reshape(-1)
    if dtype == np.float32:
        kind = "bfloat16" if flat.dtype == BFLOAT16 else "float16"
        return _widen(flat.view(np.uint16), kind)
    return flat.astype(dtype)   # exact widening
