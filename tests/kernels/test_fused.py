"""scatter_add, scale_add and error_feedback_update against NumPy."""
import numpy as np
import pytest

from hpcdist.kernels import error_feedback_update, scale_add, scatter_add

DTYPES = [np.float32, np.float64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(1, 0), (1, 5), (1001, 3000), (100_003, 1000)])
def test_scatter_add_accumulates_duplicates(n, k, dtype):
    rng = np.random.default_rng(k)
    dense = rng.standard_normal(n).astype(dtype)
    idx = rng.integers(0, n, k)
    vals = rng.standard_normal(k).astype(dtype)
    ref = dense.astype(np.float64)
    np.add.at(ref, idx, 0.5 * vals.astype(np.float64))
    out = scatter_add(dense, idx, vals, scale=0.5)
    assert out is dense
    np.testing.assert_allclose(dense, ref, rtol=1e-5 if dtype == np.float32 else 1e-12,
                               atol=1e-5)


def test_scatter_add_2d_and_empty():
    dense = np.zeros((2, 3), np.float32)
    scatter_add(dense, np.array([5, 5, 0]), np.array([1.0, 2.0, 4.0]))
    np.testing.assert_array_equal(dense, [[4, 0, 0], [0, 0, 3]])
    empty = np.zeros(0)
    assert scatter_add(empty, np.zeros(0, np.int64), np.zeros(0)) is empty


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 1001, 100_003])
def test_scale_add_and_error_feedback(n, dtype):
    rng = np.random.default_rng(n)
    out, x, d = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    ref = out + dtype(-0.25) * x
    assert scale_add(out, x, -0.25) is out
    np.testing.assert_allclose(out, ref, rtol=1e-6)
    residual = np.empty(n, dtype)
    assert error_feedback_update(residual, x, d) is residual
    np.testing.assert_array_equal(residual, x - d)


@pytest.mark.parametrize("call,exc,match", [
    (lambda: scatter_add(np.zeros(4), np.array([4]), np.ones(1)), ValueError,
     r"indices span \[4, 4\] but should lie in \[0, 4\)"),
    (lambda: scatter_add(np.zeros(4), np.array([-1]), np.ones(1)), ValueError, r"\[-1, -1\]"),
    (lambda: scatter_add(np.zeros(4), np.array([1.0]), np.ones(1)), TypeError, "integer"),
    (lambda: scatter_add(np.zeros(4), np.array([1, 2]), np.ones(1)), ValueError,
     "values has 1 elements but indices has 2"),
    (lambda: scatter_add(np.zeros(4, np.int32), np.array([1]), np.ones(1)), TypeError,
     "dense should be a float32 or float64"),
    (lambda: scale_add(np.zeros(4), np.ones(3), 1.0), ValueError, "x has 3 elements"),
    (lambda: scale_add(np.zeros((4, 4))[:, 0], np.ones(4), 1.0), ValueError, "C-contiguous"),
    (lambda: error_feedback_update(np.zeros(2), np.ones(2), np.ones(3)), ValueError,
     "decompressed has 3 elements"),
])
def test_bad_input(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_scale_add_parallel_and_serial_paths_agree():
    from hpcdist.kernels import fused
    rng = np.random.default_rng(3)
    for n in (fused.PARALLEL_MIN_SIZE - 1, fused.PARALLEL_MIN_SIZE):
        out = rng.normal(size=n).astype(np.float32)
        x = rng.normal(size=n).astype(np.float32)
        expected = out + np.float32(-0.5) * x
        fused.scale_add(out, x, -0.5)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
