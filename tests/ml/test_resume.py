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
from hpcdist.ml import MLPClassifier
from tests.helpers import all_ranks, assert_on_all_ranks, mpi_twin


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


test_mlp_stopped_and_resumed_equals_uninterrupted_mpi = mpi_twin(
    test_mlp_stopped_and_resumed_equals_uninterrupted)
test_mlp_preempted_by_a_signal_saves_exits_75_and_resumes_identically_mpi = mpi_twin(
    test_mlp_preempted_by_a_signal_saves_exits_75_and_resumes_identically)
