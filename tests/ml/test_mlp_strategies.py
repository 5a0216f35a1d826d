"""MLPClassifier/MLPRegressor(strategy=...): training strategies inside the estimators.

Held-out accuracy on digits, bytes against data parallelism, exact resumption from
checkpoints (each rank's replica saved), and the errors of bad strategy settings."""
import os
import pickle

import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import CheckpointManager
from hpcdist.data import make_classification
from hpcdist.ml import MLPClassifier, MLPRegressor
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin
from tests.ml.test_resume import shared_directory
from tests.parallel._strategies import digits

STRATEGIES = [("local_sgd", {"period": 8}), ("easgd", None), ("gossip", {"topology": "ring"}),
              ("federated", {"local_epochs": 1})]


def _mlp(strategy, options=None, max_iter=6, **extra):
    return MLPClassifier((8,), batch_size=16, max_iter=max_iter, random_state=0, tol=0,
                         strategy=strategy, strategy_options=options, **extra)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("strategy, options", STRATEGIES)
def test_strategies_reach_95_percent_on_digits(ctx, strategy, options):
    if ctx.size not in (2, 4):
        pytest.skip("convergence is checked at 2 and 4 ranks")
    X, y, rows, X_test, y_test = digits(ctx.rank, ctx.size)
    test_rows = np.array_split(np.arange(len(X_test)), ctx.size)[ctx.rank]
    clf = MLPClassifier((64,), batch_size=64, learning_rate_init=3e-3, max_iter=25,
                        random_state=0, tol=0, strategy=strategy, strategy_options=options)
    clf.fit(X[rows], y[rows])
    score = clf.score(X_test[test_rows], y_test[test_rows])
    parameters = clf.get_parameters()
    same = hpcdist.allreduce(parameters, op="max")
    with all_ranks(f"{strategy}: held-out accuracy"):
        assert score >= 0.95, f"{score:.4f} < 0.95"
        np.testing.assert_array_equal(parameters, same)  # finalized: one model


@pytest.mark.mpi(min_size=2)
def test_local_sgd_sends_at_most_a_quarter_of_data_parallel(ctx):
    X, y = make_classification(480, 6, 3, random_state=3)
    sent = {}
    for strategy, options in [("data_parallel", None), ("local_sgd", {"period": 8})]:
        ctx.reset_stats()
        _mlp(strategy, options, max_iter=4).fit(X, y)
        sent[strategy] = sum(record["bytes_sent"] for record in ctx.stats().values())
    assert_on_all_ranks(sent["local_sgd"] <= sent["data_parallel"] / 4, str(sent))


@pytest.mark.parametrize("strategy, options, extra", [
    *[(s, o, {}) for s, o in STRATEGIES], ("data_parallel", None, {"adaptive_batch": (8, 64)})])
def test_stopped_and_resumed_equals_uninterrupted(tmp_path, strategy, options, extra):
    """Each rank's replica, its optimizer and the strategy's state (steps, EASGD's center,
    FedAvg's rounds and seed, the adaptive batch) resume bitwise."""
    X, y = make_classification(240, 6, 3, random_state=3)
    reference = _mlp(strategy, options, **extra).fit(X, y)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    _mlp(strategy, options, max_iter=3, **extra).fit(
        X, y, checkpoint=CheckpointManager(directory))
    resumed = _mlp(strategy, options, **extra).fit(X, y,
                                                   checkpoint=CheckpointManager(directory))
    with all_ranks(f"{strategy}: resumed == uninterrupted"):
        np.testing.assert_array_equal(resumed.get_parameters(), reference.get_parameters())
        assert resumed.loss_curve_ == reference.loss_curve_
        assert resumed.t_ == reference.t_
        assert resumed._training.state_dict().keys() == reference._training.state_dict().keys()


test_stopped_and_resumed_equals_uninterrupted_mpi = mpi_twin(
    test_stopped_and_resumed_equals_uninterrupted)


