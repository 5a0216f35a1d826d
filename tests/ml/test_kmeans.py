"""KMeans: scikit-learn's results at any rank count, the trainer protocol, bad input.

Every test builds a global data set on every rank and gives each rank its
shard ("even", "uneven" or with an "empty" rank 0), so that the reference is
scikit-learn on the whole data in one process.
"""
import warnings

import numpy as np
import pytest
from mpi4py import MPI
from sklearn.cluster import KMeans as SKLearnKMeans
from sklearn.datasets import make_blobs as sklearn_blobs
from sklearn.metrics.pairwise import euclidean_distances

import hpcdist
from hpcdist.data import load_digits
from hpcdist.ml import KMeans
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin

LAYOUTS = ("even", "uneven", "empty")


def _bounds(n, layout):
    """Row bounds of every rank: balanced, growing with the rank, or rank 0 empty."""
    size = hpcdist.get_world_size()
    if layout == "uneven":
        weights = np.arange(1, size + 1, dtype=float)
    elif layout == "empty" and size > 1:
        weights = np.array([0.0] + [1.0] * (size - 1))
    else:
        weights = np.ones(size)
    return np.concatenate([[0], np.round(np.cumsum(weights) / weights.sum() * n)]).astype(int)


def _shard(X, layout="even"):
    bounds = _bounds(len(X), layout)
    rank = hpcdist.get_rank()
    return X[bounds[rank]:bounds[rank + 1]], slice(bounds[rank], bounds[rank + 1])


def _blobs(n=1200, features=5, centers=6, std=2.5, seed=0, dtype=np.float64):
    X, _ = sklearn_blobs(n, features, centers=centers, cluster_std=std, random_state=seed)
    return X.astype(dtype)


@pytest.fixture(scope="module")
def solo():
    """A one-rank context per rank, for serial fits of the whole data set."""
    ctx = hpcdist.init()
    return ctx.split(ctx.rank)


def _same_everywhere(array):
    gathered = hpcdist.allgather(np.ascontiguousarray(array)[None])
    return all(np.array_equal(g, gathered[0]) for g in gathered)


def _compare_with_sklearn(X, layout, *, dtype=np.float64, **options):
    n_clusters = options.pop("n_clusters", 6)
    init = options.pop("init", X[:n_clusters])
    reference = SKLearnKMeans(n_clusters, init=init, n_init=1, algorithm="lloyd",
                              **options).fit(X)
    X_local, rows = _shard(X, layout)
    km = KMeans(n_clusters, init=init, **options).fit(X_local)
    with all_ranks(f"layout={layout} dtype={np.dtype(dtype).name}"):
        assert km.cluster_centers_.dtype == dtype
        assert km.n_iter_ == reference.n_iter_, (km.n_iter_, reference.n_iter_)
        if dtype == np.float64:
            np.testing.assert_allclose(km.cluster_centers_, reference.cluster_centers_,
                                       rtol=1e-7, atol=1e-10)
            assert abs(km.inertia_ - reference.inertia_) <= 1e-6 * reference.inertia_
            np.testing.assert_array_equal(km.labels_, reference.labels_[rows])
        else:
            np.testing.assert_allclose(km.cluster_centers_, reference.cluster_centers_,
                                       rtol=1e-4, atol=1e-4)
            assert abs(km.inertia_ - reference.inertia_) <= 1e-5 * reference.inertia_
            if len(X_local):
                assert np.mean(km.labels_ == reference.labels_[rows]) >= 0.999
        assert km.labels_.dtype == np.int32 and km.labels_.shape == (len(X_local),)
    assert_on_all_ranks(_same_everywhere(km.cluster_centers_), "centers differ between ranks")
    return km, reference


# -- the same clustering as scikit-learn ------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_same_clustering_as_sklearn_from_the_same_centers(layout):
    _compare_with_sklearn(_blobs(), layout)


@pytest.mark.parametrize("layout", ("even", "empty"))
def test_float32_is_clustered_in_float32(layout):
    _compare_with_sklearn(_blobs(dtype=np.float32), layout, dtype=np.float32)


