"""fp16 / bf16 casts against NumPy and ml_dtypes."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from hpcdist.comm.sixteen_bit_floats import half_sum_into
from hpcdist.kernels import from_half, to_half

DTYPES = [np.float32, np.float64]
SPECIALS = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 3.3895314e38, 1e-40, 65504.0,
            1.00390625, 1.01171875, -1.00390625]   # includes round-to-even halfway cases


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind,target", [("float16", np.float16),
                                         ("bfloat16", ml_dtypes.bfloat16)])
@pytest.mark.parametrize("n", [0, 1, 1001, 100_003])
def test_matches_astype(n, dtype, kind, target):
    x = (np.random.default_rng(n).standard_normal(n) * 100).astype(dtype)
    x[:min(n, len(SPECIALS))] = SPECIALS[:min(n, len(SPECIALS))]
    h = to_half(x, kind)
    assert h.dtype == np.dtype(target) and h.shape == (n,)
    with np.errstate(over="ignore"):
        ref = x.astype(target)
    np.testing.assert_array_equal(h.astype(np.float64), ref.astype(np.float64))  # NaN == NaN
    back = from_half(h, dtype)
    assert back.dtype == dtype and back.shape == (n,)
    np.testing.assert_array_equal(back, ref.astype(dtype))


TARGETS = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _bits_sample(step=4099):
    """Every ``step``-th float32 bit pattern (about a million), plus the float16
    rounding boundaries: subnormal steps, the normal range's edges, overflow."""
    sample = np.arange(0, 2**32, step, dtype=np.uint64).astype(np.uint32)
    edges = np.array([0.0, 2.0**-25, 2.0**-25 * 3, 2.0**-24, 2.0**-14 - 2.0**-25, 2.0**-14,
                      65504.0, 65519.996, 65520.0, 65536.0, 1e-45, 3.4e38], np.float32)
    edges = np.concatenate([edges, -edges, np.nextafter(edges, np.float32(np.inf)),
                            np.nextafter(edges, np.float32(-np.inf))]).view(np.uint32)
    return np.concatenate([sample, edges])


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_float32_bit_patterns_round_like_numpy(kind):
    x = _bits_sample().view(np.float32)
    with np.errstate(all="ignore"):
        ref = x.astype(TARGETS[kind]).view(np.uint16)
    got = to_half(x, kind).view(np.uint16)
    nan = np.isnan(x)
    np.testing.assert_array_equal(got[~nan], ref[~nan])
    exponent, mantissa = (0x7C00, 0x03FF) if kind == "float16" else (0x7F80, 0x007F)
    assert ((got[nan] & exponent) == exponent).all() and ((got[nan] & mantissa) != 0).all()


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_every_16_bit_pattern_widens_like_numpy(kind):
    h = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(TARGETS[kind])
    np.testing.assert_array_equal(from_half(h, np.float32).view(np.uint32),
                                  h.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_half_sum_into_adds_like_numpy(kind):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 2**16, 200_000).astype(np.uint16)
    b = rng.integers(0, 2**16, 200_000).astype(np.uint16)
    b[:1000] = a[:1000] ^ 0x8000                  # x + (-x) = +0
    a[1000:1100] = b[1000:1100] = 0x8000          # -0 + -0 = -0
    with np.errstate(all="ignore"):
        ref = (a.view(TARGETS[kind]) + b.view(TARGETS[kind])).view(np.uint16)
    half_sum_into(a, b, kind)
    nan = np.isnan(ref.view(TARGETS[kind]).astype(np.float32))
    np.testing.assert_array_equal(b[~nan], ref[~nan])
    assert np.isnan(b[nan].view(TARGETS[kind]).astype(np.float32)).all()


def test_bad_input():
    with pytest.raises(ValueError, match="kind='float8'"):
        to_half(np.ones(3, np.float32), "float8")
    with pytest.raises(TypeError, match="float32 or float64"):
        to_half(np.ones(3, np.int32), "float16")
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        from_half(np.ones(3, np.float32), np.float32)
    with pytest.raises(TypeError, match="dtype=int8"):
        from_half(np.ones(3, np.float16), np.int8)


_CACHE_SCRIPT = """
import numpy as np
from hpcdist.comm.sixteen_bit_floats import half_sum_into
from hpcdist.kernels import from_half, to_half
bits = np.ones(8, np.float16).view(np.uint16)
for kind in ("float16", "bfloat16"):
    total = bits.copy()
    half_sum_into(bits, total, kind)
    from_half(to_half(np.ones(8, np.float32), kind))
print("ok")
"""


def test_16_bit_kernels_load_from_numba_cache_in_a_new_process(tmp_path):
    """The second process compiles nothing: it loads what the first cached (keyed by
    a flag, not by a compiled function, which is a new object in every process)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))

    def run():
        done = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
        return sorted(p.name for p in tmp_path.rglob("*.nbc"))

    first = run()
    assert any("_sum_kernel" in name for name in first)
    assert run() == first
