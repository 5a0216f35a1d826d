"""DistributedSampler: coverage, padding, drop_last, epochs, across real ranks."""
import numpy as np
import pytest

import hpcdist
from hpcdist.data import DistributedSampler
from tests.helpers import all_ranks, expect_error


def _all(n, replicas, **kwargs):
    """Every rank's list of indices, computed in one process."""
    return [list(DistributedSampler(n, replicas, r, **kwargs)) for r in range(replicas)]


def _ceil_div(a, b):
    return -(-a // b)


# ------------------------------------------------------------------ serial
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 10, 11, 28, 100])
def test_sampler_covers_the_data_set(n, replicas, shuffle):
    per_rank = _all(n, replicas, shuffle=shuffle, seed=3)
    count = _ceil_div(n, replicas)
    assert [len(ix) for ix in per_rank] == [count] * replicas
    flat = [i for ix in per_rank for i in ix]
    assert set(flat) == set(range(n)), "the union over ranks should be the whole data set"
    assert len(flat) - n == count * replicas - n < replicas  # padding only
    if n % replicas == 0:
        assert len(set(flat)) == len(flat), "ranks should be disjoint without padding"


@pytest.mark.parametrize("replicas", [2, 3, 4, 7])
@pytest.mark.parametrize("n", [0, 1, 5, 10, 11, 28])
def test_sampler_drop_last(n, replicas):
    per_rank = _all(n, replicas, seed=5, drop_last=True)
    count = n // replicas
    assert [len(ix) for ix in per_rank] == [count] * replicas
    flat = [i for ix in per_rank for i in ix]
    assert len(set(flat)) == len(flat) == count * replicas, "disjoint, tail dropped"
    order = np.random.default_rng((5, 0)).permutation(n)
    assert set(flat) == set(order[:count * replicas].tolist()), "the tail of the order is dropped"


def test_sampler_padding_wraps_around_like_torch():
    assert _all(10, 4, shuffle=False) == [[0, 4, 8], [1, 5, 9], [2, 6, 0], [3, 7, 1]]
    # padding longer than the data set repeats it
    assert _all(2, 5, shuffle=False) == [[0], [1], [0], [1], [0]]
    assert _all(10, 4, shuffle=False, drop_last=True) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_sampler_rank_takes_every_num_replicas_th_index():
    seed, epoch, n, replicas = 11, 2, 23, 3
    order = np.random.default_rng((seed, epoch)).permutation(n)
    padded = np.concatenate([order, order[:1]])
    for r in range(replicas):
        s = DistributedSampler(n, replicas, r, seed=seed)
        s.set_epoch(epoch)
        assert list(s) == padded[r::replicas].tolist()


def test_sampler_epochs_reshuffle_deterministically():
    n = 100
    a = DistributedSampler(n, 2, 0, seed=1)
    b = DistributedSampler(n, 2, 0, seed=1)
    orders = []
    for epoch in range(4):
        a.set_epoch(epoch)
        b.set_epoch(epoch)
        assert list(a) == list(b), "same seed and epoch, different order"
        orders.append(list(a))
    assert all(orders[i] != orders[j] for i in range(4) for j in range(i)), \
        "every epoch should have its own order"
    a.set_epoch(1)
    assert list(a) == orders[1]
    assert list(a) != sorted(list(a)), "shuffle=True should not be in order"
    assert list(DistributedSampler(n, 2, 0, seed=2)) != orders[0], "the seed should matter"


def test_sampler_without_shuffle_ignores_epoch():
    s = DistributedSampler(9, 2, 1, shuffle=False)
    first = list(s)
    s.set_epoch(5)
    assert list(s) == first == [1, 3, 5, 7, 0]


def test_sampler_iteration_and_len():
    s = DistributedSampler(11, 3, 2, seed=4)
    items = list(s)
    assert len(s) == len(items) == 4 == s.num_samples
    assert s.total_size == 12
    assert all(type(i) is int for i in items)
    ix = s.indices()
    assert ix.dtype == np.int64 and ix.tolist() == items


def test_sampler_accepts_a_sized_data_set():
    X = np.zeros((13, 2))
    assert DistributedSampler(X, 4, 0).dataset_size == 13


def test_sampler_defaults_from_context(rank, size):
    s = DistributedSampler(10)
    assert (s.rank, s.num_replicas) == (rank, size)
    assert (s.shuffle, s.seed, s.drop_last, s.epoch) == (True, 0, False, 0)


