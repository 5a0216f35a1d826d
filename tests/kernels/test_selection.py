"""Top-k, threshold top-k and random-k against NumPy references."""
import numpy as np
import pytest

from hpcdist.kernels import randomk_indices, selection, topk, topk_threshold

DTYPES = [np.float32, np.float64]


def _data(n, dtype, seed=0):
    return np.random.default_rng(seed).standard_normal(n).astype(dtype)


def _top_magnitudes(x, m):
    a = np.abs(x)
    return np.sort(np.partition(a, a.size - m)[a.size - m:]) if m else a[:0]


def _check_topk(x, k, indices, values):
    assert indices.dtype == np.int64 and values.dtype == x.dtype
    assert indices.shape == (k,) and values.shape == (k,)
    assert np.all(np.diff(indices) > 0), "indices sorted ascending and distinct"
    np.testing.assert_array_equal(values, x.ravel()[indices])
    np.testing.assert_array_equal(np.sort(np.abs(values)), _top_magnitudes(x.ravel(), k))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(0, 0), (1, 0), (1, 1), (1001, 1), (1001, 10),
                                 (1001, 1000), (1001, 1001), (200_001, 2000),
                                 (200_001, 150_000)])
def test_topk_matches_numpy(n, k, dtype):
    x = _data(n, dtype)
    _check_topk(x, k, *topk(x, k))


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_histogram_path_and_ties(dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(-5, 6, 300_000).astype(dtype)   # massive ties at every magnitude
    for k in (1, 1000, 54_321, 299_999):
        _check_topk(x, k, *topk(x, k))
        _check_topk(x, k, *selection._topk_histogram(x, k))
    same = np.full(100_000, -2.5, dtype)
    idx, _ = topk(same, 7)
    np.testing.assert_array_equal(idx, np.arange(7))   # ties: lowest indices first


def test_topk_any_shape_and_signed_values():
    x = _data(6 * 50_000, np.float32).reshape(6, 50_000)
    idx, vals = topk(x, 300)
    _check_topk(x, 300, idx, vals)
    assert (vals < 0).any() and (vals > 0).any()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_ten_million(dtype):
    x = _data(10_000_001, dtype, seed=3)
    k = 100_000
    _check_topk(x, k, *topk(x, k))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,k", [(0, 0), (1, 1), (1001, 10), (2_000_003, 20_000),
                                 (2_000_003, 20)])
def test_topk_threshold_is_an_exact_top_m_near_k(n, k, dtype):
    x = _data(n, dtype, seed=5)
    idx, vals = topk_threshold(x, k, seed=11)
    m = idx.size
    assert (k + 1) // 2 <= m <= (5 * k + 3) // 4
    assert np.all(np.diff(idx) > 0)
    np.testing.assert_array_equal(vals, x[idx])
    # everything above the chosen threshold is in: the set is the exact top-m
    np.testing.assert_array_equal(np.sort(np.abs(vals)), _top_magnitudes(x, m))
    again, _ = topk_threshold(x, k, seed=11)
    np.testing.assert_array_equal(idx, again)


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_threshold_with_far_more_than_k_above_the_threshold(dtype):
    """Massive ties at the sampled threshold overflow the one-pass slots: the
    counted gather takes over, then the exact top-k of the selection."""
    x = np.ones(300_000, dtype)
    x[::1000] = 2.0
    k = 1000
    idx, vals = topk_threshold(x, k, seed=3)
    u, mask, _ = selection._keys(x)
    one = np.asarray(1.0, dtype).view(u.dtype)[()]  # the sampled threshold: |x| >= 1 is everything
    assert selection._gather_at_least_once(x, u, mask, one, 1.5 * k) is None
    _check_topk(x, k, idx, vals)
    expected = np.concatenate([np.arange(0, 300_000, 1000), np.setdiff1d(
        np.arange(k), np.arange(0, 300_000, 1000))[:k - 300]])
    np.testing.assert_array_equal(idx, np.sort(expected))   # ties: lowest indices first


def test_topk_threshold_large_sample_is_close():
    x = _data(2_000_000, np.float32, seed=8)
    idx, _ = topk_threshold(x, 20_000, sample_size=200_000, seed=1)
    assert 0.9 * 20_000 <= idx.size <= 1.1 * 20_000


@pytest.mark.parametrize("n,k", [(0, 0), (1, 0), (1, 1), (1001, 17), (1001, 1001),
                                 (10_000_000, 100_000)])
def test_randomk_indices(n, k):
    a = randomk_indices(n, k, seed=42)
    b = randomk_indices(n, k, seed=42)
    assert a.dtype == np.int64 and a.shape == (k,)
    np.testing.assert_array_equal(a, b)                 # same on every rank
    assert np.all(np.diff(a) > 0)                       # sorted and distinct
    if k:
        assert a[0] >= 0 and a[-1] < n
    if 0 < k < n:
        assert not np.array_equal(a, randomk_indices(n, k, seed=43))


@pytest.mark.parametrize("call,match", [
    (lambda: topk(np.ones(5, np.float32), 6), r"k=6 should be in \[0, 5\]"),
    (lambda: topk(np.ones(5, np.float32), -1), r"k=-1"),
    (lambda: topk_threshold(np.ones(5), 9), r"k=9"),
    (lambda: topk_threshold(np.ones(5), 1, sample_size=0), r"sample_size=0"),
    (lambda: randomk_indices(10, 11, 0), r"k=11"),
    (lambda: randomk_indices(-1, 0, 0), r"n=-1"),
    (lambda: randomk_indices(10, 1, -3), r"seed=-3"),
])
def test_bad_values(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_non_integer_k_raises_type_error():
    with pytest.raises(TypeError, match=r"k=2.5 should be an integer"):
        topk(np.ones(5, np.float32), 2.5)


@pytest.mark.parametrize("bad", [np.arange(5), np.ones(5, np.float16), [1.0, 2.0]])
def test_non_float_input_raises_type_error(bad):
    with pytest.raises(TypeError, match="float32 or float64|NumPy or CuPy array"):
        topk(bad, 1)