def test_tolerance_stop_and_max_iter_as_sklearn():
    X = _blobs(std=3.0, seed=1)
    # tol relative to the mean variance: stops before labels settle, then relabels
    _compare_with_sklearn(X, "uneven", tol=1e-2)
    _compare_with_sklearn(X, "even", max_iter=3)


def test_empty_clusters_move_to_the_farthest_rows_like_sklearn():
    X = _blobs(n=900, features=4, centers=5, std=1.5, seed=3)
    init = X[:5].copy()
    init[2], init[4] = 1000.0, -1000.0  # two centers no row is nearest to
    _compare_with_sklearn(X, "uneven", n_clusters=5, init=init)


@pytest.mark.parametrize("init", ["k-means++", "k-means||", "random"])
def test_rank_count_does_not_change_the_result(init, solo):
    """The same random_state gives the same centers at any number of ranks."""
    X = _blobs(n=900, seed=4)
    X_local, _ = _shard(X, "uneven")
    km = KMeans(6, init=init, random_state=7).fit(X_local)
    serial = KMeans(6, init=init, random_state=7, comm=solo).fit(X)
    with all_ranks(init):
        np.testing.assert_allclose(km.cluster_centers_, serial.cluster_centers_, rtol=1e-9)
        assert km.n_iter_ == serial.n_iter_
        assert abs(km.inertia_ - serial.inertia_) <= 1e-9 * serial.inertia_
    assert_on_all_ranks(_same_everywhere(km.cluster_centers_), "centers differ between ranks")


def _quality(X_full, n_clusters, layout="even"):
    X_local, _ = _shard(X_full, layout)
    reference = None
    if hpcdist.get_rank() == 0:  # the same on every rank: computed once
        reference = np.mean([SKLearnKMeans(n_clusters, random_state=s).fit(X_full).inertia_
                             for s in range(10)])
    reference = hpcdist.broadcast_object(reference)
    ours = {init: np.mean([KMeans(n_clusters, init=init, random_state=s).fit(X_local).inertia_
                           for s in range(10)])
            for init in ("k-means++", "k-means||")}
    for init, inertia in ours.items():
        assert_on_all_ranks(inertia <= 1.01 * reference,
                            f"{init}: mean inertia {inertia:.6g} > 1.01 x scikit-learn's "
                            f"k-means++ {reference:.6g}")


def test_initializations_as_good_as_sklearn_kmeans_plusplus_on_blobs():
    _quality(_blobs(n=1000, features=8, centers=10, std=1.0, seed=5), 10)


def test_initializations_as_good_as_sklearn_kmeans_plusplus_on_digits():
    X = hpcdist.allgather(load_digits(split="all")[0])
    _quality(X, 10, layout="uneven")


# -- methods and global semantics ---------------------------------------------------------------

def test_predict_transform_score_and_fit_predict():
    X = _blobs(seed=6)
    X_local, _ = _shard(X, "uneven")
    km = KMeans(6, random_state=0)
    labels = km.fit_predict(X_local)
    expected = -euclidean_distances(X, km.cluster_centers_, squared=True).min(axis=1).sum()
    score = km.score(X_local)
    with all_ranks():
        np.testing.assert_array_equal(labels, km.labels_)
        np.testing.assert_array_equal(km.predict(X_local), km.labels_)
        np.testing.assert_allclose(km.transform(X_local),
                                   euclidean_distances(X_local, km.cluster_centers_),
                                   rtol=1e-12)
        assert km.fit_transform(X_local).shape == (len(X_local), 6)
        np.testing.assert_allclose(score, expected, rtol=1e-9)
        np.testing.assert_allclose(-score, km.inertia_, rtol=1e-9)
        assert km.get_feature_names_out().tolist() == [f"kmeans{i}" for i in range(6)]



