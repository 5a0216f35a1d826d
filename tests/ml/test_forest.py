"""RandomForestClassifier / RandomForestRegressor: identical forests at any rank count,
global semantics, trainer protocol, bad input.

The reference of the MPI runs is a fit on one rank of the gathered rows,
computed inside the test on a size-1 context (``hpcdist.Context(MPI.COMM_SELF)``).
"""

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.metrics import r2_score

import hpcdist
from hpcdist.data import make_classification
from hpcdist.ml import RandomForestClassifier, RandomForestRegressor
from hpcdist.ml.forest.binning import FEATURES_PER_PASS, find_bin_edges
from hpcdist.ml.forest.grow import gathering_fits, training_rows
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin, subprocess_env

_SELF = []


def _one_rank():
    """A size-1 context on this process (the 1-rank reference fit)."""
    if not _SELF:
        _SELF.append(hpcdist.Context(MPI.COMM_SELF))
    return _SELF[0]


def _gathered(*arrays):
    return [hpcdist.allgather(a) for a in arrays]


def _same_on_all_ranks(vector):
    gathered = hpcdist.allgather(np.asarray(vector, dtype=np.float64)[None])
    return all(np.array_equal(g, gathered[0]) for g in gathered)


def _classification(rows=300, features=6, classes=3, seed=1):
    return make_classification(rows * hpcdist.get_world_size(), features, classes,
                               n_informative=3, random_state=seed)


def _regression(rows=200, features=5, seed=2):
    rank = hpcdist.get_rank()
    rng = np.random.default_rng(seed + 100 * rank)
    X = rng.normal(size=(rows + 17 * rank, features))
    y = 3.0 * X[:, 0] + np.sin(2.0 * X[:, 1]) + X[:, 2] * X[:, 3] + 0.1 * rng.normal(size=len(X))
    return X, y


def _check_identical(model, reference, X_local, what):
    with all_ranks(what):
        np.testing.assert_array_equal(model.get_parameters(), reference.get_parameters())
        np.testing.assert_array_equal(model.predict(X_local), reference.predict(X_local))
        np.testing.assert_array_equal(model.bin_edges_.edges, reference.bin_edges_.edges)
    assert_on_all_ranks(_same_on_all_ranks(model.get_parameters()),
                        f"{what}: forests differ between ranks")


# -- identical forests at any number of ranks ----------------------------------------------

@pytest.mark.parametrize("local_threshold", [None, 0, 150])
def test_classifier_identical_to_one_rank_fit(local_threshold):
    """Level-wise (0), mixed (150) and default growth all equal the 1-rank fit."""
    X, y = _classification()
    options = dict(n_estimators=6, max_bins=32, random_state=7, trees_per_batch=4)
    model = RandomForestClassifier(local_threshold=local_threshold, **options).fit(X, y)
    X_all, y_all = _gathered(X, y)
    reference = RandomForestClassifier(comm=_one_rank(), **options).fit(X_all, y_all)
    _check_identical(model, reference, X, f"local_threshold={local_threshold}")
    with all_ranks():
        np.testing.assert_array_equal(model.predict_proba(X), reference.predict_proba(X))
        np.testing.assert_array_equal(model.feature_importances_,
                                      reference.feature_importances_)


@pytest.mark.parametrize("local_threshold", [None, 0])
def test_regressor_identical_to_one_rank_fit(local_threshold):
    """Fixed-point target sums make regression forests bit-identical too."""
    X, y = _regression()
    options = dict(n_estimators=4, max_bins=64, random_state=3, min_samples_leaf=2)
    model = RandomForestRegressor(local_threshold=local_threshold, **options).fit(X, y)
    X_all, y_all = _gathered(X, y)
    reference = RandomForestRegressor(comm=_one_rank(), **options).fit(X_all, y_all)
    _check_identical(model, reference, X, f"regressor, local_threshold={local_threshold}")


