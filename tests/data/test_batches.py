"""iterate_batches and BatchIterator."""
import numpy as np
import pytest

import hpcdist
from hpcdist.data import BatchIterator, DataPartitioner, DistributedSampler, iterate_batches
from tests.helpers import all_ranks


def _lists(batches):
    return [b.tolist() for b in batches]


# ------------------------------------------------------------------ iterate_batches
def test_iterate_batches_in_order():
    batches = list(iterate_batches(10, 3))
    assert _lists(batches) == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert all(b.dtype == np.int64 for b in batches)
    assert _lists(iterate_batches(10, 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert _lists(iterate_batches(9, 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


@pytest.mark.parametrize("n,batch_size,drop_last,expected", [
    (0, 4, False, []), (3, 4, False, [[0, 1, 2]]), (3, 4, True, []), (4, 4, True, [[0, 1, 2, 3]]),
    (5, 1, False, [[0], [1], [2], [3], [4]]),
])
def test_iterate_batches_edges(n, batch_size, drop_last, expected):
    assert _lists(iterate_batches(n, batch_size, drop_last=drop_last)) == expected


def test_iterate_batches_shuffle():
    n = 50
    a = _lists(iterate_batches(n, 8, shuffle=True, seed=1))
    assert [len(b) for b in a] == [8] * 6 + [2]
    flat = [i for b in a for i in b]
    assert sorted(flat) == list(range(n)) and flat != list(range(n))
    assert a == _lists(iterate_batches(n, 8, shuffle=True, seed=1)), "same seed, same batches"
    assert a != _lists(iterate_batches(n, 8, shuffle=True, seed=2)), "the seed should matter"
    rng = np.random.default_rng(4)
    b = _lists(iterate_batches(n, 8, shuffle=True, seed=rng))
    assert b == _lists(iterate_batches(n, 8, shuffle=True, seed=np.random.default_rng(4)))


def test_iterate_batches_of_given_indices():
    indices = DataPartitioner(20, 3).get_indices(1)  # 7..13
    assert _lists(iterate_batches(indices, 3)) == [[7, 8, 9], [10, 11, 12], [13]]
    shuffled = [i for b in iterate_batches(indices, 3, shuffle=True, seed=0) for i in b]
    assert sorted(shuffled) == indices.tolist()
    assert _lists(iterate_batches([4, 2, 9], 2)) == [[4, 2], [9]]


def test_iterate_batches_of_a_sampler():
    sampler = DistributedSampler(10, 2, 1, seed=3)
    sampler.set_epoch(2)
    flat = [i for b in iterate_batches(sampler, 2) for i in b]
    assert flat == list(sampler)


@pytest.mark.parametrize("args,kwargs,exc,match", [
    ((10, 0), {}, ValueError, r"batch_size=0 should be >= 1"),
    ((10, -2), {}, ValueError, r"batch_size=-2 should be >= 1"),
    ((10, 2.5), {}, TypeError, r"batch_size=2.5 should be an int"),
    ((-3, 2), {}, ValueError, r"n_or_indices=-3 should be >= 0"),
    ((4.0, 2), {}, TypeError, r"n_or_indices=4.0 should be an int"),
    ((np.zeros((2, 2), dtype=int), 2), {}, ValueError, r"1-D integer array.*shape \(2, 2\)"),
    ((np.array([0.5, 1.0]), 2), {}, ValueError, r"1-D integer array.*float64"),
    ((10, 2), {"shuffle": True, "seed": -1}, ValueError, r"seed=-1 should be >= 0"),
])
def test_iterate_batches_bad_arguments(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        iterate_batches(*args, **kwargs)  # raises at the call, not at the first batch


# ------------------------------------------------------------------ BatchIterator
def _data(n=23):
    X = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n) * 10
    return X, y


def test_batch_iterator_in_order():
    X, y = _data()
    loader = BatchIterator(X, y, batch_size=5)
    batches = list(loader)
    assert len(loader) == len(batches) == 5
    assert [len(yb) for _, yb in batches] == [5, 5, 5, 5, 3]
    np.testing.assert_array_equal(np.concatenate([xb for xb, _ in batches]), X)
    np.testing.assert_array_equal(np.concatenate([yb for _, yb in batches]), y)
    assert len(BatchIterator(X, y, batch_size=5, drop_last=True)) == 4
    assert [len(b) for b, in BatchIterator(X, batch_size=5, drop_last=True)] == [5] * 4


def test_batch_iterator_shuffles_per_epoch_and_resumes():
    X, y = _data()
    loader = BatchIterator(X, y, batch_size=4, shuffle=True, seed=9)
    epochs = []
    for _ in range(3):
        rows = [(xb, yb) for xb, yb in loader]
        Xe = np.concatenate([xb for xb, _ in rows])
        ye = np.concatenate([yb for _, yb in rows])
        np.testing.assert_array_equal(Xe[:, 0] * 5, ye, err_msg="rows of X and y out of step")
        assert sorted(ye.tolist()) == y.tolist()
        epochs.append(ye.tolist())
    assert loader.epoch == 3
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    assert epochs[0] != sorted(epochs[0])
    again = BatchIterator(X, y, batch_size=4, shuffle=True, seed=9)
    again.set_epoch(2)
    assert np.concatenate([yb for _, yb in again]).tolist() == epochs[2], "set_epoch resumes"


def test_batch_iterator_with_sampler():
    X, y = _data(20)
    sampler = DistributedSampler(len(X), 3, 1, seed=5)
    loader = BatchIterator(X, y, batch_size=3, sampler=sampler)
    assert len(loader) == 3  # ceil(7 / 3)
    for epoch in range(2):
        got = np.concatenate([yb for _, yb in loader]).tolist()
        sampler_copy = DistributedSampler(len(X), 3, 1, seed=5)
        sampler_copy.set_epoch(epoch)
        assert got == [10 * i for i in sampler_copy], f"epoch {epoch}"


def test_batch_iterator_bad_arguments():
    X, y = _data()
    with pytest.raises(TypeError, match="at least one array"):
        BatchIterator(batch_size=2)
    with pytest.raises(ValueError, match=r"same number of rows, got lengths \[23, 22\]"):
        BatchIterator(X, y[:-1], batch_size=2)
    with pytest.raises(ValueError, match=r"batch_size=0 should be >= 1"):
        BatchIterator(X, batch_size=0)
    with pytest.raises(ValueError, match="shuffle=True with a sampler"):
        BatchIterator(X, batch_size=2, shuffle=True, sampler=DistributedSampler(23, 2, 0))
    with pytest.raises(ValueError, match=r"sampler.dataset_size=10 should equal .* 23"):
        BatchIterator(X, batch_size=2, sampler=DistributedSampler(10, 2, 0))
    with pytest.raises(ValueError, match=r"epoch=-1 should be >= 0"):
        BatchIterator(X, batch_size=2).set_epoch(-1)


# ------------------------------------------------------------------ MPI
@pytest.mark.mpi(min_size=2)
def test_batch_iterator_sampler_same_step_count_and_full_coverage(ctx):
    n = 5 * ctx.size + 1  # the sampler pads: every rank takes the same number of steps
    X = np.arange(n, dtype=np.float64)[:, None]
    loader = BatchIterator(X, batch_size=2, sampler=DistributedSampler(n, seed=1))
    for epoch in range(2):
        rows = [float(v) for (xb,) in loader for v in xb[:, 0]]
        steps = hpcdist.allgather_object(len(rows))
        seen = hpcdist.allgather_object(rows)
        with all_ranks(f"epoch {epoch}"):
            assert len(set(steps)) == 1, steps
            assert sorted(set(v for r in seen for v in r)) == list(map(float, range(n)))
