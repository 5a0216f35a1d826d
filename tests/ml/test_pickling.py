"""Fitted estimators pickle without their communicator (pickle and joblib, 1 and 2 ranks).

A restored estimator has ``comm=None``, predicts bit for bit as the original,
and communicates on the default context when it next needs to (``score``,
``train_epoch``), in the same process or in another one with a different
number of ranks: fitted at 2 ranks and loaded in a 1-rank process, and the
other way round.
"""
import io
import pickle

import joblib
import numpy as np
import pytest

import hpcdist
from hpcdist.data import make_classification
from hpcdist.ml import (
    KMeans,
    MLPClassifier,
    MLPRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from tests.helpers import all_ranks, mpi_twin, run_mpi_script

N_FEATURES = 6
FORMATS = ("pickle", "joblib")


def training_rows():
    """This rank's rows: features, class labels and a regression target."""
    X, y = make_classification(240 * hpcdist.get_world_size(), N_FEATURES, 3, random_state=4)
    return X, y, X @ np.linspace(-1.0, 1.0, N_FEATURES)


def prediction_rows():
    """Rows every process predicts, the same everywhere."""
    return np.random.default_rng(7).normal(size=(40, N_FEATURES))


def fitted_estimators(comm=None):
    """The five estimators fitted on this rank's rows, by name."""
    X, y, target = training_rows()
    network = dict(hidden_layer_sizes=(8,), batch_size=16, max_iter=3, tol=0, random_state=0,
                   comm=comm)
    forest = dict(n_estimators=4, trees_per_batch=2, max_depth=4, random_state=0, comm=comm)
    return {"KMeans": KMeans(3, random_state=0, comm=comm).fit(X),
            "RandomForestClassifier": RandomForestClassifier(**forest).fit(X, y),
            "RandomForestRegressor": RandomForestRegressor(**forest).fit(X, target),
            "MLPClassifier": MLPClassifier(**network).fit(X, y),
            "MLPRegressor": MLPRegressor(**network).fit(X, target)}


def outputs(estimator, X):
    """What the estimator computes locally from ``X``: its predictions and parameters."""
    result = {"predict": estimator.predict(X), "parameters": estimator.get_parameters()}
    for method in ("predict_proba", "transform"):
        if hasattr(estimator, method):
            result[method] = getattr(estimator, method)(X)
    return result


def assert_same_outputs(actual, expected, what):
    """Local check: the same arrays, bit for bit."""
    assert sorted(actual) == sorted(expected), what
    for key, value in expected.items():
        assert actual[key].dtype == value.dtype, f"{what}: {key} dtype"
        np.testing.assert_array_equal(actual[key], value, err_msg=f"{what}: {key}")


def train_further(estimator):
    """One more collective training step on this rank's rows (forests: 2 more trees)."""
    X, y, target = training_rows()
    if "Forest" in type(estimator).__name__:
        estimator.set_params(n_estimators=estimator.n_estimators + 2)
    return estimator.train_epoch(X, target if "Regressor" in type(estimator).__name__ else y)


def global_score(estimator):
    """The estimator's global score on every rank's rows (collective)."""
    X, y, target = training_rows()
    return estimator.score(X, target if "Regressor" in type(estimator).__name__ else y)


def round_trip(estimator, how):
    if how == "pickle":
        return pickle.loads(pickle.dumps(estimator))
    buffer = io.BytesIO()
    joblib.dump(estimator, buffer)
    buffer.seek(0)
    return joblib.load(buffer)


@pytest.mark.parametrize("how", FORMATS)
def test_round_trip_predicts_the_same_and_communicates_again(how):
    originals = fitted_estimators(comm=hpcdist.init())  # a Context: it cannot be pickled
    X = prediction_rows()
    for name, original in originals.items():
        restored = round_trip(original, how)
        with all_ranks(f"{name} restored through {how}"):
            assert restored.comm is None
            assert_same_outputs(outputs(restored, X), outputs(original, X), name)
        score = global_score(restored)
        with all_ranks(f"{name}: global score after {how}"):
            assert score == global_score(original)
        train_further(original)
        train_further(restored)
        with all_ranks(f"{name}: trained further after {how}"):
            assert_same_outputs(outputs(restored, X), outputs(original, X), name)


test_round_trip_predicts_the_same_and_communicates_again_mpi = mpi_twin(
    test_round_trip_predicts_the_same_and_communicates_again)


# -- across processes: fitted at one number of ranks, loaded at another ------------------

def save(estimators, directory):
    """Write every estimator with pickle and joblib, and its outputs on :func:`prediction_rows`."""
    X = prediction_rows()
    for name, estimator in estimators.items():
        with open(directory / f"{name}.pkl", "wb") as handle:
            pickle.dump(estimator, handle)
        joblib.dump(estimator, directory / f"{name}.joblib")
        np.savez(directory / f"{name}.npz", **outputs(estimator, X))


def check_saved(directory):
    """Load what :func:`save` wrote; both formats predict as saved and can train further."""
    X = prediction_rows()
    for path in sorted(directory.glob("*.npz")):
        with np.load(path) as saved:
            expected = dict(saved)
        for loaded in (pickle.loads((directory / f"{path.stem}.pkl").read_bytes()),
                       joblib.load(directory / f"{path.stem}.joblib")):
            assert loaded.comm is None
            assert_same_outputs(outputs(loaded, X), expected, path.stem)
            assert np.isfinite(global_score(loaded))
            train_further(loaded)
    return len(list(directory.glob("*.npz")))


_LOAD_AT_TWO_RANKS = """
from pathlib import Path
import hpcdist
from tests.ml.test_pickling import check_saved
count = check_saved(Path({directory!r}))
print(f"rank {{hpcdist.get_rank()}} of {{hpcdist.get_world_size()}}: {{count}} loaded", flush=True)
"""

_FIT_AT_TWO_RANKS = """
from pathlib import Path
import hpcdist
from tests.ml.test_pickling import fitted_estimators, save
estimators = fitted_estimators()
if hpcdist.get_rank() == 0:
    save(estimators, Path({directory!r}))
hpcdist.barrier()
"""


def test_fitted_on_one_rank_loads_at_two_ranks(tmp_path):
    directory = tmp_path / "models"
    directory.mkdir()
    save(fitted_estimators(), directory)
    rc, _, output = run_mpi_script(_LOAD_AT_TWO_RANKS.format(directory=str(directory)),
                                   tmp_path, n=2, timeout=240)
    assert rc == 0, output
    assert "rank 0 of 2: 5 loaded" in output and "rank 1 of 2: 5 loaded" in output, output


def test_fitted_at_two_ranks_loads_on_one_rank(tmp_path):
    directory = tmp_path / "models"
    directory.mkdir()
    rc, _, output = run_mpi_script(_FIT_AT_TWO_RANKS.format(directory=str(directory)),
                                   tmp_path, n=2, timeout=240)
    assert rc == 0, output
    assert check_saved(directory) == 5