@pytest.mark.parametrize("args,kwargs,exc,match", [
    ((-1, 2, 0), {}, ValueError, r"dataset_size=-1 should be >= 0"),
    ((1.5, 2, 0), {}, TypeError, r"dataset_size=1.5 should be an int"),
    ((10, 0, 0), {}, ValueError, r"num_replicas=0 should be >= 1"),
    ((10, 2, 2), {}, ValueError, r"rank=2 should be in 0\.\.1 \(num_replicas=2\)"),
    ((10, 2, -1), {}, ValueError, r"rank=-1 should be in 0\.\.1"),
    ((10, 2, 0), {"seed": -1}, ValueError, r"seed=-1 should be >= 0"),
    ((10, 2, 0), {"seed": None}, TypeError, r"seed=None.*same non-negative int"),
    ((10, 2, 0), {"shuffle": "no"}, TypeError, r"shuffle='no' should be True or False"),
    ((10, 2, 0), {"shuffle": None}, TypeError, r"shuffle=None should be True or False"),
    ((10, 2, 0), {"drop_last": "yes"}, TypeError, r"drop_last='yes' should be True or False"),
])
def test_sampler_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DistributedSampler(*args, **kwargs)


@pytest.mark.parametrize("epoch,exc", [(-1, ValueError), (1.0, TypeError)])
def test_sampler_bad_epoch(epoch, exc):
    with pytest.raises(exc, match=rf"epoch={epoch}"):
        DistributedSampler(10, 2, 0).set_epoch(epoch)


# ------------------------------------------------------------------ MPI
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("n", [37, 48, 1])
def test_sampler_across_ranks(ctx, n):
    sampler = DistributedSampler(n, seed=7)
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        mine = sampler.indices().tolist()
        per_rank = hpcdist.allgather_object(mine)
        count = _ceil_div(n, ctx.size)
        padded = [None] * (count * ctx.size)
        for r, ix in enumerate(per_rank):
            padded[r::ctx.size] = ix
        orders.append(padded)
        with all_ranks(f"n={n} epoch={epoch}"):
            assert len(mine) == len(sampler) == count
            # one permutation shared by every rank: the first n entries of the
            # interleaved order are all distinct and cover the data set
            assert sorted(padded[:n]) == list(range(n)), padded
            assert padded[n:] == padded[:len(padded) - n], "padding should wrap around"
    with all_ranks():
        if n > 10:
            assert orders[0] != orders[1] and orders[1] != orders[2], "epochs should differ"


@pytest.mark.mpi(min_size=2)
def test_sampler_drop_last_across_ranks(ctx):
    n = 4 * ctx.size + ctx.size - 1  # never divisible
    sampler = DistributedSampler(n, seed=2, drop_last=True)
    sampler.set_epoch(3)
    per_rank = hpcdist.allgather_object(sampler.indices().tolist())
    flat = [i for ix in per_rank for i in ix]
    with all_ranks():
        assert len(sampler) == 4
        assert all(len(ix) == 4 for ix in per_rank)
        assert len(set(flat)) == len(flat) == 4 * ctx.size


@pytest.mark.mpi(min_size=2)
def test_sampler_bad_rank_on_every_rank(ctx):
    expect_error(ValueError, DistributedSampler, 10, rank=ctx.size,
                 match=rf"rank={ctx.size} should be in 0\.\.{ctx.size - 1}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("setting, ours, theirs", [
    ("seed", 7, 8), ("shuffle", True, False), ("dataset_size", 10, 11), ("drop_last", False, True)])
def test_sampler_settings_that_differ_are_named_on_every_rank(ctx, setting, ours, theirs):
    settings = {"dataset_size": 10, setting: ours if ctx.rank == 0 else theirs}
    expect_error(hpcdist.ConfigMismatchError, DistributedSampler, **settings,
                 match=[rf"^DistributedSampler: {setting} differs across ranks: rank 0 has "
                        rf"{ours}, ranks? 1"])


@pytest.mark.mpi(min_size=2)
def test_sampler_bad_seed_on_one_rank_fails_every_rank(ctx):
    expect_error(ValueError, DistributedSampler, 10, seed=-1 if ctx.rank == 1 else 0,
                 match=r"seed=-1 should be >= 0")
