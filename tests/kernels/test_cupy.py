"""CuPy paths against the NumPy paths (needs a CUDA GPU and CuPy)."""
import numpy as np
import pytest

import hpcdist.kernels as K

cp = pytest.importorskip("cupy")
pytestmark = pytest.mark.gpu

try:
    _HAVE_GPU = cp.cuda.runtime.getDeviceCount() > 0
except Exception:  # noqa: BLE001 - any CUDA failure means no usable GPU
    _HAVE_GPU = False
if not _HAVE_GPU:
    pytest.skip("no CUDA GPU", allow_module_level=True)

DTYPES = [np.float32, np.float64]


def _pair(n, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(n).astype(dtype)
    return x, cp.asarray(x)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(0, 0), (1, 1), (1001, 10), (200_001, 2000)])
def test_topk(n, k, dtype):
    x, g = _pair(n, dtype)
    idx, vals = K.topk(g, k)
    assert isinstance(idx, cp.ndarray) and idx.dtype == np.int64
    ref_idx, ref_vals = K.topk(x, k)
    np.testing.assert_array_equal(np.sort(np.abs(cp.asnumpy(vals))), np.sort(np.abs(ref_vals)))
    np.testing.assert_array_equal(cp.asnumpy(vals), x[cp.asnumpy(idx)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_threshold(dtype):
    x, g = _pair(2_000_003, dtype)
    idx, vals = K.topk_threshold(g, 20_000, seed=3)
    assert 10_000 <= idx.size <= 25_000
    np.testing.assert_array_equal(cp.asnumpy(vals), x[cp.asnumpy(idx)])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("levels", [4, 256])
def test_qsgd_identical_to_cpu(dtype, levels):
    x, g = _pair(100_003, dtype)
    norm, q = K.qsgd_quantize(x, levels, 9)
    gnorm, gq = K.qsgd_quantize(g, levels, 9)
    np.testing.assert_allclose(gnorm, norm, rtol=1e-6)
    assert np.mean(cp.asnumpy(gq) != q) < 1e-3        # same hash; rare last-bit differences
    d = K.qsgd_dequantize(gnorm, gq, levels, dtype)
    np.testing.assert_allclose(cp.asnumpy(d),
                               K.qsgd_dequantize(norm, cp.asnumpy(gq), levels, dtype),
                               rtol=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 1001, 100_003])
def test_int8_and_signs(n, dtype):
    x, g = _pair(n, dtype)
    q, s = K.int8_quantize(x, 100)
    gq, gs = K.int8_quantize(g, 100)
    np.testing.assert_allclose(cp.asnumpy(gs), s, rtol=1e-7)
    assert np.max(np.abs(cp.asnumpy(gq).astype(int) - q), initial=0) <= 1
    np.testing.assert_allclose(cp.asnumpy(K.int8_dequantize(gq, gs, 100, dtype)),
                               K.int8_dequantize(cp.asnumpy(gq), s, 100, dtype), rtol=1e-6)
    p, s = K.sign_pack(x, 100)
    gp, gs = K.sign_pack(g, 100)
    np.testing.assert_array_equal(cp.asnumpy(gp), p)
    np.testing.assert_allclose(cp.asnumpy(gs), s, rtol=1e-6)
    np.testing.assert_allclose(cp.asnumpy(K.sign_unpack(gp, gs, n, 100, dtype)),
                               K.sign_unpack(p, s, n, 100, dtype), rtol=1e-6)


@pytest.mark.parametrize("kind", ["float16", "bfloat16"])
def test_casts(kind):
    x, g = _pair(1001, np.float32)
    h = K.to_half(g, kind)
    ref = K.to_half(x, kind)
    np.testing.assert_array_equal(cp.asnumpy(K.from_half(h, np.float32)), K.from_half(ref))


def test_fused():
    rng = np.random.default_rng(0)
    dense = np.zeros(100, np.float32)
    idx = rng.integers(0, 100, 500)
    vals = rng.standard_normal(500).astype(np.float32)
    gdense = cp.asarray(dense)
    K.scatter_add(gdense, cp.asarray(idx), cp.asarray(vals), 2.0)
    K.scatter_add(dense, idx, vals, 2.0)
    np.testing.assert_allclose(cp.asnumpy(gdense), dense, rtol=1e-5, atol=1e-5)
    K.scale_add(gdense, cp.ones(100, cp.float32), 0.5)
    K.scale_add(dense, np.ones(100, np.float32), 0.5)
    np.testing.assert_allclose(cp.asnumpy(gdense), dense, rtol=1e-5, atol=1e-5)
    r = cp.empty(100, cp.float32)
    K.error_feedback_update(r, gdense, cp.ones(100, cp.float32))
    np.testing.assert_allclose(cp.asnumpy(r), dense - 1, rtol=1e-5, atol=1e-5)
