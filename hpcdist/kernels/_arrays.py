"""Validation and array-type dispatch shared by the public kernel functions."""
import numpy as np

from .._arrays import is_cupy
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["aligned_empty", "is_cupy", "flat_float", "flat_out", "check_same_size",
           "check_dtype", "n_chunks", "FLOAT_DTYPES"]

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def aligned_empty(shape, dtype, alignment=64):
    """An uninitialised C-contiguous NumPy array whose data start on an ``alignment``-byte
    boundary (NumPy only guarantees 16: a 64-byte vector load of a row would then span two
    cache lines)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    offset = -raw.ctypes.data % alignment
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def _describe(x):
    return f"{type(x).__name__} of dtype {getattr(x, 'dtype', '?')}"


def flat_float(x, name="x"):
    """Return a 1-D contiguous view of a float32/float64 array ``x``.

    Any shape is accepted; a non-contiguous array is copied once.
    """
    if not hasattr(x, "dtype") or not hasattr(x, "reshape"):
        raise InvalidArgumentTypeError(
            f"{name} should be a NumPy or CuPy array, got {type(x).__name__}; "
            f"convert it with numpy.asarray")
    if np.dtype(x.dtype) not in FLOAT_DTYPES:
        raise InvalidArgumentTypeError(
            f"{name} has dtype {x.dtype}; it should be float32 or float64 "
            f"(convert with {name}.astype(numpy.float32))")
    if is_cupy(x):
        import cupy
        return cupy.ascontiguousarray(x).reshape(-1)
    return np.ascontiguousarray(x).reshape(-1)


def flat_out(out, name="out"):
    """Return a writable 1-D view of a contiguous float array updated in place."""
    if not hasattr(out, "dtype") or np.dtype(out.dtype) not in FLOAT_DTYPES:
        raise InvalidArgumentTypeError(
            f"{name} should be a float32 or float64 array, got {_describe(out)}")
    if not out.flags.c_contiguous:
        raise InvalidArgumentError(f"{name} is updated in place and must be C-contiguous; "
                                   f"pass numpy.ascontiguousarray({name}) and use the result")
    if not is_cupy(out) and not out.flags.writeable:
        raise InvalidArgumentError(f"{name} is read-only; pass a writable array")
    return out.reshape(-1)


def check_same_size(a, b, name_a, name_b):
    """A clear error unless arrays ``a`` and ``b`` have as many elements."""
    if a.size != b.size:
        raise InvalidArgumentError(f"{name_b} has {b.size} elements but {name_a} has {a.size}; "
                                   f"they should match")


def check_dtype(dtype, name="dtype"):
    """``dtype`` as float32/float64 NumPy dtype or a clear error."""
    try:
        dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentTypeError(f"{name}={dtype!r} is not a dtype; use numpy.float32 or "
                                       "numpy.float64") from None
    if dtype not in FLOAT_DTYPES:
        raise InvalidArgumentTypeError(f"{name}={dtype} should be float32 or float64")
    return dtype


def n_chunks(n, chunk_size):
    """``ceil(n / chunk_size)``."""
    return -(-n // chunk_size)


def flat_payload(array, dtype, name, producer):
    """``array`` flattened, after checking it is a ``dtype`` payload made by ``producer``."""
    if not hasattr(array, "dtype") or array.dtype != dtype:
        raise InvalidArgumentTypeError(
            f"{name} should be a {np.dtype(dtype).name} array from {producer}, got "
            f"{getattr(array, 'dtype', type(array).__name__)}")
    return array.reshape(-1)


def check_scales(scales, n, chunk_size):
    """Raise unless ``scales`` has one entry per chunk of ``n`` elements."""
    if scales.size != n_chunks(n, chunk_size):
        raise InvalidArgumentError(
            f"scales has {scales.size} entries; n={n} with chunk_size={chunk_size} "
            f"needs {n_chunks(n, chunk_size)}")