@pytest.mark.parametrize("local_threshold", [100, None])
def test_uneven_and_empty_shards_give_the_same_forest(local_threshold):
    """Rank 0 holds no row at all; the others hold different numbers of rows."""
    rank, size = hpcdist.get_rank(), hpcdist.get_world_size()
    X_all, y_all = make_classification(200 * size + 37, 5, 2, random_state=4,
                                       ctx=_one_rank())
    counts = [0] + [len(X_all) // (size - 1)] * (size - 1) if size > 1 else [len(X_all)]
    counts[-1] += len(X_all) - sum(counts)
    start = sum(counts[:rank])
    X, y = X_all[start:start + counts[rank]], y_all[start:start + counts[rank]]
    options = dict(n_estimators=4, max_bins=16, random_state=0, local_threshold=local_threshold)
    model = RandomForestClassifier(**options).fit(X, y)
    reference = RandomForestClassifier(comm=_one_rank(), **options).fit(X_all, y_all)
    _check_identical(model, reference, X, "uneven shards")
    accuracy = model.score(X, y)
    assert_on_all_ranks(accuracy == reference.score(X_all, y_all),
                        f"global accuracy {accuracy} differs from the 1-rank one")


def test_growth_paths_give_the_same_forest():
    """Every node on one rank, every level over ranks, and a mix: one forest."""
    X, y = _classification(seed=5)
    options = dict(n_estimators=5, max_bins=24, random_state=11, max_features=2)
    vectors = [RandomForestClassifier(local_threshold=t, **options).fit(X, y).get_parameters()
               for t in (0, 40, 10 ** 9, None)]
    with all_ranks("growth paths"):
        for other in vectors[1:]:
            np.testing.assert_array_equal(vectors[0], other)


@pytest.mark.parametrize("regression, extra", [
    (False, {}), (True, {}), (False, {"bootstrap": False, "max_depth": 3}),
    (True, {"bootstrap": False, "min_samples_leaf": 5, "max_depth": 6})])
def test_whole_trees_from_gathered_rows_equal_level_wise_growth(regression, extra):
    """The default on few ranks: each tree grows whole on one rank from every rank's rows."""
    X, y = _regression(features=8) if regression else _classification(features=8, seed=9)
    assert gathering_fits(8, hpcdist.get_world_size())
    cls = RandomForestRegressor if regression else RandomForestClassifier
    options = dict(n_estimators=5, max_bins=32, random_state=4, trees_per_batch=3, **extra)
    whole = cls(**options).fit(X, y)
    level_wise = cls(local_threshold=0, **options).fit(X, y)
    X_all, y_all = _gathered(X, y)
    reference = cls(comm=_one_rank(), **options).fit(X_all, y_all)
    _check_identical(whole, level_wise, X, "whole trees against level-wise growth")
    _check_identical(whole, reference, X, "whole trees against the 1-rank fit")


def test_training_rows_are_gathered_in_global_order_only_when_trees_grow_whole():
    rank, size = hpcdist.get_rank(), hpcdist.get_world_size()
    counts = [3 + r for r in range(size)]
    start = sum(counts[:rank])
    Xb = np.full((counts[rank], 8), rank, dtype=np.uint8)
    target = np.arange(start, start + counts[rank], dtype=np.int64)
    index = np.arange(start, start + counts[rank], dtype=np.int64)
    settings = {threshold: SimpleNamespace(local_threshold=threshold) for threshold in (None, 5)}
    ctx = hpcdist.get_context()
    whole = training_rows(ctx, Xb, target, index, sum(counts), settings[None])
    mine = training_rows(ctx, Xb, target, index, sum(counts), settings[5])
    with all_ranks():
        assert whole.whole_trees and not mine.whole_trees
        np.testing.assert_array_equal(whole.target, np.arange(sum(counts)))
        np.testing.assert_array_equal(whole.global_index, np.arange(sum(counts)))
        np.testing.assert_array_equal(whole.Xb[:, 0], np.repeat(np.arange(size), counts))
        assert mine.Xb is Xb and mine.target is target and mine.global_index is index


def test_gathering_fits_while_the_gathered_rows_are_no_larger_than_a_float64_share():
    assert gathering_fits(1, 1)                   # one rank gathers nothing
    assert not gathering_fits(1, 2)               # 2 * 9 bytes a row > 8
    assert gathering_fits(32, 6)                  # 6 * 40 <= 256
    assert not gathering_fits(32, 7)              # 7 * 40 > 256
    assert gathering_fits(8, 4) and not gathering_fits(8, 5)


def test_bin_edges_from_several_passes_equal_the_one_rank_edges():
    """More features than one pass of sample columns carries; a rank without rows."""
    rank, size = hpcdist.get_rank(), hpcdist.get_world_size()
    n_features = FEATURES_PER_PASS * size * 2 + 3
    X_all = np.random.default_rng(8).normal(size=(450, n_features)).round(2)
    counts = [0] + [450 // (size - 1)] * (size - 1) if size > 1 else [450]
    counts[-1] += 450 - sum(counts)
    X = X_all[sum(counts[:rank]):sum(counts[:rank + 1])]
    index = np.arange(sum(counts[:rank]), sum(counts[:rank + 1]))
    edges = find_bin_edges(hpcdist.get_context(), X, index, 450, 16, np.uint64(5), 300)
    reference = find_bin_edges(_one_rank(), X_all, np.arange(450), 450, 16, np.uint64(5), 300)
    with all_ranks("bin edges"):
        np.testing.assert_array_equal(edges.offsets, reference.offsets)
        np.testing.assert_array_equal(edges.edges, reference.edges)
        assert edges.n_features == n_features


def test_batching_does_not_change_the_forest():
    X, y = _classification(rows=120, seed=6)
    a = RandomForestClassifier(7, max_bins=16, random_state=2, trees_per_batch=2).fit(X, y)
    b = RandomForestClassifier(7, max_bins=16, random_state=2, trees_per_batch=16).fit(X, y)
    with all_ranks():
        np.testing.assert_array_equal(a.get_parameters(), b.get_parameters())


_THREADS_SCRIPT = """
import hashlib, sys
import numba
from hpcdist.data import make_classification
from hpcdist.ml import RandomForestClassifier
X, y = make_classification(2000, 8, 3, n_informative=3, random_state=3)
model = RandomForestClassifier(8, max_bins=32, random_state=5, trees_per_batch=8).fit(X, y)
print(numba.get_num_threads(), hashlib.sha256(model.get_parameters().tobytes()).hexdigest())
"""


def test_numba_threads_do_not_change_the_forest(tmp_path):
    """Subtrees grow in parallel threads (a child process with 2 Numba threads)."""
    digests = []
    for threads in (1, 2):
        script = tmp_path / "threads.py"
        script.write_text(_THREADS_SCRIPT)
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=120, env=subprocess_env(NUMBA_NUM_THREADS=threads,
                                                            OMP_NUM_THREADS=threads))
        assert out.returncode == 0, out.stderr
        count, digest = out.stdout.split()
        assert int(count) == threads
        digests.append(digest)
    assert digests[0] == digests[1]


def test_random_state_none_is_shared_by_all_ranks():
    X, y = _classification(rows=80, seed=7)
    model = RandomForestClassifier(3, max_bins=16).fit(X, y)
    assert_on_all_ranks(_same_on_all_ranks(model.get_parameters()), "forests differ")


# -- global semantics ----------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:.*no out-of-bag prediction:UserWarning")
def test_predictions_scores_and_importances():
    X, y = _classification(seed=8)
    model = RandomForestClassifier(10, max_bins=32, random_state=0, oob_score=True).fit(X, y)
    proba = model.predict_proba(X)
    X_all, y_all = _gathered(X, y)
    accuracy = model.score(X, y)
    importances = model.feature_importances_
    with all_ranks("predictions"):
        assert proba.shape == (len(X), 3)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_array_equal(model.predict(X), model.classes_[proba.argmax(axis=1)])
        assert accuracy == np.mean(model.predict(X_all) == y_all)
        assert accuracy > 0.9
        assert importances.shape == (6,) and abs(importances.sum() - 1) < 1e-12
        assert (importances >= 0).all()
        assert 0.7 < model.oob_score_ <= accuracy
        assert model.oob_decision_function_.shape == (len(X), 3)
    assert_on_all_ranks(hpcdist.allreduce(model.oob_score_, op="max") == model.oob_score_,
                        "oob_score_ differs between ranks")


@pytest.mark.filterwarnings("ignore:.*no out-of-bag prediction:UserWarning")
def test_oob_score_equals_the_one_rank_oob_score():
    X, y = _classification(rows=150, seed=9)
    options = dict(n_estimators=8, max_bins=16, random_state=1, oob_score=True)
    model = RandomForestClassifier(**options).fit(X, y)
    X_all, y_all = _gathered(X, y)
    reference = RandomForestClassifier(comm=_one_rank(), **options).fit(X_all, y_all)
    assert_on_all_ranks(model.oob_score_ == reference.oob_score_,
                        f"oob {model.oob_score_} != 1-rank {reference.oob_score_}")
    regression = RandomForestRegressor(6, max_bins=32, random_state=1, oob_score=True)
    X, y = _regression(seed=3)
    r2 = regression.fit(X, y).oob_score_
    X_all, y_all = _gathered(X, y)
    r2_one = RandomForestRegressor(6, max_bins=32, random_state=1, oob_score=True,
                                   comm=_one_rank()).fit(X_all, y_all).oob_score_
    assert_on_all_ranks(abs(r2 - r2_one) < 1e-9 and r2 > 0.6, f"oob R^2 {r2} vs {r2_one}")


def test_classes_are_the_union_over_ranks():
    """The last rank alone has the label 'emu' (string labels)."""
    X, y = _classification(rows=100, classes=2, seed=10)
    names = np.array(["cat", "dog"])[y].astype(object)
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        names[:10] = "emu"
    model = RandomForestClassifier(4, max_bins=16, random_state=0).fit(X, names)
    with all_ranks():
        assert model.classes_.tolist() == ["cat", "dog", "emu"]
        assert set(model.predict(X)) <= {"cat", "dog", "emu"}
        assert model.predict_proba(X).shape == (len(X), 3)


def test_regressor_global_r2_and_float32_input():
    X, y = _regression(seed=4)
    model = RandomForestRegressor(8, max_bins=64, random_state=0).fit(X.astype(np.float32), y)
    r2 = model.score(X.astype(np.float32), y)
    y_all, predicted = _gathered(y, model.predict(X.astype(np.float32)))
    with all_ranks("R^2"):
        assert r2 > 0.85
        assert abs(r2 - r2_score(y_all, predicted)) < 1e-9


def test_stopping_rules():
    X, y = _classification(seed=12)
    model = RandomForestClassifier(4, max_bins=32, random_state=0, max_depth=3,
                                   min_samples_leaf=5).fit(X, y)
    forest = model.forest_
    with all_ranks("stopping rules"):
        assert forest.depths().max() <= 3
        leaves = forest.feature < 0
        assert forest.n_node_samples[leaves].min() >= 5
        # preorder: the left child is the next node, children point inside the tree
        internal = np.flatnonzero(~leaves)
        local = internal - np.repeat(forest.tree_offsets[:-1], np.bincount(
            np.searchsorted(forest.tree_offsets, internal, side="right") - 1,
            minlength=forest.n_trees))
        np.testing.assert_array_equal(forest.left[internal], local + 1)
        assert (forest.right[internal] > forest.left[internal]).all()


# -- trainer protocol ----------------------------------------------------------------------

def _plain(value, path="state"):
    """Nested dicts of ndarrays and Python/NumPy scalars only."""
    if isinstance(value, dict):
        for key, item in value.items():
            assert isinstance(key, str), f"{path}: key {key!r}"
            _plain(item, f"{path}.{key}")
    else:
        assert isinstance(value, (np.ndarray, np.generic, int, float, bool, str)), (
            f"{path} is a {type(value).__name__}")
        if isinstance(value, np.ndarray):
            assert value.dtype != object, f"{path} has dtype object"


def test_train_epoch_state_dict_and_parameters():
    X, y = _classification(rows=120, seed=13)
    options = dict(n_estimators=5, max_bins=16, random_state=4, trees_per_batch=2)
    fitted = RandomForestClassifier(**options).fit(X, y)
    model = RandomForestClassifier(**options)
    grown = []
    for _ in range(4):
        model.train_epoch(X, y)
        grown.append(model.forest_.n_trees)
    with all_ranks("train_epoch"):
        assert grown == [2, 4, 5, 5]
        np.testing.assert_array_equal(model.get_parameters(), fitted.get_parameters())
    state = model.state_dict()
    restored = RandomForestClassifier(**options).load_state_dict(state)
    with all_ranks("state_dict"):
        _plain(state)
        np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))
        np.testing.assert_array_equal(restored.get_parameters(), model.get_parameters())
    # a restored model grows the same next trees
    more = dict(options, n_estimators=7)
    continued = RandomForestClassifier(**more).load_state_dict(state).train_epoch(X, y)
    full = RandomForestClassifier(**more).fit(X, y)
    with all_ranks("resumed growth"):
        np.testing.assert_array_equal(continued.get_parameters(), full.get_parameters())
    vector = model.get_parameters()
    model.set_parameters(vector)
    with all_ranks():
        np.testing.assert_array_equal(model.get_parameters(), vector)
        with pytest.raises(ValueError, match=rf"the vector of 3 values is not a forest's from "
                                             rf"get_parameters\(\) .*; this model's has "
                                             rf"{vector.size}$"):
            model.set_parameters(np.zeros(3))


