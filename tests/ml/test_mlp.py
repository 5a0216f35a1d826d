"""MLPClassifier / MLPRegressor: accuracy, global semantics, trainer protocol, bad input."""
import warnings

import numpy as np
import pytest

import hpcdist
from hpcdist.data import load_digits, make_classification
from hpcdist.ml import MLPClassifier, MLPRegressor
from tests.helpers import all_ranks, assert_on_all_ranks, check_array, expect_error, mpi_twin


def _digits_classifier(**options):
    settings = dict(hidden_layer_sizes=(64,), batch_size=64, max_iter=40,
                    learning_rate_init=3e-3, random_state=0)
    settings.update(options)
    return MLPClassifier(**settings)


def test_digits_held_out_accuracy():
    """>= 0.97 on the held-out digits, whatever the number of ranks."""
    X, y = load_digits(split="train")
    X_test, y_test = load_digits(split="test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = _digits_classifier().fit(X, y)
    accuracy = clf.score(X_test, y_test)
    assert_on_all_ranks(accuracy >= 0.97, f"held-out accuracy {accuracy:.4f} < 0.97")
    assert_on_all_ranks(hpcdist.allreduce(accuracy, op="max") == accuracy,
                        "score differs between ranks")
    assert_on_all_ranks(list(clf.classes_) == list(range(10)), f"classes {clf.classes_}")


def test_model_and_loss_curve_identical_on_all_ranks():
    X, y = make_classification(600, 8, 3, random_state=1)
    clf = MLPClassifier((16,), batch_size=32, max_iter=3, random_state=0, tol=0).fit(X, y)
    vector = clf.get_parameters()
    gathered = hpcdist.allgather(vector[None])
    assert_on_all_ranks(all(np.array_equal(g, gathered[0]) for g in gathered),
                        "weights differ between ranks")
    curves = hpcdist.allgather(np.asarray(clf.loss_curve_)[None])
    assert_on_all_ranks(all(np.array_equal(c, curves[0]) for c in curves),
                        "loss curves differ between ranks")
    with all_ranks("loss decreases"):
        assert len(clf.loss_curve_) == 3 == clf.n_iter_
        assert clf.loss_curve_[-1] < clf.loss_curve_[0]


def test_predict_proba_rows_sum_to_one_and_predict_is_argmax():
    X, y = make_classification(300, 6, 4, random_state=2)
    clf = MLPClassifier((8,), batch_size=32, max_iter=2, random_state=0, tol=0).fit(X, y)
    proba = clf.predict_proba(X)
    with all_ranks():
        assert proba.shape == (len(X), 4)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_array_equal(clf.predict(X), clf.classes_[proba.argmax(axis=1)])


def test_string_labels_from_the_union_over_ranks():
    X, y = make_classification(200, 5, 3, random_state=3)
    names = np.array(["cat", "dog", "emu"])[y]
    clf = MLPClassifier((8,), batch_size=16, max_iter=1, random_state=0, tol=0).fit(X, names)
    with all_ranks():
        assert clf.classes_.tolist() == ["cat", "dog", "emu"]
        assert set(clf.predict(X)) <= {"cat", "dog", "emu"}


def test_regressor_learns_a_linear_function_with_global_r2():
    rng = np.random.default_rng(5 + hpcdist.get_rank())
    X = rng.normal(size=(256, 4))
    y = X @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.01 * rng.normal(size=256)
    reg = MLPRegressor((32,), batch_size=32, max_iter=60, learning_rate_init=1e-2,
                       random_state=0).fit(X, y)
    r2 = reg.score(X, y)
    assert_on_all_ranks(r2 > 0.98, f"R^2 {r2:.4f}")
    # the global R^2 equals sklearn's on the gathered rows
    from sklearn.metrics import r2_score
    all_y = hpcdist.allgather(y)
    all_pred = hpcdist.allgather(reg.predict(X))
    assert_on_all_ranks(abs(r2 - r2_score(all_y, all_pred)) < 1e-9, "global R^2 wrong")


def test_trainer_protocol_round_trip():
    X, y = make_classification(200, 5, 3, random_state=4)
    clf = MLPClassifier((8,), batch_size=16, max_iter=2, random_state=0, tol=0).fit(X, y)
    state = clf.state_dict()
    vector = clf.get_parameters()
    restored = MLPClassifier((8,), batch_size=16, random_state=0).load_state_dict(state)
    with all_ranks("state_dict round trip"):
        np.testing.assert_array_equal(restored.get_parameters(), vector)
        np.testing.assert_array_equal(restored.predict(X), clf.predict(X))
        assert restored.n_iter_ == clf.n_iter_ and restored.loss_curve_ == clf.loss_curve_
    # training continues identically from the restored state
    clf.train_epoch(X, y)
    restored.train_epoch(X, y)
    check_array(restored.get_parameters(), clf.get_parameters(), rtol=1e-12, what="resumed")
    clf.set_parameters(np.zeros_like(vector))
    with all_ranks():
        assert not clf.get_parameters().any()
    with pytest.raises(ValueError, match="got 3 values"):
        clf.set_parameters(np.zeros(3))


def test_synchronize_model_averages_weights():
    X, y = make_classification(100, 5, 2, random_state=6)
    clf = MLPClassifier((4,), batch_size=8, max_iter=1, random_state=0, tol=0).fit(X, y)
    vector = clf.get_parameters()
    clf.set_parameters(vector + hpcdist.get_rank())
    clf.synchronize_model()
    size = hpcdist.get_world_size()
    check_array(clf.get_parameters(), vector + (size - 1) / 2, rtol=1e-12, what="average")


def test_verbose_shows_progress_on_rank_0(capsys):
    X, y = make_classification(100, 5, 2, random_state=6)
    MLPClassifier((4,), batch_size=8, max_iter=2, random_state=0, tol=0, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    with all_ranks():
        assert ("MLPClassifier" in err) == (hpcdist.get_rank() == 0)


# -- bad input: the same clear error on every rank ---------------------------------------

def _data(rows=64, features=5, seed=7):
    return make_classification(rows * hpcdist.get_world_size(), features, 3, random_state=seed)


def test_nan_in_X_on_one_rank():
    X, y = _data()
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        X[3, 2] = np.nan
    expect_error(ValueError, MLPClassifier((4,), batch_size=8).fit, X, y, match=r"NaN")


def test_infinity_in_X():
    X, y = _data()
    X[0, 0] = np.inf
    expect_error(ValueError, MLPClassifier((4,), batch_size=8).fit, X, y, match=r"infinity")


_SIZES = r"should be a non-empty tuple of integers >= 1"


@pytest.mark.parametrize("options, exc, pattern", [
    (dict(activation="sigmoid"), ValueError, r"activation='sigmoid' is not supported"),
    (dict(activation=["relu"]), ValueError, r"activation=\['relu'\] is not supported"),
    (dict(hidden_layer_sizes=(0,)), ValueError, rf"hidden_layer_sizes=\(0,\) {_SIZES}"),
    (dict(hidden_layer_sizes="abc"), ValueError, rf"hidden_layer_sizes='abc' {_SIZES}"),
    (dict(hidden_layer_sizes=None), ValueError, rf"hidden_layer_sizes=None {_SIZES}"),
    (dict(hidden_layer_sizes=np.nan), ValueError, rf"hidden_layer_sizes=nan {_SIZES}"),
    (dict(hidden_layer_sizes=[[3]]), ValueError, rf"hidden_layer_sizes=\[\[3\]\] {_SIZES}"),
    (dict(hidden_layer_sizes=()), ValueError, rf"hidden_layer_sizes=\(\) {_SIZES}"),
    (dict(hidden_layer_sizes=(4.5,)), ValueError, rf"hidden_layer_sizes=\(4.5,\) {_SIZES}"),
    (dict(learning_rate_init=0), ValueError, r"learning_rate_init=0 should be a finite number > 0"),
    (dict(learning_rate_init=np.inf), ValueError, r"learning_rate_init=inf should be a finite"),
    (dict(learning_rate_init=np.nan), ValueError, r"learning_rate_init=nan should be a finite"),
    (dict(learning_rate_init="a"), ValueError, r"learning_rate_init='a' should be a finite"),
    (dict(alpha=np.inf), ValueError, r"alpha=inf should be a finite number >= 0"),
    (dict(alpha=-1.0), ValueError, r"alpha=-1.0 should be a finite number >= 0"),
    (dict(alpha="x"), ValueError, r"alpha='x' should be a finite number >= 0"),
    (dict(tol="x"), ValueError, r"tol='x' should be a finite number >= 0"),
    (dict(tol=np.nan), ValueError, r"tol=nan should be a finite number >= 0"),
    (dict(batch_size="8"), ValueError, r"batch_size='8' should be an int >= 1"),
    (dict(batch_size=2.5), ValueError, r"batch_size=2.5 should be an int >= 1"),
    (dict(batch_size=True), ValueError, r"batch_size=True should be an int >= 1"),
    (dict(batch_size=np.inf), ValueError, r"batch_size=inf should be an int >= 1"),
    (dict(max_iter=np.inf), ValueError, r"max_iter=inf should be an int >= 1"),
    (dict(max_iter=2.5), ValueError, r"max_iter=2.5 should be an int >= 1"),
    (dict(n_iter_no_change=1.5), ValueError, r"n_iter_no_change=1.5 should be an int >= 1"),
    (dict(n_iter_no_change=np.inf), ValueError, r"n_iter_no_change=inf should be an int >= 1"),
    (dict(bucket_size_mb="x"), TypeError, r"bucket_size_mb='x' should be a number >= 0"),
    (dict(bucket_size_mb=-1), ValueError, r"bucket_size_mb=-1.0 should be >= 0"),
    (dict(compression="fp16"), TypeError,
     r"compression='fp16' is not a compressor.*pass None or a compressor object, e\.g\. "
     r"hpcdist\.compression\.FP16Compressor\(\)"),
    (dict(compression=123), TypeError, r"compression=123 is not a compressor"),
    (dict(random_state="x"), TypeError, r"random_state='x' should be an integer, None, or a "
                                        r"numpy RandomState or Generator"),
    (dict(random_state=-1), ValueError, r"random_state=-1 should be in \[0, 4294967295\]"),
    (dict(random_state=2 ** 40), ValueError, r"random_state=1099511627776 should be in"),
])
@pytest.mark.parametrize("cls", [MLPClassifier, MLPRegressor])
def test_bad_hyperparameters(cls, options, exc, pattern):
    X, y = _data()
    error = expect_error(exc, cls(**{"batch_size": 8, "max_iter": 1, **options}).fit, X, y,
                         match=rf"{cls.__name__}: {pattern}")
    assert isinstance(error, hpcdist.HpcdistError)


def test_random_state_may_be_a_generator():
    X, y = _data()
    first = MLPClassifier((4,), batch_size=8, max_iter=2, tol=0,
                          random_state=np.random.default_rng(3)).fit(X, y)
    again = MLPClassifier((4,), batch_size=8, max_iter=2, tol=0,
                          random_state=np.random.default_rng(3)).fit(X, y)
    with all_ranks("a Generator seeds alike"):
        np.testing.assert_array_equal(first.get_parameters(), again.get_parameters())


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_set_parameters_refuses_nan_and_infinity(value):
    X, y = _data()
    clf = MLPClassifier((4,), batch_size=8, max_iter=1, tol=0, random_state=0).fit(X, y)
    before = clf.get_parameters()
    bad = before.copy()
    bad[5] = value
    expect_error(ValueError, clf.set_parameters, bad,
                 match=rf"MLPClassifier.set_parameters: the vector holds NaN or infinity at 1 "
                       rf"of its {before.size} positions \(the first at index 5\)")
    np.testing.assert_array_equal(clf.get_parameters(), before)  # nothing was changed


def test_predict_with_wrong_width():
    X, y = _data()
    clf = MLPClassifier((4,), batch_size=8, max_iter=1, tol=0).fit(X, y)
    with pytest.raises(ValueError, match=r"has 3 features, but MLPClassifier is expecting 5"):
        clf.predict(X[:, :3])


def test_single_class_is_an_error():
    X, _ = _data()
    expect_error(ValueError, MLPClassifier((4,), batch_size=8).fit, X, np.zeros(len(X)),
                 match=r"at least 2 classes")


@pytest.mark.mpi(min_size=2)
def test_different_widths_on_different_ranks():
    X, y = _data()
    if hpcdist.get_rank() == 1:
        X = X[:, :4]
    expect_error(ValueError, MLPClassifier((4,), batch_size=8).fit, X, y,
                 match=[r"n_features differs across ranks", r"rank 1 has 4"])


@pytest.mark.mpi(min_size=2)
def test_label_only_one_rank_has_after_classes_are_fixed():
    X, y = _data()
    clf = MLPClassifier((4,), batch_size=8, random_state=0).train_epoch(X, y)
    y_new = y.copy()
    if hpcdist.get_rank() == 1:
        y_new[0] = 99
    expect_error(ValueError, clf.train_epoch, X, y_new,
                 match=[r"not among the classes", r"99"])


@pytest.mark.mpi(min_size=2)
def test_ranks_with_different_row_counts_train_together():
    rank = hpcdist.get_rank()
    X, y = make_classification(50 + 30 * rank, 5, 2, random_state=10 + rank)
    clf = MLPClassifier((8,), batch_size=16, max_iter=2, random_state=0, tol=0).fit(X, y)
    gathered = hpcdist.allgather(clf.get_parameters()[None])
    assert_on_all_ranks(all(np.array_equal(g, gathered[0]) for g in gathered),
                        "weights differ between ranks")


test_digits_held_out_accuracy_mpi = mpi_twin(test_digits_held_out_accuracy)
test_model_and_loss_curve_identical_on_all_ranks_mpi = mpi_twin(
    test_model_and_loss_curve_identical_on_all_ranks)
test_predict_proba_rows_sum_to_one_and_predict_is_argmax_mpi = mpi_twin(
    test_predict_proba_rows_sum_to_one_and_predict_is_argmax)
test_string_labels_from_the_union_over_ranks_mpi = mpi_twin(
    test_string_labels_from_the_union_over_ranks)
test_regressor_learns_a_linear_function_with_global_r2_mpi = mpi_twin(
    test_regressor_learns_a_linear_function_with_global_r2)
test_trainer_protocol_round_trip_mpi = mpi_twin(test_trainer_protocol_round_trip)
test_synchronize_model_averages_weights_mpi = mpi_twin(test_synchronize_model_averages_weights)
test_verbose_shows_progress_on_rank_0_mpi = mpi_twin(test_verbose_shows_progress_on_rank_0)
test_nan_in_X_on_one_rank_mpi = mpi_twin(test_nan_in_X_on_one_rank)
test_infinity_in_X_mpi = mpi_twin(test_infinity_in_X)
test_bad_hyperparameters_mpi = mpi_twin(test_bad_hyperparameters)
test_single_class_is_an_error_mpi = mpi_twin(test_single_class_is_an_error)