def test_strategy_state_travels_with_pickles_and_regressors(ctx):
    X, y = make_classification(240, 6, 3, random_state=3)
    clf = _mlp("easgd", {"period": 2}, max_iter=2).fit(X, y)
    copy = pickle.loads(pickle.dumps(clf))
    clf.partial_fit(X, y)
    copy.partial_fit(X, y)
    with all_ranks("pickled strategy"):
        np.testing.assert_array_equal(copy.get_parameters(), clf.get_parameters())
        assert copy._training.strategy.steps == clf._training.strategy.steps > 0
    regressor = MLPRegressor((8,), batch_size=16, max_iter=20, random_state=0, tol=0,
                             strategy="local_sgd", learning_rate_init=1e-2)
    target = X[:, 0] - 2 * X[:, 1]
    score = regressor.fit(X, target).score(X, target)
    assert_on_all_ranks(score > 0.9, f"R^2 {score}")


test_strategy_state_travels_with_pickles_and_regressors_mpi = mpi_twin(
    test_strategy_state_travels_with_pickles_and_regressors)


def test_bad_strategy_settings_raise_on_every_rank(ctx):
    X, y = make_classification(64, 4, 2, random_state=3)
    error = hpcdist.InvalidArgumentError
    expect_error(error, _mlp("pipeline").fit, X, y,
                 match=r"strategy='pipeline' is not supported; choose one of \['data_parallel', "
                       r"'local_sgd', 'easgd', 'gossip', 'federated', 'parameter_server'\]")
    expect_error(error, _mlp("local_sgd", {"period": 2, "alpha": 0.5}).fit, X, y,
                 match=r"strategy_options names \['alpha'\], which strategy='local_sgd' does "
                       r"not take; it takes \['period', 'warmup_steps'\]")
    expect_error(error, _mlp("data_parallel", {"period": 2}).fit, X, y,
                 match=r"which strategy='data_parallel' does not take; it takes none")
    expect_error(error, _mlp("local_sgd", {"period": 0}).fit, X, y,
                 match=r"MLPClassifier: LocalSGD: period=0 should be >= 1")
    expect_error(error, _mlp("easgd", {"alpha": 2.0}).fit, X, y,
                 match=r"ElasticAveraging: alpha=2.0 should be in \(0, 1\)")
    expect_error(error, _mlp("federated", {"clients_per_round": ctx.size + 1}).fit, X, y,
                 match=rf"clients_per_round={ctx.size + 1} should be in \[1, {ctx.size}\]")
    outside = {r: [ctx.size] for r in range(ctx.size)}
    expect_error(error, _mlp("gossip", {"topology": outside}).fit, X, y,
                 match=rf"names rank {ctx.size}, outside the world")
    expect_error(error, _mlp("local_sgd", adaptive_batch=(8, 64)).fit, X, y,
                 match=r"adaptive_batch=\(8, 64\) works with strategy='data_parallel' only")
    expect_error(error, _mlp("data_parallel", adaptive_batch=8).fit, X, y,
                 match=r"adaptive_batch=8 should be a pair \(min_batch, max_batch\)")
    expect_error(error, _mlp("data_parallel", adaptive_batch=(64, 8)).fit, X, y,
                 match=r"max_batch=8 should be >= 64")


test_bad_strategy_settings_raise_on_every_rank_mpi = mpi_twin(
    test_bad_strategy_settings_raise_on_every_rank)


@pytest.mark.mpi(min_size=2)
def test_strategy_options_that_differ_between_ranks(ctx):
    X, y = make_classification(64, 4, 2, random_state=3)
    clf = _mlp("local_sgd", {"period": 8 if ctx.rank == 0 else 4})
    expect_error(hpcdist.ConfigMismatchError, clf.fit, X, y,
                 match=r"MLPClassifier.fit: strategy_options differs across ranks: rank 0 has "
                       r"\{'period': 8\}")


@pytest.mark.mpi(min_size=2)
def test_replicas_resume_only_at_the_same_number_of_ranks(ctx):
    X, y = make_classification(64, 4, 2, random_state=3)
    state = _mlp("gossip", max_iter=1).fit(X, y).state_dict()
    state["world_size"] = ctx.size + 1
    expect_error(hpcdist.InvalidArgumentError, _mlp("gossip").load_state_dict, state,
                 match=rf"the state holds {ctx.size + 1} networks, one per rank of a "
                       rf"strategy='gossip' fit, but {ctx.size} ranks load it; resume at "
                       rf"{ctx.size + 1} ranks")
