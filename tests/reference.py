"""Slow, obviously correct NumPy references for the communication tests.

Every rank can regenerate every other rank's input from ``(seed, rank)``, so
the expected result of a collective is computed locally from the inputs of all
ranks with plain NumPy loops, without any communication.
"""
import numpy as np

try:
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - ml_dtypes is a hard dependency
    ml_dtypes = None
    BFLOAT16 = None

__all__ = [
    "BFLOAT16", "ALL_DTYPES", "INT_DTYPES", "FLOAT_DTYPES", "COMPLEX_DTYPES",
    "is_bool", "is_int", "is_float", "is_complex", "dtype_name",
    "make_input", "reference_reduce", "balanced_counts", "offsets",
    "split_blocks", "tolerance", "wide_dtype", "ceil_div",
]

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64,
              np.uint8, np.uint16, np.uint32, np.uint64]
FLOAT_DTYPES = [np.float16, BFLOAT16, np.float32, np.float64, np.longdouble]
COMPLEX_DTYPES = [np.complex64, np.complex128]
ALL_DTYPES = [np.bool_] + INT_DTYPES + FLOAT_DTYPES + COMPLEX_DTYPES


def dtype_name(dt):
    return np.dtype(dt).name


def is_bool(dt):
    return np.dtype(dt) == np.bool_


def is_int(dt):
    return np.dtype(dt).kind in "iu"


def is_float(dt):
    dt = np.dtype(dt)
    return dt.kind == "f" or dt == BFLOAT16


def is_complex(dt):
    return np.dtype(dt).kind == "c"


def wide_dtype(dt):
    """Dtype used to compute float/complex references without rounding."""
    dt = np.dtype(dt)
    if dt == np.longdouble:
        return np.longdouble
    if is_complex(dt):
        return np.clongdouble if dt.itemsize > 16 else np.complex128
    return np.float64


def tolerance(dt):
    """(rtol, atol) for comparing a reduction result of dtype ``dt``."""
    dt = np.dtype(dt)
    if dt == BFLOAT16:
        return 2e-2, 2e-2
    if dt == np.float16:
        return 2e-3, 2e-3
    if dt in (np.float32, np.complex64):
        return 1e-5, 1e-4
    return 1e-12, 1e-12


def _seed(seed, rank):
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(rank) + 7919])


_INT_RANGE = {  # sum of 4 ranks stays in range (wrap-around would still match)
    np.dtype(np.int8): (-30, 31), np.dtype(np.int16): (-8000, 8001),
    np.dtype(np.int32): (-500_000_000, 500_000_001),
    np.dtype(np.int64): (-2**60, 2**60),
    np.dtype(np.uint8): (0, 64), np.dtype(np.uint16): (0, 16000),
    np.dtype(np.uint32): (0, 1_000_000_000), np.dtype(np.uint64): (0, 2**62),
}


def make_input(rank, shape, dtype, seed=0, op="sum"):
    """Deterministic input of ``rank`` for a test identified by ``seed``.

    Always an ndarray (0-d for ``shape=()``), never a NumPy scalar.

    Values are chosen so that reductions over a few ranks are exact (or
    nearly so for 16-bit floats) and so that wrong reinterpretations of the
    bits (floats reduced as integers, signed as unsigned, 64-bit as 32-bit)
    give visibly wrong results.
    """
    dt = np.dtype(dtype)
    rng = _seed(seed, rank)
    shape = tuple(shape) if np.ndim(shape) else (int(shape),)
    small = op in ("prod",)
    if is_bool(dt):
        return np.asarray(rng.random(shape) < 0.5)
    if is_int(dt):
        if small:
            lo, hi = (0, 4) if dt.kind == "u" else (-2, 3)
        else:
            lo, hi = _INT_RANGE[dt]
        return np.asarray(rng.integers(lo, hi, size=shape, dtype=dt))
    if is_float(dt):
        if small:
            vals = rng.choice(np.array([0.5, 1.0, 1.5, 2.0, -1.0]), size=shape)
        elif dt.itemsize <= 2:
            # multiples of 0.5 in [-8, 8): exact in float16 and bfloat16
            vals = rng.integers(-16, 16, size=shape) * 0.5
        else:
            vals = rng.standard_normal(shape) * 10.0
        return np.asarray(vals).astype(dt)
    if is_complex(dt):
        if small:
            re = rng.choice(np.array([0.5, 1.0, 1.5]), size=shape)
            im = rng.choice(np.array([-0.5, 0.0, 0.5]), size=shape)
        else:
            re = rng.standard_normal(shape)
            im = rng.standard_normal(shape)
        return np.asarray(re + 1j * im).astype(dt)
    raise TypeError(f"make_input: unsupported dtype {dt}")


def reference_reduce(arrays, op):
    """Reduce a list of equally shaped arrays with ``op``, one by one.

    bool: sum/max -> logical or, prod/min -> logical and.
    integers: exact in the dtype itself (wrap-around like MPI).
    floats/complex: computed in a wide dtype and rounded once at the end.
    mean = sum / len(arrays).
    """
    op = str(op).lower().split(".")[-1]
    dt = np.dtype(arrays[0].dtype)
    n = len(arrays)
    if is_bool(dt):
        fn = {"sum": np.logical_or, "max": np.logical_or,
              "prod": np.logical_and, "min": np.logical_and}[op]
        acc = np.array(arrays[0], dtype=bool, copy=True)
        for a in arrays[1:]:
            acc = fn(acc, a)
        return acc
    if is_int(dt):
        fn = {"sum": np.add, "prod": np.multiply,
              "min": np.minimum, "max": np.maximum}[op]
        acc = np.array(arrays[0], dtype=dt, copy=True)
        with np.errstate(over="ignore"):
            for a in arrays[1:]:
                acc = fn(acc, a).astype(dt)
        return acc
    wide = wide_dtype(dt)
    fn = {"sum": np.add, "mean": np.add, "prod": np.multiply,
          "min": np.minimum, "max": np.maximum}[op]
    acc = np.array(arrays[0], dtype=wide, copy=True)
    for a in arrays[1:]:
        acc = fn(acc, np.asarray(a, dtype=wide))
    if op == "mean":
        acc = acc / n
    return acc.astype(dt)


def balanced_counts(total, size):
    """DataPartitioner's split: the first ``total % size`` ranks get one more."""
    base, extra = divmod(int(total), int(size))
    return [base + (1 if r < extra else 0) for r in range(size)]


def offsets(counts):
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return out


def split_blocks(x, counts, axis=0):
    """Blocks of ``x`` along ``axis`` with the given sizes (a list of views)."""
    off = offsets(counts)
    assert off[-1] == x.shape[axis], (counts, x.shape, axis)
    index = [slice(None)] * x.ndim
    blocks = []
    for r in range(len(counts)):
        index[axis] = slice(off[r], off[r + 1])
        blocks.append(x[tuple(index)])
    return blocks


def ceil_div(a, b):
    return -(-a // b)

