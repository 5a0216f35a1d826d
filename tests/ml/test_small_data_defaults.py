"""Small data with default settings, scikit-learn's contract, at any number of ranks.

scikit-learn's wine data (178 rows) split over the ranks, unevenly, is fitted
by every estimator with its defaults. The MLPs' ``batch_size="auto"`` is
``min(200, n_samples)`` over all ranks, a larger ``batch_size`` is clipped with
a warning, and a rank holding fewer rows than its share of a batch (even none)
trains with the others: the shares are weighted so that a full-batch step is
the step of one process on the gathered rows. Fitted estimators pickle without
their communicator and predict the same afterwards.
"""
import pickle

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

import hpcdist
from hpcdist.ml import KMeans, MLPClassifier, MLPRegressor, RandomForestClassifier
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


def wine():
    """The wine data, standardized, the same on every rank."""
    X, y = load_wine(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def split(rows, counts):
    """This rank's block of ``rows`` when the ranks hold ``counts`` rows each."""
    rank = hpcdist.get_rank()
    start = int(np.sum(counts[:rank]))
    return rows[start:start + counts[rank]]


def uneven_counts(n_rows):
    """Rows per rank: the last rank has none (at 2 ranks or more), rank 0 one row (at 3
    ranks or more), the other ranks the rest."""
    size = hpcdist.get_world_size()
    if size <= 2:
        return [n_rows, 0][:size]
    middle = [len(block) for block in np.array_split(np.arange(n_rows - 1), size - 2)]
    return [1, *middle, 0]


def test_default_mlp_fits_wine():
    X, y = wine()
    counts = [len(b) for b in np.array_split(np.arange(len(X)), hpcdist.get_world_size())]
    clf = MLPClassifier((16,), random_state=0).fit(split(X, counts), split(y, counts))
    assert clf.batch_size == "auto"
    assert_on_all_ranks(clf.score(split(X, counts), split(y, counts)) > 0.9, "wine not learned")


def test_batch_size_above_the_rows_is_clipped_with_a_warning():
    X, y = wine()
    counts = [len(b) for b in np.array_split(np.arange(len(X)), hpcdist.get_world_size())]
    with all_ranks("clipping warning"), pytest.warns(
            UserWarning, match=r"MLPClassifier.fit: batch_size=1000 is larger than the 178 "
                               r"sample\(s\) of all ranks; it is clipped to 178") as record:
        MLPClassifier((4,), batch_size=1000, max_iter=2, random_state=0).fit(
            split(X, counts), split(y, counts))
    assert_on_all_ranks(any(w.filename == __file__ for w in record),
                        "the warning should point at the caller of fit")


@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor])
def test_full_batch_step_with_uneven_shares_is_the_global_mean(cls):
    X, y = wine()
    target = y if cls is MLPClassifier else X @ np.linspace(-1, 1, X.shape[1])
    counts = uneven_counts(len(X))
    settings = dict(hidden_layer_sizes=(8,), solver="sgd", learning_rate_init=0.05,
                    batch_size=len(X), max_iter=3, tol=0, random_state=0)
    distributed = cls(**settings).fit(split(X, counts), split(target, counts))
    alone = cls(**settings, comm=MPI.COMM_SELF).fit(X, target)
    with all_ranks("a full-batch step over uneven ranks"):
        np.testing.assert_allclose(distributed.get_parameters(), alone.get_parameters(),
                                   rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(distributed.loss_curve_, alone.loss_curve_, rtol=1e-9)


def test_rank_without_rows_trains_with_small_batches():
    X, y = wine()
    counts = uneven_counts(len(X))
    clf = MLPClassifier((8,), batch_size=32, max_iter=5, tol=0, random_state=0).fit(
        split(X, counts), split(y, counts))
    gathered = hpcdist.allgather(clf.get_parameters()[None])
    assert_on_all_ranks(all(np.array_equal(g, gathered[0]) for g in gathered)
                        and np.isfinite(clf.loss_curve_).all(), "replicas differ or NaN loss")


@pytest.mark.mpi(min_size=2)
def test_a_strategy_of_replicas_needs_rows_on_every_rank():
    X, y = wine()
    counts = uneven_counts(len(X))
    expect_error(ValueError, MLPClassifier((4,), strategy="local_sgd", max_iter=1).fit,
                 split(X, counts), split(y, counts),
                 match=rf"rank {hpcdist.get_world_size() - 1} got \[0\] rows")


def test_no_rows_anywhere_is_an_error():
    expect_error(ValueError, MLPClassifier((4,)).fit, np.zeros((0, 3)), np.zeros(0),
                 match=r"0 sample\(s\) over all \d+ rank\(s\)")


def test_one_sample_is_named():
    X, y = wine()
    X1, y1 = (X[:1], y[:1]) if hpcdist.get_rank() == 0 else (X[:0], y[:0])
    expect_error(ValueError, MLPClassifier((4,)).fit, X1, y1,
                 match=[r"n_samples=1", r"one class"])


@pytest.mark.parametrize("value", ["Auto", "256", 0, 2.5])
def test_batch_size_must_be_auto_or_a_positive_int(value):
    X, y = wine()
    expect_error(ValueError, MLPClassifier((4,), batch_size=value).fit, X, y,
                 match=rf"batch_size={value!r} should be an int >= 1 or 'auto'")


def _defaults():
    return {"KMeans": KMeans(3, random_state=0),
            "RandomForestClassifier": RandomForestClassifier(10, random_state=0),  # 2 cores
            "MLPClassifier": MLPClassifier(random_state=0)}


@pytest.mark.parametrize("name", sorted(_defaults()))
def test_fitted_with_defaults_pickles_and_predicts_the_same(name):
    X, y = wine()
    counts = [len(b) for b in np.array_split(np.arange(len(X)), hpcdist.get_world_size())]
    estimator = _defaults()[name].fit(split(X, counts), split(y, counts))
    restored = pickle.loads(pickle.dumps(estimator))
    with all_ranks(f"{name} unpickled"):
        assert restored.comm is None
        np.testing.assert_array_equal(restored.predict(X), estimator.predict(X))
        if hasattr(estimator, "predict_proba"):
            np.testing.assert_array_equal(restored.predict_proba(X), estimator.predict_proba(X))


test_default_mlp_fits_wine_mpi = mpi_twin(test_default_mlp_fits_wine)
test_batch_size_above_the_rows_is_clipped_with_a_warning_mpi = mpi_twin(
    test_batch_size_above_the_rows_is_clipped_with_a_warning)
test_full_batch_step_with_uneven_shares_is_the_global_mean_mpi = mpi_twin(
    test_full_batch_step_with_uneven_shares_is_the_global_mean)
test_rank_without_rows_trains_with_small_batches_mpi = mpi_twin(
    test_rank_without_rows_trains_with_small_batches)
test_no_rows_anywhere_is_an_error_mpi = mpi_twin(test_no_rows_anywhere_is_an_error)
test_one_sample_is_named_mpi = mpi_twin(test_one_sample_is_named)
test_batch_size_must_be_auto_or_a_positive_int_mpi = mpi_twin(
    test_batch_size_must_be_auto_or_a_positive_int)
test_fitted_with_defaults_pickles_and_predicts_the_same_mpi = mpi_twin(
    test_fitted_with_defaults_pickles_and_predicts_the_same)