@pytest.mark.mpi(min_size=2)
def test_many_calls_on_a_raw_communicator_share_one_context():
    """``comm=MPI.COMM_WORLD`` gets one context, made once for that communicator: a new one
    per call (Split_type, Split, Dup, never freed) ran out of communicators near the 682nd."""
    X = _blobs(n=120, features=3, centers=3, seed=2)
    X_local, _ = _shard(X)
    km = KMeans(3, init=X[:3], comm=MPI.COMM_WORLD).fit(X_local)
    first = km.score(X_local)
    scores = {km.score(X_local) for _ in range(3000)}
    assert_on_all_ranks(scores == {first}, f"3000 score calls gave {sorted(scores)[:3]}, "
                                           f"the first gave {first}")
    km.train_epoch(X_local)
    km.synchronize_model()

def test_one_packed_allreduce_per_iteration(ctx):
    X = _blobs(seed=2)
    X_local, _ = _shard(X, "uneven")
    ctx.reset_stats()
    km = KMeans(6, init=X[:6]).fit(X_local)
    stats = ctx.stats()
    calls = stats.get("allreduce", {}).get("calls", 0)
    # one per iteration, plus the exact final inertia (one float64)
    expected = km.n_iter_ + 1 if ctx.size > 1 else 0
    with all_ranks("allreduce count"):
        assert calls == expected, (calls, km.n_iter_)
        if calls:
            assert stats["allreduce"]["bytes_sent"] == km.n_iter_ * (6 * 5 + 6 + 2) * 8 + 8


def test_n_init_auto_and_best_of_several_runs(capsys):
    X = _blobs(n=600, seed=8)
    X_local, _ = _shard(X)
    KMeans(6, init="random", random_state=0, verbose=1).fit(X_local)
    runs = capsys.readouterr().out.count("Initialization complete")
    best = KMeans(6, init="random", n_init=4, random_state=0).fit(X_local)
    single = [KMeans(6, init="random", n_init=1, random_state=s).fit(X_local).inertia_
              for s in range(3)]
    with all_ranks():
        assert runs == (10 if hpcdist.get_rank() == 0 else 0)
        assert best.inertia_ <= max(single)
        assert KMeans(6, init=X[:6]).fit(X_local).n_iter_ >= 1


def test_verbose_prints_iterations_on_rank_0(capsys):
    X_local, _ = _shard(_blobs(n=300))
    KMeans(3, random_state=0, verbose=1).fit(X_local)
    out = capsys.readouterr().out
    with all_ranks():
        assert ("Iteration 0, inertia" in out) == (hpcdist.get_rank() == 0)


# -- trainer protocol -------------------------------------------------------------------------

def test_train_epochs_reproduce_fit():
    X = _blobs(std=3.0, seed=9)
    X_local, _ = _shard(X, "uneven")
    fitted = KMeans(6, init=X[:6], tol=0, max_iter=4).fit(X_local)
    trainer = KMeans(6, init=X[:6])
    for _ in range(4):
        trainer.train_epoch(X_local)
    with all_ranks("train_epoch x 4 == fit(max_iter=4)"):
        assert fitted.n_iter_ == 4 == trainer.n_iter_
        np.testing.assert_array_equal(trainer.cluster_centers_, fitted.cluster_centers_)


def test_parameters_state_dict_and_synchronize():
    X = _blobs(seed=10)
    X_local, _ = _shard(X)
    km = KMeans(6, random_state=0, max_iter=3).fit(X_local)
    vector = km.get_parameters()
    state = km.state_dict()
    restored = KMeans(6).load_state_dict(state)
    with all_ranks("state_dict round trip"):
        assert vector.dtype == np.float64 and vector.shape == (6 * 5,)
        assert all(isinstance(v, (np.ndarray, int, float)) for v in state.values())
        np.testing.assert_array_equal(restored.get_parameters(), vector)
        np.testing.assert_array_equal(restored.predict(X_local), km.predict(X_local))
        assert restored.n_iter_ == km.n_iter_
    km.train_epoch(X_local)
    restored.train_epoch(X_local)
    with all_ranks("resumed"):
        np.testing.assert_array_equal(restored.cluster_centers_, km.cluster_centers_)
    km.set_parameters(vector + hpcdist.get_rank())
    km.synchronize_model()
    size = hpcdist.get_world_size()
    with all_ranks("synchronize_model averages"):
        np.testing.assert_allclose(km.get_parameters(), vector + (size - 1) / 2, rtol=1e-12)
        with pytest.raises(ValueError, match="got 3 values"):
            km.set_parameters(np.zeros(3))
    before = km.get_parameters()
    expect_error(ValueError, km.set_parameters, np.full(vector.size, np.nan),
                 match=r"KMeans.set_parameters: the vector holds NaN or infinity at 30 of its 30 "
                       r"positions \(the first at index 0\); pass finite values")
    with all_ranks("a refused vector changes nothing"):
        np.testing.assert_array_equal(km.get_parameters(), before)


