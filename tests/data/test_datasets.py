"""Built-in data sets: per-rank rows that reassemble into one global data set."""
import numpy as np
import pytest
from sklearn.datasets import load_digits as sklearn_digits

import hpcdist
from hpcdist.data import DATASETS, get_dataset, load_digits, make_blobs, make_classification
from hpcdist.data.datasets import BLOCK_ROWS
from tests.data.conftest import explicit_context
from tests.helpers import all_ranks, check_array, expect_error

SYNTHETIC = {"blobs": make_blobs, "classification": make_classification}
# sizes that cross block boundaries, are smaller than a block, or than the ranks
N_SAMPLES = [0, 2, 100, 2 * BLOCK_ROWS + 37]


def _on(rank, size):
    """An explicit context: rank ``rank`` of ``size`` (no communication needed)."""
    return explicit_context(rank, size)


def _whole(function, **kwargs):
    return function(ctx=_on(0, 1), **kwargs)


def _sorted_rows(X):
    return X[np.lexsort(X.T[::-1])]


# ------------------------------------------------------------------ serial
@pytest.mark.parametrize("name", sorted(SYNTHETIC))
@pytest.mark.parametrize("n", N_SAMPLES)
@pytest.mark.parametrize("world", [2, 3, 5])
def test_synthetic_rows_do_not_depend_on_world_size(name, n, world):
    X, y = _whole(SYNTHETIC[name], n_samples=n, random_state=4)
    parts = [SYNTHETIC[name](n_samples=n, random_state=4, ctx=_on(r, world))
             for r in range(world)]
    for r, (X_r, y_r) in enumerate(parts):
        assert len(X_r) == len(y_r) == n // world + (r < n % world)
    check_array(np.concatenate([p[0] for p in parts]), X, rtol=0, atol=0)
    check_array(np.concatenate([p[1] for p in parts]), y)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_synthetic_deterministic_and_seeded(name):
    X1, y1 = _whole(SYNTHETIC[name], n_samples=300, random_state=1)
    X2, y2 = _whole(SYNTHETIC[name], n_samples=300, random_state=1)
    X3, _ = _whole(SYNTHETIC[name], n_samples=300, random_state=2)
    check_array(X2, X1, rtol=0, atol=0)
    check_array(y2, y1)
    assert not np.allclose(X1, X3), "random_state should change the data"
    # complete blocks do not depend on n_samples (each is seeded by its index)
    X5, _ = _whole(SYNTHETIC[name], n_samples=BLOCK_ROWS + 1, random_state=1)
    X6, _ = _whole(SYNTHETIC[name], n_samples=BLOCK_ROWS + 50, random_state=1)
    check_array(X6[:BLOCK_ROWS], X5[:BLOCK_ROWS], rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
@pytest.mark.parametrize("n", [7, 100, 2 * BLOCK_ROWS + 37])
def test_synthetic_class_counts_differ_by_at_most_one(name, n):
    _, y = _whole(SYNTHETIC[name], n_samples=n, **{"blobs": {"centers": 3},
                                                   "classification": {"n_classes": 3}}[name])
    counts = np.bincount(y, minlength=3)
    assert len(counts) == 3 and counts.max() - counts.min() <= 1, counts


def test_blobs_shapes_labels_and_centres():
    centers = np.array([[0.0, 0.0, 0.0], [10.0, 0.0, 0.0], [0.0, -10.0, 5.0], [3.0, 3.0, 3.0]])
    X, y = _whole(make_blobs, n_samples=4000, n_features=3, centers=centers, cluster_std=0.5)
    assert X.shape == (4000, 3) and X.dtype == np.float64 and y.dtype == np.int64
    assert np.bincount(y).tolist() == [1000] * 4, "classes should be balanced"
    for c in range(4):
        np.testing.assert_allclose(X[y == c].mean(axis=0), centers[c], atol=0.06)
        np.testing.assert_allclose(X[y == c].std(axis=0), 0.5, rtol=0.08)


def test_blobs_drawn_centres_are_in_the_box():
    X, y = _whole(make_blobs, n_samples=3000, n_features=2, centers=5, cluster_std=0.1,
                  center_box=(2.0, 4.0), dtype=np.float32)
    assert X.dtype == np.float32 and sorted(set(y.tolist())) == [0, 1, 2, 3, 4]
    means = np.array([X[y == c].mean(axis=0) for c in range(5)])
    assert means.min() > 1.9 and means.max() < 4.1, means


def test_classification_structure():
    n_features, n_informative, n_redundant = 12, 4, 3
    X, y = _whole(make_classification, n_samples=3000, n_features=n_features, n_classes=5,
                  n_informative=n_informative, n_redundant=n_redundant, class_sep=2.0)
    assert X.shape == (3000, 12) and y.dtype == np.int64
    assert np.bincount(y).tolist() == [600] * 5
    # the redundant columns are linear combinations of the informative ones
    assert np.linalg.matrix_rank(X) == n_features - n_redundant
    class_means = np.array([X[y == c].mean(axis=0) for c in range(5)])
    assert np.ptp(class_means, axis=0).max() > 2.0, "classes should be separated"


def test_classification_is_learnable():
    from sklearn.linear_model import LogisticRegression

    X, y = _whole(make_classification, n_samples=2000, class_sep=2.0)
    Xt, yt = _whole(make_classification, n_samples=3000, class_sep=2.0)
    score = LogisticRegression(max_iter=500).fit(X, y).score(Xt[2000:], yt[2000:])
    assert score > 0.85, score


@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_rank_has_every_class(world):
    for r in range(world):
        _, y = make_blobs(n_samples=600, centers=4, ctx=_on(r, world))
        assert set(y.tolist()) == {0, 1, 2, 3}
        _, y = make_classification(n_samples=600, n_classes=3, ctx=_on(r, world))
        assert set(y.tolist()) == {0, 1, 2}


def test_digits_splits():
    X_all, y_all = sklearn_digits(return_X_y=True)
    X_tr, y_tr = _whole(load_digits)
    X_te, y_te = _whole(load_digits, split="test")
    assert X_tr.shape == (1347, 64) and X_te.shape == (450, 64)
    assert X_tr.dtype == np.float64 and y_tr.dtype == np.int64
    assert X_tr.min() == 0.0 and X_tr.max() == 1.0 and X_te.min() >= 0 and X_te.max() <= 1
    assert set(y_tr.tolist()) == set(y_te.tolist()) == set(range(10))
    # train + test is the whole set (as a multiset of (image, label) rows)
    both = np.column_stack([np.concatenate([X_tr, X_te]) * 16, np.concatenate([y_tr, y_te])])
    check_array(_sorted_rows(both), _sorted_rows(np.column_stack([X_all, y_all])))
    X_again, _ = _whole(load_digits)
    check_array(X_again, X_tr, rtol=0, atol=0)
    X_other, _ = _whole(load_digits, random_state=1)
    assert not np.array_equal(X_other, X_tr)
    X, y = _whole(load_digits, split="all", dtype=np.float32)
    check_array(X, (X_all / 16).astype(np.float32))
    check_array(y, y_all.astype(np.int64))


@pytest.mark.parametrize("world", [2, 3])
def test_digits_partitions_reassemble(world):
    X, y = _whole(load_digits, split="test")
    parts = [load_digits(_on(r, world), split="test") for r in range(world)]
    check_array(np.concatenate([p[0] for p in parts]), X, rtol=0, atol=0)
    check_array(np.concatenate([p[1] for p in parts]), y)


def test_registry():
    assert DATASETS == ("digits", "blobs", "classification")
    for name, function, kwargs in [("digits", load_digits, {"split": "test"}),
                                   ("blobs", make_blobs, {"n_samples": 50}),
                                   ("classification", make_classification, {"n_samples": 50})]:
        X, y = get_dataset(name, ctx=_on(1, 2), **kwargs)
        X_ref, y_ref = function(ctx=_on(1, 2), **kwargs)
        check_array(X, X_ref, rtol=0, atol=0)
        check_array(y, y_ref)
    with pytest.raises(ValueError, match=r"name='mnist' is not known.*'digits', 'blobs'"):
        get_dataset("mnist")
    with pytest.raises(TypeError):
        get_dataset("blobs", ctx=_on(0, 1), n_clusters=3)


def test_default_context(size):
    X, y = make_blobs(n_samples=10 * size + 1)
    assert len(X) == len(y) == 10 + (hpcdist.get_rank() < 1)


@pytest.mark.parametrize("function,kwargs,exc,match", [
    (make_blobs, {"n_samples": -1}, ValueError, r"n_samples=-1 should be >= 0"),
    (make_blobs, {"n_samples": 10.5}, TypeError, r"n_samples=10.5 should be an int"),
    (make_blobs, {"random_state": None}, TypeError, r"random_state=None.*same non-negative int"),
    (make_blobs, {"centers": 0}, ValueError, r"centers=0 should be >= 1"),
    (make_blobs, {"centers": [[0.0, 1.0, 2.0]]}, ValueError, r"shape \(1, 3\).*n_features=2"),
    (make_blobs, {"cluster_std": -1.0}, ValueError, r"cluster_std=-1.0 should be >= 0"),
    (make_blobs, {"center_box": (1.0, -1.0)}, ValueError, r"center_box=\(1.0, -1.0\)"),
    (make_blobs, {"dtype": np.int32}, ValueError, r"dtype=int32 should be a floating dtype"),
    (make_classification, {"n_classes": 1}, ValueError, r"n_classes=1 should be >= 2"),
    (make_classification, {"n_classes": 5, "n_informative": 2}, ValueError,
     r"n_classes=5 should be <= 2 \*\* n_informative=4"),
    (make_classification, {"n_features": 3}, ValueError,
     r"n_informative=2 \+ n_redundant=2 should be <= n_features=3"),
    (make_classification, {"random_state": -2}, ValueError, r"random_state=-2 should be >= 0"),
    (load_digits, {"split": "validation"}, ValueError, r"split='validation' should be one of"),
    (load_digits, {"test_size": 1.0}, ValueError, r"test_size=1.0 should be in \(0, 1\)"),
])
def test_bad_arguments(function, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        function(ctx=_on(0, 1), **kwargs)


# ------------------------------------------------------------------ MPI
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", sorted(SYNTHETIC))
@pytest.mark.parametrize("n", N_SAMPLES)
def test_synthetic_union_over_ranks(ctx, name, n):
    X_local, y_local = get_dataset(name, n_samples=n, random_state=3)
    X_all = hpcdist.allgather(np.ascontiguousarray(X_local))
    y_all = hpcdist.allgather(y_local)
    X, y = _whole(SYNTHETIC[name], n_samples=n, random_state=3)
    with all_ranks(f"{name} n={n}"):
        assert len(X_local) == n // ctx.size + (ctx.rank < n % ctx.size)
        check_array(X_all, X, rtol=0, atol=0)
        check_array(y_all, y)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("split", ["train", "test"])
def test_digits_union_over_ranks(ctx, split):
    X_local, y_local = load_digits(split=split)
    X_all = hpcdist.allgather(X_local)
    y_all = hpcdist.allgather(y_local)
    X, y = _whole(load_digits, split=split)
    with all_ranks(split):
        assert len(X_local) == len(X) // ctx.size + (ctx.rank < len(X) % ctx.size)
        assert set(y_local.tolist()) == set(range(10)), "every rank should see every digit"
        check_array(X_all, X, rtol=0, atol=0)
        check_array(y_all, y)


@pytest.mark.mpi(min_size=2)
def test_bad_dataset_name_on_every_rank(ctx):
    expect_error(ValueError, get_dataset, "mnist", match="is not known")
