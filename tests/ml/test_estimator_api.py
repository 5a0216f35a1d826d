"""What a scikit-learn user meets first, the same on every rank: ``fit(X, y)`` and its
keywords (``X_local=``/``y_local=`` still accepted for a release), ``NotFittedError``
before ``fit``, the fitted width checked by ``validate_data``, ``partial_fit(classes=)``
and scikit-learn's words for bad targets."""
import warnings

import numpy as np
import pytest
from sklearn.exceptions import DataConversionWarning, NotFittedError

import hpcdist
from hpcdist.data import make_classification
from hpcdist.ml import (
    KMeans,
    MLPClassifier,
    MLPRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from tests.helpers import all_ranks, expect_error, mpi_twin

N_FEATURES = 5


def _rows():
    X, y = make_classification(64 * hpcdist.get_world_size(), N_FEATURES, 3, random_state=3)
    return X, y


def _estimators():
    network = dict(hidden_layer_sizes=(4,), batch_size=8, max_iter=2, tol=0, random_state=0)
    return [KMeans(3, random_state=0), RandomForestClassifier(3, random_state=0),
            RandomForestRegressor(3, random_state=0), MLPClassifier(**network),
            MLPRegressor(**network)]


def _methods(estimator):
    """The names of the estimator's methods that need a fitted model."""
    names = ("predict", "predict_proba", "transform", "score")
    return [name for name in names if hasattr(estimator, name)]


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_fit_takes_X_and_y_by_keyword_and_the_old_names_warn(estimator):
    X, y = _rows()
    new = estimator.fit(X=X, y=y).get_parameters()
    with pytest.warns(FutureWarning) as caught:
        old = estimator.fit(X_local=X, y_local=y).get_parameters()
    renamed = [w for w in caught if w.category is FutureWarning]
    with all_ranks("the old keywords"):
        assert {w.filename for w in renamed} == {__file__}, "the warnings point at the caller"
        for old_name, new_name in (("X_local", "X"), ("y_local", "y")):
            assert any(f"{old_name}= is renamed {new_name}=" in str(w.message) for w in renamed)
        np.testing.assert_array_equal(old, new)
        with pytest.warns(FutureWarning, match="X_local="):
            np.testing.assert_array_equal(estimator.predict(X_local=X), estimator.predict(X))
        with pytest.raises(TypeError, match="got both X and its old name X_local="):
            estimator.predict(X, X_local=X)


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_a_model_is_needed_before_predicting(estimator):
    X, y = _rows()
    for name in _methods(estimator):
        arguments = (X, y) if name == "score" else (X,)
        expect_error(NotFittedError, getattr(estimator, name), *arguments)


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_the_fitted_width_is_checked_by_validate_data(estimator):
    X, y = _rows()
    estimator.fit(X, y)
    name = type(estimator).__name__
    for method in _methods(estimator):
        arguments = (X[:, :3], y) if method == "score" else (X[:, :3],)
        expect_error(ValueError, getattr(estimator, method), *arguments,
                     match=rf"X has 3 features, but {name} is expecting {N_FEATURES} features")


def test_partial_fit_takes_the_classes_of_all_calls():
    X, y = _rows()
    first = y != 2
    clf = MLPClassifier((4,), batch_size=8, random_state=0)
    clf.partial_fit(X[first], y[first], classes=[0, 1, 2])
    with all_ranks("classes from classes="):
        assert clf.classes_.tolist() == [0, 1, 2]
    clf.partial_fit(X, y)  # label 2, unseen so far, is one of the classes
    clf.partial_fit(X, y, classes=np.array([2, 1, 0]))  # the same set again
    expect_error(ValueError, clf.partial_fit, X, y, classes=[0, 1],
                 match=r"classes=\[0, 1\] is not the classes_ \[0, 1, 2\]")
    fresh = MLPClassifier((4,), batch_size=8, random_state=0)
    expect_error(ValueError, fresh.partial_fit, X, y, classes=[0, 1],
                 match=[r"labels .*2.* are not among the classes", "classes="])


@pytest.mark.mpi(min_size=2)
def test_partial_fit_classes_must_agree_between_ranks():
    X, y = _rows()
    classes = [0, 1, 2] if hpcdist.get_rank() == 0 else [0, 1, 2, 3]
    clf = MLPClassifier((4,), batch_size=8, random_state=0)
    expect_error(hpcdist.exceptions.CollectiveMismatchError, clf.partial_fit, X, y,
                 classes=classes, match=r"classes=\[0, 1, 2\]")


@pytest.mark.parametrize("estimator", [MLPClassifier(batch_size=8), RandomForestClassifier(3)],
                         ids=lambda e: type(e).__name__)
def test_continuous_targets_to_a_classifier(estimator):
    X, _ = _rows()
    expect_error(ValueError, estimator.fit, X, X[:, 0], match="Unknown label type: continuous")


@pytest.mark.parametrize("cls", [MLPClassifier, RandomForestClassifier, RandomForestRegressor])
def test_a_column_y_warns_and_fits_as_a_1d_y(cls):
    X, y = _rows()
    options = dict(batch_size=8, max_iter=1, tol=0) if cls is MLPClassifier else dict(
        n_estimators=2)
    flat = cls(random_state=0, **options).fit(X, y)
    with pytest.warns(DataConversionWarning, match="A column-vector y was passed"):
        column = cls(random_state=0, **options).fit(X, y[:, None])
    with all_ranks("fitted alike"):
        np.testing.assert_array_equal(column.get_parameters(), flat.get_parameters())


def test_a_regressor_network_fits_a_column_y_as_one_output():
    X, y = _rows()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DataConversionWarning)
        reg = MLPRegressor((4,), batch_size=8, max_iter=1, tol=0).fit(X, y[:, None] * 1.0)
    with all_ranks():
        assert reg.n_outputs_ == 1 and reg.predict(X).shape == (len(X),)


