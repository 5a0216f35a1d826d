"""Estimator settings that differ across ranks: ConfigMismatchError on every rank, never a hang.

Each case gives rank 0 one value and the other ranks another, and requires
on every rank the public error naming the parameter and each rank's value
(short time limits: a regression to a hang fails fast).
"""
import re

import numpy as np
import pytest

import hpcdist
from hpcdist.ml import KMeans, MLPClassifier, RandomForestClassifier, RandomForestRegressor
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, same_on_all_ranks

pytestmark = [pytest.mark.mpi(min_size=2), pytest.mark.timeout(120)]


def _data(ctx, dtype=np.float64):
    rng = np.random.default_rng(ctx.rank)
    X = rng.standard_normal((60, 4)).astype(dtype)
    return X, (X[:, 0] > 0).astype(np.int64)


def _others(ctx):
    """How the message names the ranks that are not rank 0."""
    return "rank 1 has" if ctx.size == 2 else f"ranks 1-{ctx.size - 1} have"


def _mismatch(ctx, fit, name, ours, theirs):
    """``fit`` raises on every rank; ``ours``/``theirs``: rank 0's and the others' values."""
    shown = [re.escape(value if isinstance(value, str) else repr(value))
             for value in (ours, theirs)]
    expect_error(hpcdist.ConfigMismatchError, fit,
                 match=[rf"{name} differs across ranks: rank 0 has {shown[0]}, "
                        rf"{_others(ctx)} {shown[1]}$"])
    # the ranks are still in step: a collective right after the error works
    total = hpcdist.allreduce(np.ones(1), "sum", ctx=ctx)
    assert_on_all_ranks(total[0] == ctx.size, "collective after the mismatch")


@pytest.mark.parametrize("parameter, ours, theirs", [
    ("n_clusters", 8, 4), ("max_iter", 10, 20), ("init", "k-means++", "random")])
def test_kmeans_parameters(ctx, parameter, ours, theirs):
    X, _ = _data(ctx)
    model = KMeans(**{parameter: ours if ctx.rank == 0 else theirs}, random_state=0, comm=ctx)
    shown = [repr(value) for value in (ours, theirs)]  # strings read as written, quoted
    _mismatch(ctx, lambda: model.fit(X), rf"KMeans\.fit: {parameter}", *shown)


def test_input_dtype_differs(ctx):
    X, _ = _data(ctx, np.float32 if ctx.rank == 0 else np.float64)
    _mismatch(ctx, lambda: KMeans(3, random_state=0, comm=ctx).fit(X),
              r"KMeans\.fit: X\.dtype", "dtype float32", "dtype float64")


def test_input_width_differs_in_train_epoch(ctx):
    X, _ = _data(ctx)
    X = X if ctx.rank == 0 else X[:, :3]
    _mismatch(ctx, lambda: KMeans(3, random_state=0, comm=ctx).train_epoch(X),
              r"KMeans\.train_epoch: n_features", 4, 3)


@pytest.mark.parametrize("parameter, ours, theirs", [
    ("max_depth", 3, 5), ("n_estimators", 4, 6), ("random_state", 0, 1)])
def test_forest_parameters(ctx, parameter, ours, theirs):
    X, y = _data(ctx)
    settings = {"n_estimators": 4, "random_state": 0,
                parameter: ours if ctx.rank == 0 else theirs}
    model = RandomForestRegressor(**settings, comm=ctx)
    _mismatch(ctx, lambda: model.fit(X, y.astype(float)),
              rf"RandomForestRegressor\.fit: {parameter}", ours, theirs)


@pytest.mark.parametrize("parameter, ours, theirs", [
    ("batch_size", 16, 32), ("learning_rate_init", 0.001, 0.01)])
def test_mlp_parameters(ctx, parameter, ours, theirs):
    X, y = _data(ctx)
    model = MLPClassifier(hidden_layer_sizes=(8,), max_iter=2, random_state=0, comm=ctx,
                          **{parameter: ours if ctx.rank == 0 else theirs})
    _mismatch(ctx, lambda: model.partial_fit(X, y, classes=[0, 1]),
              rf"MLPClassifier\.partial_fit: {parameter}", ours, theirs)


def test_per_rank_settings_may_differ_and_seeds_come_from_rank_0(ctx):
    X, y = _data(ctx)
    forest = RandomForestClassifier(n_estimators=3, verbose=ctx.rank == 0, n_jobs=ctx.rank + 1,
                                    random_state=np.random.RandomState(ctx.rank), comm=ctx)
    forest.fit(X, y)  # random_state objects differ: rank 0 draws the seed for all
    kmeans = KMeans(3, comm=ctx).fit(X)  # random_state=None: rank 0's draw
    with all_ranks("seeds"):
        assert same_on_all_ranks(int(forest._seed))
        assert same_on_all_ranks(kmeans.cluster_centers_.tobytes())
