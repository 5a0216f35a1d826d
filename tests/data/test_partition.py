"""DataPartitioner and shard."""
import numpy as np
import pytest

import hpcdist
from hpcdist.data import DataPartitioner, partition, shard
from tests.data.conftest import explicit_context
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin

PAIRS = [(total, world) for total in range(0, 26) for world in range(1, 9)]
PAIRS += [(1797, 3), (1797, 4), (10**6 + 3, 7), (5, 64)]


def _blocks(total, world):
    p = DataPartitioner(total, world)
    return p, [p.get_partition(r) for r in range(world)]


# ------------------------------------------------------------------ serial
@pytest.mark.parametrize("total,world", PAIRS)
def test_partition_balanced_contiguous_covering(total, world):
    p, blocks = _blocks(total, world)
    sizes = [stop - start for start, stop in blocks]
    assert blocks[0][0] == 0 and blocks[-1][1] == total
    for (_, stop), (start, _) in zip(blocks[:-1], blocks[1:]):
        assert stop == start, f"gap or overlap between blocks: {blocks}"
    assert min(sizes) >= 0 and max(sizes) - min(sizes) <= 1, sizes
    larger = total % world
    assert sizes[:larger] == [total // world + 1] * larger, sizes
    assert sizes[larger:] == [total // world] * (world - larger), sizes
    assert list(p.sizes) == sizes
    for r, (start, stop) in enumerate(blocks):
        assert p.partition_size(r) == stop - start
        check_array(p.get_indices(r), np.arange(start, stop, dtype=np.int64))
        assert type(start) is int and type(stop) is int and type(p.partition_size(r)) is int


def test_partition_example():
    _, blocks = _blocks(10, 4)
    assert blocks == [(0, 3), (3, 6), (6, 8), (8, 10)]
    _, blocks = _blocks(2, 4)
    assert blocks == [(0, 1), (1, 2), (2, 2), (2, 2)]


def test_partition_numpy_integers():
    p = DataPartitioner(np.int64(11), np.int32(3))
    assert p.get_partition(np.int64(2)) == (8, 11)
    assert p.total_size == 11 and p.world_size == 3


def test_partition_default_world_size(size):
    assert DataPartitioner(7).world_size == size


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"total_size": -1, "world_size": 2}, ValueError, r"total_size=-1 should be in \[0, "),
    ({"total_size": 10, "world_size": 0}, ValueError, r"world_size=0 should be >= 1"),
    ({"total_size": 10, "world_size": -3}, ValueError, r"world_size=-3"),
    ({"total_size": 2.5, "world_size": 2}, TypeError, r"total_size=2.5 should be an int"),
    ({"total_size": 10, "world_size": 2.0}, TypeError, r"world_size=2.0 should be an int"),
    ({"total_size": True, "world_size": 2}, TypeError, r"total_size=True"),
    ({"total_size": 10**20, "world_size": 3}, ValueError,
     r"total_size=100000000000000000000 should be in \[0, 9223372036854775807\]"),
])
def test_partition_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        DataPartitioner(**kwargs)


@pytest.mark.parametrize("rank", [-1, 4, 10])
@pytest.mark.parametrize("method", ["get_partition", "get_indices", "partition_size"])
def test_partition_rank_out_of_range(rank, method):
    p = DataPartitioner(10, 4)
    with pytest.raises(ValueError, match=rf"rank={rank} should be in 0\.\.3 \(world_size=4\)"):
        getattr(p, method)(rank)


def test_partition_rank_not_int():
    with pytest.raises(TypeError, match=r"rank=1.0 should be an int"):
        DataPartitioner(10, 4).get_partition(1.0)


@pytest.fixture
def one_process_plays_every_rank(monkeypatch):
    """shard compares len(X) across ranks; a context without a communicator has none."""
    monkeypatch.setattr(partition, "agree_config", lambda *args, **kwargs: None)


@pytest.mark.usefixtures("one_process_plays_every_rank")
@pytest.mark.parametrize("n,world", [(0, 3), (2, 3), (23, 3), (24, 5), (7, 1)])
def test_shard_explicit_contexts_reassemble(n, world):
    X = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    parts = [shard(X, explicit_context(rank=r, size=world)) for r in range(world)]
    for r, part in enumerate(parts):
        assert part.shape == (n // world + (r < n % world), 3)
        assert part.dtype == np.float32
    check_array(np.concatenate(parts), X)


@pytest.mark.usefixtures("one_process_plays_every_rank")
def test_shard_is_a_view_and_keeps_type():
    X = np.arange(12).reshape(6, 2)
    part = shard(X, explicit_context(rank=1, size=2))
    assert np.shares_memory(part, X)
    assert shard(list(range(5)), explicit_context(rank=0, size=2)) == [0, 1, 2]


def test_shard_default_context_single_process(size):
    if size != 1:
        pytest.skip("serial test")
    X = np.arange(10)
    check_array(shard(X), X)


def test_shard_takes_a_raw_communicator(ctx):
    from mpi4py import MPI

    X = np.arange(2 * ctx.size + 1)
    part = shard(X, MPI.COMM_WORLD)
    with all_ranks("the rows of this rank in COMM_WORLD"):
        check_array(part, shard(X, ctx))


test_shard_takes_a_raw_communicator_mpi = mpi_twin(test_shard_takes_a_raw_communicator)


@pytest.mark.parametrize("bad", [np.float64(3.0), np.array(5), 7, "abc"])
def test_shard_rejects_non_arrays(bad):
    with pytest.raises(TypeError, match="shard: X should be an array"):
        shard(bad, explicit_context(rank=0, size=1))


# ------------------------------------------------------------------ MPI
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("n", [0, 1, 23, 1000])
def test_shard_over_ranks(ctx, n):
    X = np.arange(2 * n, dtype=np.float64).reshape(n, 2)  # the same on every rank
    local = shard(X)
    gathered = hpcdist.allgather(np.ascontiguousarray(local))
    expected_rows = n // ctx.size + (ctx.rank < n % ctx.size)
    with all_ranks(f"shard n={n}"):
        assert local.shape == (expected_rows, 2), local.shape
        check_array(gathered, X)


@pytest.mark.mpi(min_size=2)
def test_partitioner_default_world_size_over_ranks(ctx):
    p = DataPartitioner(37)
    blocks = hpcdist.allgather_object(p.get_partition(ctx.rank))
    with all_ranks():
        assert p.world_size == ctx.size
        assert blocks[0][0] == 0 and blocks[-1][1] == 37
        assert all(blocks[r][1] == blocks[r + 1][0] for r in range(ctx.size - 1)), blocks


@pytest.mark.mpi(min_size=2)
def test_partitioner_rank_error_on_every_rank(ctx):
    p = DataPartitioner(10)
    expect_error(ValueError, p.get_partition, ctx.size,
                 match=rf"rank={ctx.size} should be in 0\.\.{ctx.size - 1}")
