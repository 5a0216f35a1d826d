"""Settings of the data layer that must agree across ranks are compared there: a
sampler's epoch, shard's array length, load_hdf5's dataset and axis. A difference on
one rank duplicated or lost rows silently; now ConfigMismatchError names it on every
rank."""
import pickle

import h5py
import numpy as np
import pytest

import hpcdist
from hpcdist.data import DistributedSampler, load_hdf5, shard
from tests.helpers import all_ranks, expect_error


def _last_rank():
    return hpcdist.get_rank() == hpcdist.get_world_size() - 1


def _mismatch(fn, *args, match, **kwargs):
    error = expect_error(ValueError, fn, *args, match=match, **kwargs)
    assert isinstance(error, hpcdist.ConfigMismatchError)


@pytest.mark.mpi(min_size=2)
def test_set_epoch_differs_on_one_rank():
    sampler = DistributedSampler(100)
    sampler.set_epoch(3)
    _mismatch(sampler.set_epoch, 4 if _last_rank() else 5,
              match=[r"DistributedSampler.set_epoch: epoch differs across ranks",
                     r"has 4", r"same epoch on every rank"])


def test_set_epoch_orders_as_before():
    sampler = DistributedSampler(50, seed=2)
    sampler.set_epoch(7)
    size, rank = hpcdist.get_world_size(), hpcdist.get_rank()
    order = np.resize(np.random.default_rng((2, 7)).permutation(50), len(sampler) * size)
    with all_ranks("epoch 7's order"):
        np.testing.assert_array_equal(sampler.indices(), order[rank::size])


def test_a_bad_epoch_is_refused_on_every_rank():
    expect_error(ValueError, DistributedSampler(10).set_epoch, -1, match=r"epoch")


def test_a_pickled_sampler_keeps_its_order_without_the_context():
    sampler = DistributedSampler(30, seed=1)
    copy = pickle.loads(pickle.dumps(sampler))
    copy.set_epoch(2)  # local: a copy compares nothing
    sampler.set_epoch(2)
    with all_ranks("pickled sampler"):
        np.testing.assert_array_equal(copy.indices(), sampler.indices())


@pytest.mark.mpi(min_size=2)
def test_shard_lengths_differ():
    X = np.arange(20 if _last_rank() else 21)
    _mismatch(shard, X, match=[r"shard: len\(X\) differs across ranks", r"has 20",
                               r"same full array on every rank"])


@pytest.mark.mpi(min_size=2)
def test_shard_of_no_array_on_one_rank():
    X = "abc" if _last_rank() else np.arange(4)
    error = expect_error((TypeError, ValueError), shard, X, match=r"shard: ")
    assert isinstance(error, hpcdist.HpcdistError)


def test_shard_of_the_same_array():
    X = np.arange(30).reshape(10, 3)
    parts = hpcdist.allgather(shard(X))
    with all_ranks("shards cover X"):
        np.testing.assert_array_equal(parts, X)


@pytest.fixture
def h5_path(tmp_path_factory):
    folder = hpcdist.broadcast_object(str(tmp_path_factory.mktemp("agree")))
    path = f"{folder}/data.h5"
    if hpcdist.get_rank() == 0:
        with h5py.File(path, "w") as f:
            f["X"] = np.arange(24.0).reshape(12, 2)
            f["Y"] = np.arange(24.0).reshape(12, 2) + 100
    hpcdist.barrier()
    return path


@pytest.mark.mpi(min_size=2)
def test_load_hdf5_dataset_differs(h5_path):
    _mismatch(load_hdf5, h5_path, "Y" if _last_rank() else "X",
              match=[r"load_hdf5: dataset differs across ranks", r"has 'Y'"])


@pytest.mark.mpi(min_size=2)
def test_load_hdf5_axis_differs(h5_path):
    _mismatch(load_hdf5, h5_path, "X", axis=1 if _last_rank() else 0,
              match=[r"load_hdf5: axis differs across ranks"])