# -- bad input: the same clear error on every rank ----------------------------------------------

def test_more_clusters_than_samples():
    rows = 1 if hpcdist.get_rank() == 0 else 0
    size = hpcdist.get_world_size()
    X = np.ones((rows, 2)) if size > 1 else np.ones((3, 2))
    n = 1 if size > 1 else 3
    expect_error(ValueError, KMeans(8).fit, X, match=rf"n_samples={n} should be >= n_clusters=8")


def test_nan_and_infinity():
    X_local, _ = _shard(_blobs(n=200))
    bad = X_local.copy()
    if hpcdist.get_rank() == hpcdist.get_world_size() - 1:
        bad[0, 1] = np.nan
    expect_error(ValueError, KMeans(3).fit, bad, match="NaN")
    bad = X_local.copy()
    if len(bad):
        bad[-1, 0] = np.inf
    expect_error(ValueError, KMeans(3).fit, bad, match="infinity")


def test_score_with_bad_rows_on_one_rank_fails_everywhere():
    X_local, _ = _shard(_blobs(n=200))
    km = KMeans(3, random_state=0).fit(X_local)
    bad = X_local.copy()
    if hpcdist.get_rank() == 0:
        bad[0, 0] = np.nan
    expect_error(ValueError, km.score, bad, match="NaN")  # no rank left in the allreduce


def test_dtypes_ints_become_float64_and_complex_or_strings_fail():
    X_local, _ = _shard(np.arange(400).reshape(200, 2) % 17)
    km = KMeans(3, random_state=0).fit(X_local)
    with all_ranks():
        assert km.cluster_centers_.dtype == np.float64
    expect_error(ValueError, KMeans(3).fit, X_local + 1j, match="[Cc]omplex")
    expect_error(ValueError, KMeans(3).fit, np.full((5, 2), "a", dtype=object),
                 match="string|float")


def test_bad_hyperparameters():
    X_local, _ = _shard(_blobs(n=200))
    for estimator, pattern in ((KMeans(0), r"n_clusters=0"), (KMeans(3, init="kmeans"),
                                                              r"init='kmeans'"),
                               (KMeans(3, n_init=0), r"n_init=0"),
                               (KMeans(3, tol=-1.0), r"tol=-1.0"),
                               (KMeans(3, max_iter=0), r"max_iter=0"),
                               (KMeans(3, init=np.zeros((2, 5))), r"shape of the initial"),
                               (KMeans(3, random_state=-1),
                                r"random_state=-1 should be in \[0, 4294967295\]"),
                               (KMeans(3, random_state=2 ** 40), r"random_state=1099511627776")):
        expect_error(ValueError, estimator.fit, X_local, match=pattern)
    expect_error(TypeError, KMeans(3, random_state="x").fit, X_local,
                 match=r"KMeans: random_state='x' should be an integer, None, or a numpy "
                       r"RandomState or Generator")
    with pytest.raises(TypeError, match="CheckpointManager"):
        KMeans(3).fit(X_local, checkpoint="ckpt")


def test_explicit_init_with_n_init_warns():
    X = _blobs(n=200)
    X_local, _ = _shard(X)
    with pytest.warns(RuntimeWarning, match="performing only one init"):
        KMeans(6, init=X[:6], n_init=3).fit(X_local)


def test_predict_before_fit_and_with_wrong_width():
    from sklearn.exceptions import NotFittedError

    X_local, _ = _shard(_blobs(n=200))
    with pytest.raises(NotFittedError):
        KMeans(3).predict(X_local)
    km = KMeans(3, random_state=0).fit(X_local)
    with pytest.raises(ValueError, match=r"X has 2 features, but KMeans is expecting 5"):
        km.predict(X_local[:, :2])


