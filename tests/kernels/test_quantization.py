"""QSGD and int8 quantization: unbiasedness, error bounds, dtypes, bad input."""
import numpy as np
import pytest

from hpcdist.kernels import int8_dequantize, int8_quantize, qsgd_dequantize, qsgd_quantize

DTYPES = [np.float32, np.float64]
SIZES = [0, 1, 1001, 300_007]


def _data(n, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("levels", [1, 4, 127, 256])
def test_qsgd_within_one_level(n, dtype, levels):
    x = _data(n, dtype)
    norm, q = qsgd_quantize(x, levels, seed=7)
    assert isinstance(norm, float)
    np.testing.assert_allclose(norm, np.linalg.norm(x.astype(np.float64)), rtol=1e-6)
    assert q.dtype == (np.int8 if levels <= 127 else np.int16) and q.shape == (n,)
    assert np.all(np.abs(q.astype(np.int64)) <= levels)
    d = qsgd_dequantize(norm, q, levels, dtype)
    assert d.dtype == dtype and d.shape == (n,)
    step = norm / levels
    assert np.all(np.abs(d - x) <= step * (1 + 1e-5) + 1e-30)
    # floor/ceil of the scaled magnitude, never the wrong sign
    assert np.all((q == 0) | (np.sign(q) == np.sign(x)))
    norm2, q2 = qsgd_quantize(x, levels, seed=7)
    np.testing.assert_array_equal(q, q2)            # pure function of the seed


@pytest.mark.parametrize("dtype", DTYPES)
def test_qsgd_unbiased(dtype):
    x = _data(1001, dtype, seed=2)
    levels, draws = 4, 400
    norm = np.linalg.norm(x.astype(np.float64))
    step = norm / levels
    total = np.zeros(x.size)
    for seed in range(draws):
        nrm, q = qsgd_quantize(x, levels, seed)
        total += qsgd_dequantize(nrm, q, levels, np.float64)
    mean = total / draws
    frac = np.abs(x) / step - np.floor(np.abs(x) / step)
    sigma = step * np.sqrt(frac * (1 - frac) / draws)  # std of the mean of Bernoulli steps
    assert np.all(np.abs(mean - x) <= 6 * sigma + 1e-5 * step)


def _reference_qsgd(x, levels, seed):
    """Slow NumPy QSGD with the documented counter-based hash (lowbias32)."""
    from hpcdist.kernels.quantization import _stream_key
    key = np.uint32(_stream_key(seed))
    i = np.arange(x.size, dtype=np.int64)
    with np.errstate(over="ignore"):
        h = i.astype(np.uint32) * np.uint32(0x9E3779B9)
        h = h + (key ^ ((i >> 32).astype(np.uint32) * np.uint32(0x846CA68B)))
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x7FEB352D)
        h ^= h >> np.uint32(15)
        h *= np.uint32(0x846CA68B)
        h ^= h >> np.uint32(16)
    u = (h >> np.uint32(8)).astype(np.float32) * np.float32(2.0**-24)
    norm = np.linalg.norm(x.astype(np.float64))
    a = np.abs(x) * x.dtype.type(levels / norm)
    f = np.floor(a)
    level = np.minimum(f.astype(np.int64) + (u < a - f), levels)
    return norm, np.where(x < 0, -level, level)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("levels", [3, 127, 1000])
def test_qsgd_matches_numpy_reference(dtype, levels):
    x = _data(100_003, dtype, seed=4)
    norm, q = qsgd_quantize(x, levels, seed=123)
    ref_norm, ref_q = _reference_qsgd(x, levels, 123)
    np.testing.assert_allclose(norm, ref_norm, rtol=1e-6)
    assert np.mean(q != ref_q) < 1e-4        # identical but for the rounding of the norm
    assert np.all(np.abs(q - ref_q) <= 1)


def test_qsgd_zero_vector():
    norm, q = qsgd_quantize(np.zeros(10, np.float32), 8, 0)
    assert norm == 0.0 and not q.any()
    np.testing.assert_array_equal(qsgd_dequantize(norm, q, 8, np.float32), 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("chunk_size", [1, 7, 4096])
def test_int8_error_bound(n, dtype, chunk_size):
    x = _data(n, dtype) * 10
    q, scales = int8_quantize(x, chunk_size)
    nc = -(-n // chunk_size)
    assert q.dtype == np.int8 and q.shape == (n,)
    assert scales.dtype == np.float32 and scales.shape == (nc,)
    padded = np.zeros(nc * chunk_size)
    padded[:n] = np.abs(x)
    np.testing.assert_allclose(scales, padded.reshape(nc, chunk_size).max(axis=1), rtol=1e-7)
    d = int8_dequantize(q, scales, chunk_size, dtype)
    assert d.dtype == dtype and d.shape == (n,)
    per = np.repeat(scales.astype(np.float64), chunk_size)[:n]
    assert np.all(np.abs(d - x) <= per / 254 * (1 + 1e-5) + 1e-6 * per)
    ref = np.rint(np.where(per > 0, x / np.where(per > 0, per, 1) * 127, 0))
    assert np.max(np.abs(q - ref), initial=0) <= 1     # NumPy reference up to rounding of the scale


def test_int8_zero_chunk():
    x = np.zeros(10, np.float32)
    x[8] = 2.0
    q, s = int8_quantize(x, 4)
    np.testing.assert_array_equal(s, [0, 0, 2])
    np.testing.assert_array_equal(int8_dequantize(q, s, 4), x)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: qsgd_quantize(np.ones(3), 0, 0), ValueError, r"levels=0 should be in \[1, 32767\]"),
    (lambda: qsgd_quantize(np.ones(3), 40000, 0), ValueError, r"levels=40000"),
    (lambda: qsgd_quantize(np.arange(3), 4, 0), TypeError, r"float32 or float64"),
    (lambda: qsgd_quantize(np.ones(3), 4, -1), ValueError, r"seed=-1"),
    (lambda: qsgd_dequantize(1.0, np.ones(3, np.int32), 4), TypeError, r"int8 or int16"),
    (lambda: qsgd_dequantize(1.0, np.ones(3, np.int8), 4, np.int32), TypeError, r"float32"),
    (lambda: int8_quantize(np.ones(3), 0), ValueError, r"chunk_size=0 should be >= 1"),
    (lambda: int8_quantize(np.ones(3, np.int16), 2), TypeError, r"float32 or float64"),
    (lambda: int8_dequantize(np.ones(3, np.int8), np.ones(1, np.float32), 2), ValueError,
     r"scales has 1 entries"),
])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