def test_regressor_state_dict_round_trip():
    X, y = _regression(rows=80, seed=5)
    model = RandomForestRegressor(3, max_bins=16, random_state=0).fit(X, y)
    state = model.state_dict()
    restored = RandomForestRegressor().load_state_dict(state)
    with all_ranks():
        _plain(state)
        np.testing.assert_array_equal(restored.predict(X), model.predict(X))


def test_synchronize_model_makes_every_rank_rank_0s():
    X, y = _classification(rows=60, seed=14)
    model = RandomForestClassifier(2, max_bins=8, random_state=0).fit(X, y)
    vector = model.get_parameters()
    if hpcdist.get_rank() > 0:
        broken = vector.copy()
        broken[-1] += 1.0  # a leaf value
        model.set_parameters(broken)
    model.synchronize_model()
    with all_ranks():
        np.testing.assert_array_equal(model.get_parameters(), vector)


def test_verbose_shows_progress_on_rank_0(capsys):
    X, y = _classification(rows=60, seed=15)
    RandomForestClassifier(2, max_bins=8, random_state=0, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    with all_ranks():
        assert ("RandomForestClassifier" in err) == (hpcdist.get_rank() == 0)


# -- bad input: the same clear error on every rank -----------------------------------------

def test_nan_in_X_on_one_rank():
    X, y = _classification(rows=40)
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        X[3, 2] = np.nan
    expect_error(ValueError, RandomForestClassifier(2).fit, X, y, match=r"NaN")


def test_infinity_in_X():
    X, y = _classification(rows=40)
    X[0, 0] = np.inf
    expect_error(ValueError, RandomForestRegressor(2).fit, X, y.astype(float),
                 match=r"infinity")


def test_single_class_is_an_error():
    X, _ = _classification(rows=40)
    expect_error(ValueError, RandomForestClassifier(2).fit, X, np.zeros(len(X)),
                 match=[r"only one class", r"at least 2 classes"])


def test_continuous_labels_are_an_error():
    X, _ = _classification(rows=40)
    expect_error(ValueError, RandomForestClassifier(2).fit, X, np.linspace(0, 1, len(X)),
                 match=r"Unknown label type")


def test_no_rows_anywhere():
    expect_error(ValueError, RandomForestClassifier(2).fit, np.zeros((0, 3)),
                 np.zeros(0, dtype=int), match=r"0 rows on all")


@pytest.mark.parametrize("options, pattern", [
    (dict(max_features=7), r"max_features=7 should be in \[1, n_features=6\]"),
    (dict(max_features=0.0), r"max_features=0.0 should be a fraction in \(0, 1\]"),
    (dict(max_features="half"), r"max_features='half' is not understood"),
    (dict(max_bins=300), r"max_bins=300 should be <= 256"),
    (dict(max_bins=1), r"max_bins=1 should be an int >= 2"),
    (dict(n_estimators=0), r"n_estimators=0 should be an int >= 1"),
    (dict(min_samples_split=1), r"min_samples_split=1 should be"),
    (dict(min_samples_leaf=0.7), r"min_samples_leaf=0.7 should be"),
    (dict(criterion="mse"), r"criterion='mse' is not supported"),
    (dict(oob_score=True, bootstrap=False), r"oob_score=True needs bootstrap=True"),
    (dict(bootstrap="no"), r"bootstrap='no' should be True or False"),
    (dict(bootstrap=None), r"bootstrap=None should be True or False"),
    (dict(oob_score="yes"), r"oob_score='yes' should be True or False"),
    (dict(random_state="x"), r"random_state='x' should be an integer, None, or a numpy "
                             r"RandomState or Generator"),
    (dict(random_state=-1), r"random_state=-1 should be in \[0, 4294967295\]"),
    (dict(random_state=2 ** 40), r"random_state=1099511627776 should be in \[0, 4294967295\]"),
])
def test_bad_hyperparameters(options, pattern):
    X, y = _classification(rows=40)
    model = RandomForestClassifier(**{"n_estimators": 2, **options})
    error = expect_error((ValueError, TypeError), model.fit, X, y, match=pattern)
    assert isinstance(error, hpcdist.HpcdistError)


def test_set_parameters_refuses_nan_anywhere_in_the_vector():
    X, y = _classification(rows=40)
    model = RandomForestClassifier(2, max_bins=8, random_state=0).fit(X, y)
    vector = model.get_parameters()
    vector[-1] = np.nan  # a leaf value, after a header that reads well
    expect_error(ValueError, model.set_parameters, vector,
                 match=rf"the vector holds NaN or infinity at 1 of its {vector.size} positions "
                       rf"\(the first at index {vector.size - 1}\); pass finite values")


class _MemoryCheckpoints:
    """A CheckpointManager stand-in that keeps states in memory (same calls)."""

    def __init__(self):
        self.states = {}

    def save(self, step, state, *, metadata=None):
        self.states[step] = state

    def restore(self, step=None):
        return self.states[max(self.states) if step is None else step]

    def latest_step(self):
        return max(self.states) if self.states else None


def test_checkpointed_and_resumed_fit_equals_one_fit():
    X, y = _classification(rows=100, seed=16)
    options = dict(n_estimators=7, max_bins=16, random_state=3, trees_per_batch=2)
    full = RandomForestClassifier(**options).fit(X, y)
    checkpoints = _MemoryCheckpoints()
    RandomForestClassifier(**options).fit(X, y, checkpoint=checkpoints, checkpoint_every=1)
    with all_ranks("checkpoints"):
        assert sorted(checkpoints.states) == [1, 2, 3, 4]
        assert checkpoints.states[2]["estimator"]["forest"]["tree_offsets"].shape == (5,)
    # resume from the state after two batches (4 trees): the same 7-tree forest
    del checkpoints.states[3], checkpoints.states[4]
    resumed = RandomForestClassifier(**options).fit(X, y, checkpoint=checkpoints)
    with all_ranks("resumed"):
        np.testing.assert_array_equal(resumed.get_parameters(), full.get_parameters())
        assert max(checkpoints.states) == 4


def test_checkpoint_arguments_are_checked():
    X, y = _classification(rows=40)
    expect_error(ValueError, RandomForestClassifier(2).fit, X, y, checkpoint_every=2,
                 match=r"checkpoint_every=2 needs checkpoint=")
    expect_error(TypeError, RandomForestClassifier(2).fit, X, y, checkpoint="x.h5",
                 match=r"CheckpointManager")


def test_predict_with_wrong_width():
    X, y = _classification(rows=40)
    model = RandomForestClassifier(2, max_bins=8, random_state=0).fit(X, y)
    with all_ranks():
        with pytest.raises(ValueError, match=r"X has 3 features, but RandomForestClassifier "
                                             r"is expecting 6 features"):
            model.predict(X[:, :3])


@pytest.mark.mpi(min_size=2)
def test_score_with_wrong_width_on_one_rank():
    X, y = _classification(rows=40)
    model = RandomForestClassifier(2, max_bins=8, random_state=0).fit(X, y)
    if hpcdist.get_rank() == 1:
        X = X[:, :3]
    expect_error(ValueError, model.score, X, y, match=r"X has 3 features")


@pytest.mark.mpi(min_size=2)
def test_different_widths_on_different_ranks():
    X, y = _classification(rows=40)
    if hpcdist.get_rank() == 1:
        X = X[:, :4]
    expect_error(ValueError, RandomForestClassifier(2).fit, X, y,
                 match=[r"n_features differs across ranks", r"rank 1 has 4"])


def test_y_missing_on_one_rank():
    X, y = _classification(rows=40)
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        y = None
    expect_error(ValueError, RandomForestClassifier(2).fit, X, y,
                 match=r"requires y to be passed")


@pytest.mark.mpi(min_size=2)
def test_label_unknown_to_a_later_train_epoch():
    X, y = _classification(rows=40)
    model = RandomForestClassifier(4, max_bins=8, random_state=0, trees_per_batch=1)
    model.train_epoch(X, y)
    y_new = y.copy()
    if hpcdist.get_rank() == 1:
        y_new[0] = 99
    expect_error(ValueError, model.train_epoch, X, y_new, match=[r"not among the classes",
                                                                 r"99"])


def test_column_vector_y_warns():
    X, y = _classification(rows=40)
    with pytest.warns(Warning, match="column-vector y"):
        RandomForestClassifier(2, max_bins=8, random_state=0).fit(X, y[:, None])


test_classifier_identical_to_one_rank_fit_mpi = mpi_twin(test_classifier_identical_to_one_rank_fit)
test_regressor_identical_to_one_rank_fit_mpi = mpi_twin(test_regressor_identical_to_one_rank_fit)
test_uneven_and_empty_shards_give_the_same_forest_mpi = mpi_twin(
    test_uneven_and_empty_shards_give_the_same_forest)
test_growth_paths_give_the_same_forest_mpi = mpi_twin(test_growth_paths_give_the_same_forest)
test_bin_edges_from_several_passes_equal_the_one_rank_edges_mpi = mpi_twin(
    test_bin_edges_from_several_passes_equal_the_one_rank_edges)
test_whole_trees_from_gathered_rows_equal_level_wise_growth_mpi = mpi_twin(
    test_whole_trees_from_gathered_rows_equal_level_wise_growth)
test_training_rows_are_gathered_in_global_order_only_when_trees_grow_whole_mpi = mpi_twin(
    test_training_rows_are_gathered_in_global_order_only_when_trees_grow_whole)
test_batching_does_not_change_the_forest_mpi = mpi_twin(test_batching_does_not_change_the_forest)
test_random_state_none_is_shared_by_all_ranks_mpi = mpi_twin(
    test_random_state_none_is_shared_by_all_ranks)
test_predictions_scores_and_importances_mpi = mpi_twin(test_predictions_scores_and_importances)
test_oob_score_equals_the_one_rank_oob_score_mpi = mpi_twin(
    test_oob_score_equals_the_one_rank_oob_score)
test_classes_are_the_union_over_ranks_mpi = mpi_twin(test_classes_are_the_union_over_ranks)
test_regressor_global_r2_and_float32_input_mpi = mpi_twin(
    test_regressor_global_r2_and_float32_input)
test_stopping_rules_mpi = mpi_twin(test_stopping_rules)
test_train_epoch_state_dict_and_parameters_mpi = mpi_twin(
    test_train_epoch_state_dict_and_parameters)
test_regressor_state_dict_round_trip_mpi = mpi_twin(test_regressor_state_dict_round_trip)
test_synchronize_model_makes_every_rank_rank_0s_mpi = mpi_twin(
    test_synchronize_model_makes_every_rank_rank_0s)
test_verbose_shows_progress_on_rank_0_mpi = mpi_twin(test_verbose_shows_progress_on_rank_0)
test_nan_in_X_on_one_rank_mpi = mpi_twin(test_nan_in_X_on_one_rank)
test_infinity_in_X_mpi = mpi_twin(test_infinity_in_X)
test_single_class_is_an_error_mpi = mpi_twin(test_single_class_is_an_error)
test_continuous_labels_are_an_error_mpi = mpi_twin(test_continuous_labels_are_an_error)
test_no_rows_anywhere_mpi = mpi_twin(test_no_rows_anywhere)
test_y_missing_on_one_rank_mpi = mpi_twin(test_y_missing_on_one_rank)
test_checkpointed_and_resumed_fit_equals_one_fit_mpi = mpi_twin(
    test_checkpointed_and_resumed_fit_equals_one_fit)
test_bad_hyperparameters_mpi = mpi_twin(test_bad_hyperparameters)