@pytest.mark.mpi(min_size=2)
def test_different_widths_on_different_ranks():
    X_local, _ = _shard(_blobs(n=200))
    if hpcdist.get_rank() == 1:
        X_local = X_local[:, :4]
    expect_error(ValueError, KMeans(3).fit, X_local,
                 match=[r"n_features differs across ranks", r"rank 1 has 4"])


@pytest.mark.mpi(min_size=2)
def test_init_arrays_that_differ_between_ranks():
    X = _blobs(n=200)
    X_local, _ = _shard(X)
    expect_error(ValueError, KMeans(6, init=X[:6] + hpcdist.get_rank()).fit, X_local,
                 match=r"^KMeans\.fit: init differs across ranks: rank 0 has float64\[6, \d+\] ")


def test_check_estimator_at_one_rank():
    """scikit-learn's estimator checks, all of them (none is expected to fail)."""
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(KMeans(), expected_failed_checks={}, on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 45


@pytest.mark.gpu
def test_cupy_arrays_are_clustered_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    X = _blobs(seed=11)
    X_local, _ = _shard(X)
    reference = KMeans(6, init=X[:6]).fit(X_local)
    km = KMeans(6, init=X[:6]).fit(cupy.asarray(X_local))
    with all_ranks():
        np.testing.assert_allclose(km.cluster_centers_, reference.cluster_centers_, rtol=1e-9)
        assert km.n_iter_ == reference.n_iter_


# -- the same tests under mpiexec ---------------------------------------------------------------

test_same_clustering_as_sklearn_from_the_same_centers_mpi = mpi_twin(
    test_same_clustering_as_sklearn_from_the_same_centers)
test_float32_is_clustered_in_float32_mpi = mpi_twin(test_float32_is_clustered_in_float32)
test_tolerance_stop_and_max_iter_as_sklearn_mpi = mpi_twin(
    test_tolerance_stop_and_max_iter_as_sklearn)
test_empty_clusters_move_to_the_farthest_rows_like_sklearn_mpi = mpi_twin(
    test_empty_clusters_move_to_the_farthest_rows_like_sklearn)
test_rank_count_does_not_change_the_result_mpi = mpi_twin(
    test_rank_count_does_not_change_the_result)
test_initializations_as_good_as_sklearn_kmeans_plusplus_on_digits_mpi = mpi_twin(
    test_initializations_as_good_as_sklearn_kmeans_plusplus_on_digits)
test_predict_transform_score_and_fit_predict_mpi = mpi_twin(
    test_predict_transform_score_and_fit_predict)
test_one_packed_allreduce_per_iteration_mpi = mpi_twin(test_one_packed_allreduce_per_iteration)
test_n_init_auto_and_best_of_several_runs_mpi = mpi_twin(
    test_n_init_auto_and_best_of_several_runs)
test_verbose_prints_iterations_on_rank_0_mpi = mpi_twin(test_verbose_prints_iterations_on_rank_0)
test_train_epochs_reproduce_fit_mpi = mpi_twin(test_train_epochs_reproduce_fit)
test_parameters_state_dict_and_synchronize_mpi = mpi_twin(
    test_parameters_state_dict_and_synchronize)
test_more_clusters_than_samples_mpi = mpi_twin(test_more_clusters_than_samples)
test_nan_and_infinity_mpi = mpi_twin(test_nan_and_infinity)
test_score_with_bad_rows_on_one_rank_fails_everywhere_mpi = mpi_twin(
    test_score_with_bad_rows_on_one_rank_fails_everywhere)
test_dtypes_ints_become_float64_and_complex_or_strings_fail_mpi = mpi_twin(
    test_dtypes_ints_become_float64_and_complex_or_strings_fail)
test_bad_hyperparameters_mpi = mpi_twin(test_bad_hyperparameters)
test_explicit_init_with_n_init_warns_mpi = mpi_twin(test_explicit_init_with_n_init_warns)
test_predict_before_fit_and_with_wrong_width_mpi = mpi_twin(
    test_predict_before_fit_and_with_wrong_width)
