"""16-bit floats on their bit patterns: float16 and bfloat16 <-> float32, and sums.

The MPI reduction of 16-bit floats (:mod:`hpcdist.comm.ops`) adds them with
:func:`half_sum_into`; :mod:`hpcdist.kernels.casts` builds its casts on the
same bit functions. float32 -> 16 bits rounds to nearest even (float16
subnormals included, overflow to inf, NaN quiet); 16 bits -> float32 is exact
(a 65536-entry table built from NumPy's own cast for float16, a shift for
bfloat16). Every result equals NumPy's and ml_dtypes' bit for bit, NaN
payloads aside.
"""
import numpy as np

from .._numba import JIT, JIT_PARALLEL, njit, prange

__all__ = ["f16_bits", "bf16_bits", "f16_value", "bf16_value", "half_bits", "half_value",
           "f16_table", "half_format", "half_sum_into"]

_U32 = np.uint32
# Numba widens uint32 arithmetic to 64 bits: every step is wrapped back to 32
# bits so that the loops run on 32-bit vector lanes (twice as many per vector)


@njit(**JIT)
def bf16_bits(v):
    """bfloat16 bits of the float32 bits ``v``: round to nearest even, NaN quiet."""
    if _U32(v & _U32(0x7FFFFFFF)) > _U32(0x7F800000):
        return np.uint16(_U32(_U32(v >> _U32(16)) | _U32(0x40)))
    rounding = _U32(_U32(_U32(v >> _U32(16)) & _U32(1)) + _U32(0x7FFF))
    return np.uint16(_U32(_U32(v + rounding) >> _U32(16)))


@njit(**JIT)
def f16_bits(bits):
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
def bf16_value(h, table):
    """float32 value of the bfloat16 bits ``h`` (``table`` unused: same signature
    as :func:`f16_value`)."""
    return _U32(_U32(h) << _U32(16)).view(np.float32)


@njit(**JIT)
def f16_value(h, table):
    """float32 value of the float16 bits ``h``: ``table`` has all 65536 of them."""
    return table[h]


@njit(**JIT)
def half_bits(bits, bfloat):
    """16-bit bits of the float32 bits ``bits``: bfloat16 if ``bfloat``, else float16."""
    return bf16_bits(bits) if bfloat else f16_bits(bits)


@njit(**JIT)
def half_value(h, table, bfloat):
    """float32 value of the 16-bit bits ``h``: bfloat16 if ``bfloat``, else float16
    (``table``: :func:`f16_table`)."""
    return bf16_value(h, table) if bfloat else f16_value(h, table)


_F16_TABLE = []  # float32 value of every float16 bit pattern, built on first use
_NO_TABLE = np.zeros(1, np.float32)  # bfloat16's value_of takes a table it does not read


def f16_table():
    """float32 value of every float16 bit pattern (65536 entries)."""
    if not _F16_TABLE:
        patterns = np.arange(65536, dtype=np.uint32).astype(np.uint16)
        _F16_TABLE.append(patterns.view(np.float16).astype(np.float32))
    return _F16_TABLE[0]


def half_format(kind):
    """``(bfloat, table)`` of ``kind`` ("float16" or "bfloat16"): what the kernels
    pass to :func:`half_bits` and :func:`half_value`.

    A flag, not the bit functions themselves: Numba keys a cached kernel that
    takes a compiled function as an argument by that function object, so every
    process compiled and cached it anew (a cache growing without end), and
    saving the index could fail with "underlying object has vanished", which
    inside an MPI reduction aborted the job. The branch on the flag is
    loop-invariant; LLVM takes it out of the loops.
    """
    if kind == "bfloat16":
        return True, _NO_TABLE
    return False, f16_table()


@njit(**JIT_PARALLEL)
def _sum_kernel(incoming, accumulated, table, bfloat):
    for i in prange(accumulated.size):
        total = np.float32(half_value(incoming[i], table, bfloat)
                           + half_value(accumulated[i], table, bfloat))
        accumulated[i] = half_bits(total.view(np.uint32), bfloat)


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
    bfloat, table = half_format(kind)
    _sum_kernel(incoming, accumulated, table, bfloat)
