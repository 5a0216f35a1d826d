"""KMeans checkpoints: a fit stopped (by max_iter, a signal or a kill after a save) and
resumed from its checkpoint ends with the same model as an uninterrupted fit, bitwise
(float64, CPU, same number of ranks), through all the ``n_init`` runs."""
import os
import signal

import numpy as np
import pytest
from sklearn.datasets import make_blobs as sklearn_blobs

import hpcdist
from hpcdist.checkpoint import CheckpointManager
from hpcdist.launch import Preempted
from hpcdist.ml import KMeans
from hpcdist.ml.kmeans import lloyd
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin


def shared_directory(tmp_path):
    """Rank 0's tmp_path, the same on every rank."""
    return hpcdist.broadcast_object(str(tmp_path))


def _global_data():
    """Overlapping blobs: more than 10 Lloyd iterations per run with tol=0."""
    X, _ = sklearn_blobs(1200, 3, centers=8, cluster_std=3.5, random_state=1)
    return X


def _shard(X):
    """Uneven shards (rank r holds a share proportional to r + 1)."""
    size, rank = hpcdist.get_world_size(), hpcdist.get_rank()
    weights = np.arange(1, size + 1, dtype=float)
    bounds = np.concatenate([[0], np.round(np.cumsum(weights) / weights.sum() * len(X))])
    return X[int(bounds[rank]):int(bounds[rank + 1])]


def _kmeans(max_iter, init="random", n_init=3, **options):
    return KMeans(6, init=init, n_init=n_init, max_iter=max_iter, tol=0, random_state=0,
                  **options)


def _assert_same_fit(resumed, reference, what="resumed == uninterrupted"):
    with all_ranks(what):
        np.testing.assert_array_equal(resumed.cluster_centers_, reference.cluster_centers_)
        assert resumed.inertia_ == reference.inertia_, (resumed.inertia_, reference.inertia_)
        assert resumed.n_iter_ == reference.n_iter_, (resumed.n_iter_, reference.n_iter_)
        np.testing.assert_array_equal(resumed.labels_, reference.labels_)


class _CountIterations:
    """Wraps the Lloyd iteration of the loop; ``after(n)`` runs after the n-th one."""

    def __init__(self, monkeypatch, after=None, before=None):
        self.calls = 0
        self.original = lloyd.lloyd_iteration
        self.after, self.before = after, before
        monkeypatch.setattr(lloyd, "lloyd_iteration", self)

    def __call__(self, *args):
        if self.before is not None:
            self.before(self.calls + 1)
        result = self.original(*args)
        self.calls += 1
        if self.after is not None:
            self.after(self.calls)
        return result


@pytest.mark.parametrize("init, n_init", [("random", 3), ("k-means++", 1),
                                          ("k-means++", 3)])
def test_stopped_by_max_iter_and_resumed_equals_uninterrupted(tmp_path, init, n_init):
    X = _shard(_global_data())
    reference = _kmeans(100, init, n_init).fit(X)
    assert_on_all_ranks(reference.n_iter_ > 5, f"n_iter_={reference.n_iter_}: too easy")
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    stopped = _kmeans(3, init, n_init).fit(X, checkpoint=CheckpointManager(directory),
                                           checkpoint_every=2)
    manager = CheckpointManager(directory)
    with all_ranks("stopped fit"):
        assert stopped.n_iter_ == 3
        assert manager.latest_step() == 3 * n_init, manager.steps()
        assert not hasattr(stopped, "_fit_progress")
        assert all(isinstance(v, (np.ndarray, int, float))
                   for v in stopped.state_dict().values())  # a finished model, as without
    resumed = _kmeans(100, init, n_init).fit(X, checkpoint=manager, checkpoint_every=4)
    _assert_same_fit(resumed, reference)
    again = _kmeans(100, init, n_init).fit(X, checkpoint=CheckpointManager(directory))
    _assert_same_fit(again, reference, "a finished fit resumed again")


