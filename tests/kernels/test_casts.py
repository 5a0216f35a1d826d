"""fp16 / bf16 casts against NumPy and ml_dtypes."""
import ml_dtypes
import numpy as np
import pytest

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


def test_bad_input():
    with pytest.raises(ValueError, match="kind='float8'"):
        to_half(np.ones(3, np.float32), "float8")
    with pytest.raises(TypeError, match="float32 or float64"):
        to_half(np.ones(3, np.int32), "float16")
    with pytest.raises(TypeError, match="float16 or bfloat16"):
        from_half(np.ones(3, np.float32), np.float32)
    with pytest.raises(TypeError, match="dtype=int8"):
        from_half(np.ones(3, np.float16), np.int8)
