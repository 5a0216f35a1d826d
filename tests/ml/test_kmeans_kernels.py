"""K-means kernels against plain NumPy: the fused Lloyd pass, assignment, k-means++ trials."""
import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from hpcdist.kernels._arrays import aligned_empty
from hpcdist.ml.kmeans._simd import _vector_plan, nearest_tile
from hpcdist.ml.kmeans.kernels import (
    CHUNK_ROWS,
    TILE_ROWS,
    assign,
    candidate_potentials,
    column_moments,
    labelled_inertia,
    lloyd_step,
    row_squared_norms,
)

DTYPES = (np.float32, np.float64)


def _data(n=1000, d=7, k=9, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(dtype)
    centers = rng.normal(size=(k, d)).astype(dtype)
    return X, centers


def _reference(X, centers):
    """Nearest centers and exact squared distances in float64."""
    sq = ((X[:, None, :].astype(np.float64) - centers[None].astype(np.float64)) ** 2).sum(-1)
    labels = sq.argmin(axis=1)
    return labels, sq[np.arange(len(X)), labels]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("chunk_rows,n_blocks", [(64, 1), (64, 3), (256, 2), (4096, 1)])
def test_lloyd_step_matches_numpy(dtype, chunk_rows, n_blocks):
    X, centers = _data(n=1000, dtype=dtype)  # 1000 rows: a partial last chunk
    labels = np.full(len(X), -1, np.int32)
    labels[:10] = _reference(X[:10], centers)[0]  # ten rows keep their label
    sums, counts = np.zeros(centers.shape), np.zeros(len(centers))
    inertia, changed = lloyd_step(X, centers, labels, sums, counts, chunk_rows=chunk_rows,
                                  n_blocks=n_blocks)
    expected, distances = _reference(X, centers)
    np.testing.assert_array_equal(labels, expected)
    assert labels.dtype == np.int32
    assert changed == len(X) - 10
    np.testing.assert_allclose(inertia, distances.sum(), rtol=1e-12 if dtype == np.float64
                               else 1e-6)
    np.testing.assert_array_equal(counts, np.bincount(expected, minlength=len(centers)))
    reference_sums = np.zeros(centers.shape)
    np.add.at(reference_sums, expected, X.astype(np.float64))
    np.testing.assert_allclose(sums, reference_sums, rtol=1e-12, atol=1e-9)


def test_lloyd_step_accumulates_and_counts_no_change():
    X, centers = _data(n=300)
    labels = np.full(len(X), -1, np.int32)
    sums, counts = np.ones(centers.shape), np.ones(len(centers))
    lloyd_step(X, centers, labels, sums, counts, chunk_rows=64)
    sums2, counts2 = np.zeros(centers.shape), np.zeros(len(centers))
    _, changed = lloyd_step(X, centers, labels, sums2, counts2, chunk_rows=64)
    assert changed == 0
    np.testing.assert_allclose(sums, sums2 + 1)  # added to, not overwritten
    np.testing.assert_array_equal(counts, counts2 + 1)


def test_ties_go_to_the_lowest_center_like_sklearn():
    X = np.zeros((5, 2))
    centers = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    labels = np.full(5, -1, np.int32)
    lloyd_step(X, centers, labels, np.zeros((3, 2)), np.zeros(3), chunk_rows=64)
    np.testing.assert_array_equal(labels, 0)


def test_results_do_not_depend_on_chunks_or_threads():
    X, centers = _data(n=2000, dtype=np.float32, seed=3)
    results = []
    for chunk_rows, n_blocks in ((64, 1), (128, 4), (512, 2)):
        labels = np.full(len(X), -1, np.int32)
        sums, counts = np.zeros(centers.shape), np.zeros(len(centers))
        inertia, _ = lloyd_step(X, centers, labels, sums, counts, chunk_rows=chunk_rows,
                                n_blocks=n_blocks)
        results.append((labels, counts, sums, inertia))
    for labels, counts, sums, inertia in results[1:]:
        np.testing.assert_array_equal(labels, results[0][0])
        np.testing.assert_array_equal(counts, results[0][1])
        np.testing.assert_allclose(sums, results[0][2], rtol=1e-12)
        np.testing.assert_allclose(inertia, results[0][3], rtol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_assign_labels_counts_and_distances(dtype):
    X, centers = _data(n=700, dtype=dtype, seed=1)
    labels = np.empty(len(X), np.int32)
    counts, distances = np.zeros(len(centers)), np.empty(len(X))
    inertia = assign(X, centers, labels, counts=counts, sq_distances=distances, chunk_rows=64)
    expected, expected_distances = _reference(X, centers)
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(counts, np.bincount(expected, minlength=len(centers)))
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(distances, expected_distances, rtol=rtol)
    np.testing.assert_allclose(inertia, expected_distances.sum(), rtol=rtol)
    # without the optional outputs
    other = np.empty(len(X), np.int32)
    assert assign(X, centers, other, chunk_rows=128) == pytest.approx(inertia, rel=1e-12)
    np.testing.assert_array_equal(other, labels)


def test_labelled_inertia_uses_the_given_labels():
    X, centers = _data(n=100, seed=2)
    labels = np.arange(len(X), dtype=np.int32) % len(centers)
    expected = ((X - centers[labels]) ** 2).sum()
    assert labelled_inertia(X, centers, labels) == pytest.approx(expected, rel=1e-12)
    assert labelled_inertia(X, centers, labels, n_blocks=3) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_candidate_potentials(dtype):
    X, candidates = _data(n=300, k=4, dtype=dtype, seed=5)
    closest = np.random.default_rng(0).uniform(0, 20, size=len(X))
    out = np.empty((4, len(X)))
    potentials = candidate_potentials(X, candidates, closest, out, n_blocks=3)
    sq = ((X[None].astype(np.float64) - candidates[:, None].astype(np.float64)) ** 2).sum(-1)
    expected = np.minimum(sq, closest)
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_allclose(potentials, expected.sum(axis=1), rtol=1e-12)
    # before the first center, closest is infinite: the plain squared distances
    candidate_potentials(X, candidates[:1], np.full(len(X), np.inf), out[:1])
    np.testing.assert_allclose(out[0], sq[0], rtol=1e-12)


def test_empty_inputs():
    centers = np.ones((3, 2))
    X = np.empty((0, 2))
    labels = np.empty(0, np.int32)
    assert lloyd_step(X, centers, labels, np.zeros((3, 2)), np.zeros(3), chunk_rows=64) == (0.0, 0)
    assert assign(X, centers, labels, chunk_rows=64) == 0.0
    assert labelled_inertia(X, centers, labels) == 0.0
    np.testing.assert_array_equal(candidate_potentials(X, centers, np.empty(0),
                                                       np.empty((3, 0))), np.zeros(3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,d,k", [(1, 1, 1), (5, 3, 2), (TILE_ROWS + 1, 17, 16), (33, 5, 20),
                                   (97, 33, 65), (250, 8, 130), (61, 64, 300)])
def test_nearest_centers_any_shape(dtype, n, d, k):
    """Rows not a multiple of the register tile, centers not a multiple of a vector or a
    block of vectors (1, 2 or 3 vectors left after whole blocks), features not a multiple of
    a vector."""
    X, centers = _data(n=n, d=d, k=k, dtype=dtype, seed=n + k)
    labels = np.full(n, -1, np.int32)
    sums, counts = np.zeros((k, d)), np.zeros(k)
    inertia, _ = lloyd_step(X, centers, labels, sums, counts)
    expected, distances = _reference(X, centers)
    np.testing.assert_array_equal(labels, expected)
    np.testing.assert_array_equal(counts, np.bincount(expected, minlength=k))
    reference_sums = np.zeros((k, d))
    np.add.at(reference_sums, expected, X.astype(np.float64))
    np.testing.assert_allclose(sums, reference_sums, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(inertia, distances.sum(), rtol=1e-9 if dtype == np.float64
                               else 1e-4)


def test_equal_distances_in_later_blocks_go_to_the_lowest_center():
    """Ties inside a vector, across the vectors of a block and across blocks."""
    k = 200
    centers = np.zeros((k, 2))
    X = np.zeros((3 * TILE_ROWS + 1, 2))
    X[:, 0] = 5.0
    for j in (37, 38, 100, 170, 199):  # equally near, nearer than the others
        centers[j] = [5.0, 1.0]
    labels = np.full(len(X), -1, np.int32)
    assign(X, centers, labels)
    np.testing.assert_array_equal(labels, 37)


def test_strided_rows_are_copied_not_misread():
    X, centers = _data(n=300, d=6, dtype=np.float32, seed=4)
    wide = np.zeros((300, 12), np.float32)
    wide[:, ::2] = X
    labels, strided = np.empty(300, np.int32), np.empty(300, np.int32)
    assign(X, centers, labels)
    assign(wide[:, ::2], centers, strided)
    np.testing.assert_array_equal(strided, labels)
    assert CHUNK_ROWS % TILE_ROWS == 0


def test_nan_rows_stay_visible():
    """fastmath keeps NaN: a NaN row makes the inertia NaN (validation happens above)."""
    X, centers = _data(n=50)
    X[3, 0] = np.nan
    labels = np.full(len(X), -1, np.int32)
    inertia, _ = lloyd_step(X, centers, labels, np.zeros(centers.shape),
                            np.zeros(len(centers)), chunk_rows=64)
    assert np.isnan(inertia)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n_blocks", [1, 3])
def test_column_moments(dtype, n_blocks):
    X, _ = _data(n=1001, d=6, dtype=dtype, seed=7)
    X += 1000.0  # far from the origin: no cancellation allowed
    mean, m2 = column_moments(X, n_blocks=n_blocks)
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(mean, X64.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(m2, ((X64 - X64.mean(axis=0)) ** 2).sum(axis=0), rtol=1e-9)
    empty_mean, empty_m2 = column_moments(np.empty((0, 6), dtype))
    assert not empty_mean.any() and not empty_m2.any()


@pytest.mark.parametrize("dtype", DTYPES)
def test_given_squared_norms_give_the_same_step(dtype):
    X, centers = _data(n=500, d=5, dtype=dtype, seed=6)
    norms = row_squared_norms(X)
    np.testing.assert_allclose(norms, (X.astype(np.float64) ** 2).sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(row_squared_norms(X, n_blocks=3), norms)
    results = []
    for given in (None, norms):
        labels = np.full(len(X), -1, np.int32)
        sums, counts = np.zeros(centers.shape), np.zeros(len(centers))
        results.append(lloyd_step(X, centers, labels, sums, counts, squared_norms=given))
    assert results[0] == results[1]


@pytest.mark.parametrize("shape,dtype", [((7,), np.float32), ((5, 3), np.float64),
                                         ((0, 4), np.float32), ((2, 3, 5), np.int32)])
def test_aligned_empty(shape, dtype):
    a = aligned_empty(shape, dtype)
    assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous
    assert a.ctypes.data % 64 == 0 or a.size == 0
    a[...] = 1  # writable, its own memory
    assert aligned_empty((3,), np.float64, alignment=128).ctypes.data % 128 == 0


def test_vector_plans():
    assert _vector_plan({"avx512f", "avx2", "avx"}) == (64, 4)
    assert _vector_plan({"avx2", "avx", "fma"}) == (32, 2)
    assert _vector_plan(set()) == (16, 2)


_OTHER_CPU_SCRIPT = """
import numpy as np
from hpcdist.ml.kmeans import _simd
from hpcdist.ml.kmeans.kernels import assign, lloyd_step
assert _simd._VECTOR_BYTES == {bytes}, _simd._VECTOR_BYTES
rng = np.random.default_rng(0)
for dtype in (np.float32, np.float64):
    X = rng.normal(size=(301, 19)).astype(dtype)
    centers = rng.normal(size=(37, 19)).astype(dtype)
    sq = ((X[:, None].astype(np.float64) - centers[None]) ** 2).sum(-1)
    labels = np.full(len(X), -1, np.int32)
    sums, counts = np.zeros(centers.shape), np.zeros(len(centers))
    lloyd_step(X, centers, labels, sums, counts)
    assert (labels == sq.argmin(axis=1)).all()
    assert (counts == np.bincount(labels, minlength=37)).all()
    other = np.empty(len(X), np.int32)
    assign(X, centers, other)
    assert (other == labels).all()
print("ok")
"""


@pytest.mark.parametrize("cpu,vector_bytes", [("haswell", 32), ("generic", 16)])
def test_kernels_compiled_for_narrower_vectors(tmp_path, cpu, vector_bytes):
    """The AVX2 and 128-bit register tiles, compiled for another CPU Numba targets (the
    code runs here: this machine has those instructions)."""
    env = dict(os.environ, NUMBA_CPU_NAME=cpu, NUMBA_CACHE_DIR=str(tmp_path))
    if cpu == "haswell":
        env["NUMBA_CPU_FEATURES"] = "+avx,+avx2,+fma,+sse4.2,+popcnt,+bmi,+bmi2,+f16c"
    else:
        env.pop("NUMBA_CPU_FEATURES", None)
    done = subprocess.run([sys.executable, "-c", _OTHER_CPU_SCRIPT.format(bytes=vector_bytes)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_tile_kernels_reject_wrong_types_at_compile_time():
    @njit
    def search(X, neg2t, norms, nearest):
        nearest_tile(X, 0, neg2t, norms, nearest, 0)

    X = np.zeros((4, 3), np.float32)
    with pytest.raises(TypingError, match="nearest must be an int32 array"):
        search(X, np.zeros((3, 16), np.float32), np.zeros(16, np.float32),
               np.zeros(8, np.int64))
    with pytest.raises(TypingError, match="need one dtype"):
        search(X, np.zeros((3, 16)), np.zeros(16), np.zeros(8, np.int32))