@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor, RandomForestClassifier,
                                 RandomForestRegressor])
def test_y_none_says_y_is_required(cls):
    X, _ = _rows()
    expect_error(ValueError, cls().fit, X, None,
                 match="requires y to be passed, but the target y is None")


def test_a_single_sample_is_named():
    X, y = _rows()  # one row per rank, all of one class
    expect_error(ValueError, MLPClassifier().fit, X[:1], np.zeros_like(y[:1]),
                 match=[rf"n_samples={hpcdist.get_world_size()} over all ranks", "one class"])


def test_a_regressor_fits_a_single_sample_as_scikit_learn():
    X, y = _rows()
    reg = MLPRegressor(max_iter=2, tol=0).fit(X[:1], y[:1].astype(float))
    assert reg.predict(X[:1]).shape == (1,)


# every test above but the MPI-only one also runs under mpiexec: test_..._mpi
for _test in (test_fit_takes_X_and_y_by_keyword_and_the_old_names_warn,
              test_a_model_is_needed_before_predicting,
              test_the_fitted_width_is_checked_by_validate_data,
              test_partial_fit_takes_the_classes_of_all_calls,
              test_continuous_targets_to_a_classifier, test_a_column_y_warns_and_fits_as_a_1d_y,
              test_y_none_says_y_is_required, test_a_single_sample_is_named,
              test_a_regressor_fits_a_single_sample_as_scikit_learn):
    globals()[f"{_test.__name__}_mpi"] = mpi_twin(_test)


def test_clone_keeps_a_context_given_as_comm(ctx):
    from sklearn.base import clone

    from hpcdist.ml import KMeans
    assert clone(KMeans(n_clusters=2, comm=ctx)).comm is ctx


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_bad_rows_raise_hpcdist_errors_naming_the_estimator(estimator):
    """scikit-learn's validation messages, as hpcdist errors (still ValueErrors), on every
    rank: NaN on the last rank's rows at fit, the wrong width at predict."""
    X, y = _rows()
    name = type(estimator).__name__
    spoiled = X.copy()
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        spoiled[1, 2] = np.nan
    expect_error(hpcdist.InvalidArgumentError, estimator.fit, spoiled, y,
                 match=rf"{name}.fit: Input X contains NaN")
    estimator.fit(X, y)
    expect_error(hpcdist.InvalidArgumentError, estimator.predict, X[:, :2],
                 match=rf"{name}: X has 2 features, but {name} is expecting {N_FEATURES}")


test_bad_rows_raise_hpcdist_errors_naming_the_estimator_mpi = mpi_twin(
    test_bad_rows_raise_hpcdist_errors_naming_the_estimator)
