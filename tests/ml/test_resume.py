"""Estimators: a fit interrupted (stopped, or preempted by a signal) and resumed from a
checkpoint ends with the same model as an uninterrupted fit, bitwise (float64, CPU)."""
import os
import signal

import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import CheckpointManager
from hpcdist.data import make_classification
from hpcdist.launch import Preempted
from hpcdist.ml import (
    KMeans,
    MLPClassifier,
    MLPRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin


def shared_directory(tmp_path):
    """Rank 0's tmp_path, the same on every rank."""
    return hpcdist.broadcast_object(str(tmp_path))


def _mlp(max_iter):
    return MLPClassifier((8,), batch_size=16, max_iter=max_iter, random_state=0, tol=0)


def _data():
    return make_classification(240, 6, 3, random_state=3)


def test_mlp_stopped_and_resumed_equals_uninterrupted(tmp_path):
    X, y = _data()
    reference = _mlp(6).fit(X, y)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    _mlp(3).fit(X, y, checkpoint=CheckpointManager(directory), checkpoint_every=1)
    manager = CheckpointManager(directory)
    assert_on_all_ranks(manager.latest_step() == 3, f"latest step {manager.latest_step()}")
    resumed = _mlp(6).fit(X, y, checkpoint=manager, checkpoint_every=2)
    with all_ranks("resumed == uninterrupted"):
        np.testing.assert_array_equal(resumed.get_parameters(), reference.get_parameters())
        assert resumed.loss_curve_ == reference.loss_curve_
        assert resumed.n_iter_ == 6
    assert_on_all_ranks(manager.latest_step() == 6, "final state not saved")


def test_mlp_preempted_by_a_signal_saves_exits_75_and_resumes_identically(tmp_path,
                                                                          monkeypatch):
    X, y = _data()
    reference = _mlp(5).fit(X, y)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    original_epoch = MLPClassifier._epoch

    def epoch_then_signal(self, *args):
        loss = original_epoch(self, *args)
        if self.n_iter_ == 2 and hpcdist.get_rank() == 0:  # only one rank gets it
            os.kill(os.getpid(), signal.SIGUSR1)
        return loss

    monkeypatch.setattr(MLPClassifier, "_epoch", epoch_then_signal)
    with pytest.raises(Preempted) as stopped:
        _mlp(5).fit(X, y, checkpoint=CheckpointManager(directory), checkpoint_every=10)
    monkeypatch.undo()
    with all_ranks("exit code and step"):
        assert stopped.value.code == 75 and stopped.value.step == 2
    resumed = _mlp(5).fit(X, y, checkpoint=CheckpointManager(directory))
    with all_ranks("resumed == uninterrupted"):
        np.testing.assert_array_equal(resumed.get_parameters(), reference.get_parameters())
        assert resumed.loss_curve_ == reference.loss_curve_


def test_checkpoint_every_without_checkpoint_is_an_error():
    X, y = _data()
    with pytest.raises(ValueError, match="checkpoint_every=2 needs checkpoint="):
        _mlp(1).fit(X, y, checkpoint_every=2)


@pytest.mark.parametrize("every", [0, -1, 2.5, True, "x", float("nan"), float("inf")])
def test_checkpoint_every_that_is_no_whole_number(tmp_path, every):
    X, y = _data()
    manager = CheckpointManager(os.path.join(shared_directory(tmp_path), "ckpt"))
    expect_error(hpcdist.InvalidArgumentError, _mlp(1).fit, X, y, checkpoint=manager,
                 checkpoint_every=every,
                 match=rf"MLPClassifier.fit: checkpoint_every={every!r} should be a whole "
                       r"number >= 1")


def _estimators():
    return [KMeans(3, random_state=0, max_iter=2), RandomForestClassifier(2, random_state=0),
            RandomForestRegressor(2, random_state=0), _mlp(1), MLPRegressor((8,), batch_size=16,
                                                                          max_iter=1, tol=0)]


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
def test_load_state_dict_of_something_else_names_the_key_and_the_source(estimator):
    X, y = _data()
    name = type(estimator).__name__
    fix = rf"pass what {name}.state_dict\(\) returned"
    for state in ("x", None, [1]):
        expect_error(hpcdist.InvalidArgumentTypeError, estimator.load_state_dict, state,
                     match=[rf"{name}.load_state_dict: state is a {type(state).__name__}, not a "
                            "dict", fix])
    expect_error(hpcdist.StateDictKeyError, estimator.load_state_dict, {"w": np.ones(3)},
                 match=[rf"{name}.load_state_dict: the state has no '\w+'",
                        r"it looks like no hpcdist estimator's state \(its keys: \['w'\]\)", fix])
    other = (RandomForestClassifier(2, random_state=0) if isinstance(estimator, KMeans)
             else KMeans(3, random_state=0, max_iter=2))
    expect_error(hpcdist.StateDictKeyError, estimator.load_state_dict,
                 other.fit(X, y).state_dict(),
                 match=rf"it looks like the state of {type(other).__name__}; {fix}")


def test_a_regressor_state_given_to_a_classifier():
    X, y = _data()
    state = MLPRegressor((8,), batch_size=16, max_iter=1, tol=0).fit(X, y).state_dict()
    expect_error(KeyError, _mlp(1).load_state_dict, state,
                 match=r"the state has no 'classes'; it looks like the state of MLPRegressor")


@pytest.mark.parametrize("first, then, reason", [
    (lambda X, y, manager: manager.save(1, {"w": np.ones(3)}), _mlp(1),
     r"it holds \['w'\], not the state of an estimator's fit"),
    (lambda X, y, manager: KMeans(3, random_state=0, max_iter=2).fit(X, checkpoint=manager),
     RandomForestClassifier(2, random_state=0), r"it was saved by a KMeans fit"),
    (lambda X, y, manager: KMeans(3, random_state=0, max_iter=2).fit(X, checkpoint=manager),
     KMeans(4, random_state=0), r"cluster_centers of shape \(3, 6\) do not fit n_clusters=4"),
])
def test_a_directory_of_another_run_says_to_use_a_new_one(tmp_path, first, then, reason):
    X, y = _data()
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    first(X, y, CheckpointManager(directory))
    manager = CheckpointManager(directory)
    steps = manager.steps()
    name = type(then).__name__
    expect_error(hpcdist.InvalidArgumentError, then.fit, X, y, checkpoint=manager,
                 match=[rf"{name}.fit: the checkpoint directory {directory} holds another run's "
                        rf"checkpoint \(step {steps[-1]}\), which this {name} cannot resume",
                        reason, r"use a new directory for this fit"])
    assert_on_all_ranks(manager.steps() == steps, "the other run's checkpoints are kept")


test_a_directory_of_another_run_says_to_use_a_new_one_mpi = mpi_twin(
    test_a_directory_of_another_run_says_to_use_a_new_one)


test_mlp_stopped_and_resumed_equals_uninterrupted_mpi = mpi_twin(
    test_mlp_stopped_and_resumed_equals_uninterrupted)
test_mlp_preempted_by_a_signal_saves_exits_75_and_resumes_identically_mpi = mpi_twin(
    test_mlp_preempted_by_a_signal_saves_exits_75_and_resumes_identically)