def test_preempted_by_a_signal_on_one_rank_saves_exits_75_and_resumes_identically(
        tmp_path, monkeypatch):
    X = _shard(_global_data())
    reference = _kmeans(100).fit(X)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")

    def signal_rank_0(iterations):
        if iterations == 4 and hpcdist.get_rank() == 0:  # only one rank gets it
            os.kill(os.getpid(), signal.SIGUSR1)

    _CountIterations(monkeypatch, after=signal_rank_0)
    with pytest.raises(Preempted) as stopped:
        _kmeans(100).fit(X, checkpoint=CheckpointManager(directory), checkpoint_every=100)
    monkeypatch.undo()
    manager = CheckpointManager(directory)
    with all_ranks("exit code and step"):
        assert stopped.value.code == 75 and stopped.value.step == 4
        assert manager.steps() == [4]
    resumed = _kmeans(100).fit(X, checkpoint=manager)
    _assert_same_fit(resumed, reference)


def test_signal_in_every_run_and_between_runs(tmp_path, monkeypatch):
    """Stops after the first iteration, at the end and start of a run (the first run is
    that of n_init=1), in the middle and at the end of the last run."""
    X = _shard(_global_data())
    reference = _kmeans(100).fit(X)
    first_run = _kmeans(100, n_init=1).fit(X).n_iter_
    counter = _CountIterations(monkeypatch)
    _kmeans(100).fit(X)
    total = counter.calls
    monkeypatch.undo()
    assert_on_all_ranks(1 < first_run < total - 2, f"runs of {first_run} in {total}")
    base = shared_directory(tmp_path)
    for stop in (1, first_run, first_run + 1, total - 1, total):
        directory = os.path.join(base, f"ckpt{stop}")

        def signal_rank_0(iterations, stop=stop):
            if iterations == stop and hpcdist.get_rank() == 0:
                os.kill(os.getpid(), signal.SIGUSR1)

        _CountIterations(monkeypatch, after=signal_rank_0)
        with pytest.raises(Preempted) as stopped:
            _kmeans(100).fit(X, checkpoint=CheckpointManager(directory))
        monkeypatch.undo()
        assert_on_all_ranks(stopped.value.step == stop, f"stopped at {stopped.value.step}")
        resumed = _kmeans(100).fit(X, checkpoint=CheckpointManager(directory))
        _assert_same_fit(resumed, reference, f"stopped after iteration {stop} of {total}")


class _Killed(Exception):
    pass


def test_killed_after_a_save_resumes_identically(tmp_path, monkeypatch):
    X = _shard(_global_data())
    reference = _kmeans(100, "k-means++", 3).fit(X)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")

    def kill(iteration):
        if iteration == 11:  # every rank dies in iteration 11, after the save of step 9
            raise _Killed

    _CountIterations(monkeypatch, before=kill)
    with pytest.raises(_Killed):
        _kmeans(100, "k-means++", 3).fit(X, checkpoint=CheckpointManager(directory),
                                         checkpoint_every=3)
    monkeypatch.undo()
    manager = CheckpointManager(directory)
    assert_on_all_ranks(manager.latest_step() == 9, f"steps {manager.steps()}")
    resumed = _kmeans(100, "k-means++", 3).fit(X, checkpoint=manager)
    _assert_same_fit(resumed, reference)


