"""score(X, y, sample_weight=...) over the rows of all ranks, against scikit-learn's metrics
on the gathered rows; a bad sample_weight on one rank raises on every rank."""
import warnings

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, r2_score

import hpcdist
from hpcdist.ml import MLPClassifier, MLPRegressor, RandomForestClassifier, RandomForestRegressor
from tests.helpers import all_ranks, expect_error, mpi_twin

ESTIMATORS = {
    "mlp_classifier": (lambda: MLPClassifier((8,), max_iter=5, batch_size=8, random_state=0),
                       "classification", accuracy_score),
    "forest_classifier": (lambda: RandomForestClassifier(4, max_depth=3, random_state=0),
                          "classification", accuracy_score),
    "mlp_regressor": (lambda: MLPRegressor((8,), max_iter=5, batch_size=8, random_state=0),
                      "regression", r2_score),
    "forest_regressor": (lambda: RandomForestRegressor(4, max_depth=3, random_state=0),
                         "regression", r2_score),
}


def _rows(task):
    """A different number of rows on every rank, and positive weights."""
    rank = hpcdist.get_rank()
    rng = np.random.default_rng(7 + rank)
    X = rng.normal(size=(40 + 9 * rank, 4))
    y = X[:, 0] + 0.5 * X[:, 1] + 0.3 * rng.normal(size=len(X))
    return X, ((y > 0).astype(int) if task == "classification" else y), rng.uniform(0, 3, len(X))


def _fitted(name):
    make, task, metric = ESTIMATORS[name]
    X, y, weights = _rows(task)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # too few epochs to converge, on purpose
        model = make().fit(X, y)
    return model, X, y, weights, metric


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_score_weighs_the_rows_of_all_ranks_as_scikit_learn(name):
    model, X, y, weights, metric = _fitted(name)
    weighted, plain = model.score(X, y, sample_weight=weights), model.score(X, y)
    predicted, y_all, weights_all = (hpcdist.allgather(a) for a in (model.predict(X), y, weights))
    with all_ranks(name):
        assert weighted == pytest.approx(metric(y_all, predicted, sample_weight=weights_all),
                                         rel=1e-12, abs=1e-12)
        assert plain == pytest.approx(metric(y_all, predicted), rel=1e-12, abs=1e-12)
        assert weighted != plain  # the weights count


test_score_weighs_the_rows_of_all_ranks_as_scikit_learn_mpi = mpi_twin(
    test_score_weighs_the_rows_of_all_ranks_as_scikit_learn)


# a bad sample_weight made from this rank's good one, and what the error says of it
_BAD_WEIGHTS = {
    "short": (lambda w: w[:3], r"\(sample_weight.shape == \(3,\), expected"),
    "negative": (lambda w: -w, r"\(Negative values"),
    "nan": (lambda w: np.where(np.arange(len(w)) == 1, np.nan, w), r"\(Input sample_weight "
                                                                   r"contains NaN"),
}


@pytest.mark.parametrize("bad", list(_BAD_WEIGHTS))
def test_a_bad_sample_weight_on_one_rank_raises_on_every_rank(bad):
    model, X, y, weights, _ = _fitted("forest_classifier")
    spoil, match = _BAD_WEIGHTS[bad]
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        weights = spoil(weights)
    expect_error(hpcdist.InvalidArgumentError, model.score, X, y, sample_weight=weights,
                 match=r"RandomForestClassifier.score: sample_weight is not usable " + match)


test_a_bad_sample_weight_on_one_rank_raises_on_every_rank_mpi = mpi_twin(
    test_a_bad_sample_weight_on_one_rank_raises_on_every_rank)


@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_ranks_without_rows_take_part(name):
    """The last rank scores no row: the others' score; no row anywhere: NaN."""
    model, X, y, weights, metric = _fitted(name)
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        X, y, weights = X[:0], y[:0], weights[:0]
    weighted = model.score(X, y, sample_weight=weights)
    nowhere = model.score(X[:0], y[:0])
    predicted, y_all, weights_all = (hpcdist.allgather(a) for a in (model.predict(X), y, weights))
    with all_ranks(name):
        if len(y_all):
            assert weighted == pytest.approx(metric(y_all, predicted, sample_weight=weights_all),
                                             rel=1e-12, abs=1e-12)
        else:
            assert np.isnan(weighted)
        assert np.isnan(nowhere)


test_ranks_without_rows_take_part_mpi = mpi_twin(test_ranks_without_rows_take_part)


def test_regressor_targets_of_the_wrong_width_are_named():
    model, X, y, _, _ = _fitted("mlp_regressor")
    expect_error(hpcdist.InvalidArgumentError, model.score, X, np.c_[y, y],
                 match=r"MLPRegressor.score: y of shape \(\d+, 2\) does not hold the model's 1 "
                       r"output\(s\) a row; pass y of shape \(n_rows, 1\)")


@pytest.mark.parametrize("name", ["forest_regressor", "mlp_regressor", "forest_classifier"])
def test_targets_of_the_wrong_length_raise(name):
    model, X, y, _, _ = _fitted(name)
    expect_error(ValueError, model.score, X, y[:5],
                 match=r"inconsistent numbers of samples: \[\d+, 5\]")


def test_weights_for_a_rank_without_rows_must_be_empty():
    model, X, y, _, _ = _fitted("forest_regressor")
    expect_error(hpcdist.InvalidArgumentError, model.score, X[:0], y[:0], sample_weight=[1.0],
                 match=r"RandomForestRegressor.score: sample_weight of shape \(1,\) is not "
                       r"usable; pass one finite weight >= 0 for each of this rank's 0 row")