def test_the_state_of_a_fit_in_progress_loads_into_a_new_estimator(tmp_path, monkeypatch):
    X = _shard(_global_data())
    reference = _kmeans(100).fit(X)

    def signal_rank_0(iterations):
        if iterations == 5 and hpcdist.get_rank() == 0:
            os.kill(os.getpid(), signal.SIGUSR1)

    _CountIterations(monkeypatch, after=signal_rank_0)
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    stopped = _kmeans(100)
    with pytest.raises(Preempted):
        stopped.fit(X, checkpoint=CheckpointManager(directory))
    monkeypatch.undo()
    state = stopped.state_dict()
    with all_ranks("the state of a fit in progress"):
        assert "cluster_centers" not in state and not hasattr(stopped, "cluster_centers_")
        position = state["fit"]["position"]
        assert state["fit"]["progress"] == 5 and position["run"] == 0
        assert position["lloyd"]["n_iter"] == 5
        assert position["lloyd"]["centers"].shape == position["lloyd"]["previous"].shape
        assert set(position["rng"]) == {"key", "pos", "has_gauss", "cached_gaussian"}
    other = os.path.join(shared_directory(tmp_path), "copy")
    manager = CheckpointManager(other)
    manager.save(5, {"estimator": state, "progress": 5})
    resumed = _kmeans(100).fit(X, checkpoint=CheckpointManager(other))
    _assert_same_fit(resumed, reference)
    with all_ranks("load_state_dict checks the centers"):
        with pytest.raises(ValueError, match="n_clusters=5"):
            KMeans(5).load_state_dict(state)


def test_resume_checks_the_data_as_fitted(tmp_path):
    X = _global_data()
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    _kmeans(3).fit(_shard(X), checkpoint=CheckpointManager(directory))
    expect_error(ValueError, _kmeans(100).fit, _shard(X[:, :2]),
                 checkpoint=CheckpointManager(directory), match="fitted with 3")


def test_resume_on_another_number_of_ranks(tmp_path):
    """The state is replicated: a fit saved on N ranks resumes on rank 0 alone."""
    X = _global_data()
    reference = _kmeans(100).fit(_shard(X))
    directory = os.path.join(shared_directory(tmp_path), "ckpt")
    _kmeans(3).fit(_shard(X), checkpoint=CheckpointManager(directory))
    ctx = hpcdist.init()
    alone = ctx.split(0 if ctx.rank == 0 else 1)
    with all_ranks("resumed on one rank"):
        if ctx.rank == 0:
            resumed = _kmeans(100, comm=alone).fit(
                X, checkpoint=CheckpointManager(directory, ctx=alone))
            np.testing.assert_allclose(resumed.cluster_centers_, reference.cluster_centers_,
                                       rtol=1e-10, atol=1e-12)
            assert resumed.n_iter_ == reference.n_iter_
            assert abs(resumed.inertia_ - reference.inertia_) <= 1e-10 * reference.inertia_
            assert resumed.labels_.shape == (len(X),)


def test_checkpoint_every_without_checkpoint_is_an_error():
    X = _shard(_global_data())
    with pytest.raises(ValueError, match="checkpoint_every=2 needs checkpoint="):
        _kmeans(3).fit(X, checkpoint_every=2)
    with pytest.raises(TypeError, match="CheckpointManager"):
        _kmeans(3).fit(X, checkpoint="ckpt")


test_stopped_by_max_iter_and_resumed_equals_uninterrupted_mpi = mpi_twin(
    test_stopped_by_max_iter_and_resumed_equals_uninterrupted)
test_preempted_by_a_signal_on_one_rank_saves_exits_75_and_resumes_identically_mpi = mpi_twin(
    test_preempted_by_a_signal_on_one_rank_saves_exits_75_and_resumes_identically)
test_signal_in_every_run_and_between_runs_mpi = mpi_twin(
    test_signal_in_every_run_and_between_runs)
test_killed_after_a_save_resumes_identically_mpi = mpi_twin(
    test_killed_after_a_save_resumes_identically)
test_the_state_of_a_fit_in_progress_loads_into_a_new_estimator_mpi = mpi_twin(
    test_the_state_of_a_fit_in_progress_loads_into_a_new_estimator)
test_resume_checks_the_data_as_fitted_mpi = mpi_twin(test_resume_checks_the_data_as_fitted)
test_resume_on_another_number_of_ranks_mpi = mpi_twin(test_resume_on_another_number_of_ranks)
test_checkpoint_every_without_checkpoint_is_an_error_mpi = mpi_twin(
    test_checkpoint_every_without_checkpoint_is_an_error)
