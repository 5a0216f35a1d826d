"""Distributed-graph contexts and neighbor_allgather: values, checks, statistics."""
import numpy as np
import pytest
from ml_dtypes import bfloat16

import hpcdist
from hpcdist.comm.calls import resolve
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin


def ring_neighbors(rank, size):
    return list(dict.fromkeys([(rank - 1) % size, (rank + 1) % size]))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, bfloat16])
def test_ring_gathers_each_neighbour_in_source_order(ctx, dtype):
    ring = ctx.graph(ring_neighbors(ctx.rank, ctx.size))
    x = (np.arange(6).reshape(2, 3) + 10 * ctx.rank).astype(dtype)
    result = ring.neighbor_allgather(x)
    sources = ring_neighbors(ctx.rank, ctx.size)
    expected = np.stack([(np.arange(6).reshape(2, 3) + 10 * s).astype(dtype) for s in sources])
    with all_ranks("ring"):
        check_array(result, expected, rtol=0, atol=0)
    same = hpcdist.comm.neighbor_allgather(x, ctx=ring)  # the module-level function
    with all_ranks("module function"):
        check_array(same, expected, rtol=0, atol=0)


def test_complete_graph_with_directed_edges_and_scalars(ctx):
    """Sources order the result; destinations may differ from sources (a directed graph)."""
    sources = [(ctx.rank - 1) % ctx.size]
    destinations = [(ctx.rank + 1) % ctx.size]
    graph = ctx.graph(sources, destinations)
    result = graph.neighbor_allgather(float(ctx.rank))
    noncontiguous = np.arange(12.0).reshape(3, 4)[:, ::2] + ctx.rank
    gathered = graph.neighbor_allgather(noncontiguous)
    with all_ranks("directed"):
        check_array(result, np.array([float(sources[0])]))
        check_array(gathered, (np.arange(12.0).reshape(3, 4)[:, ::2] + sources[0])[None])


test_complete_graph_with_directed_edges_and_scalars_mpi = mpi_twin(
    test_complete_graph_with_directed_edges_and_scalars)


def test_statistics_count_what_leaves_and_arrives(ctx):
    peers = [r for r in range(ctx.size) if r != ctx.rank]
    graph = ctx.graph(peers)
    graph.reset_stats()
    x = np.ones(100)
    graph.neighbor_allgather(x)
    graph.neighbor_allgather(x)
    record = graph.stats()["neighbor_allgather"]
    with all_ranks("stats"):
        assert record["calls"] == 2
        assert record["bytes_sent"] == 2 * x.nbytes * len(peers)
        assert record["bytes_received"] == 2 * x.nbytes * len(peers)
        assert record["seconds"] >= 0


test_statistics_count_what_leaves_and_arrives_mpi = mpi_twin(
    test_statistics_count_what_leaves_and_arrives)


def test_pending_call_signature(ctx):
    graph = ctx.graph([])
    start = graph._begin("neighbor_allgather", resolve(np.zeros(4, np.float32), graph,
                                                       "neighbor_allgather"))
    assert graph._inflight_signature() == "neighbor_allgather float32[4]"
    graph._end("neighbor_allgather", start, 0, 0)
    assert graph.neighbor_allgather(np.zeros(3)).shape == (0, 3)


@pytest.mark.mpi(min_size=2)
def test_check_mode_names_each_ranks_shape(ctx):
    graph = ctx.graph(ring_neighbors(ctx.rank, ctx.size))
    graph.check = True
    expect_error(hpcdist.CollectiveMismatchError, graph.neighbor_allgather,
                 np.zeros(3 + (ctx.rank == 0)),
                 match=[r"neighbor_allgather: rank 0 passed float64\[4\]", r"float64\[3\]"])


@pytest.mark.mpi(min_size=2)
def test_one_sided_edge_raises_on_every_rank(ctx):
    sources = [1] if ctx.rank == 0 else []   # rank 0 expects rank 1, rank 1 sends nothing
    expect_error(hpcdist.InvalidArgumentError, ctx.graph, sources, [],
                 match=["rank 0 receives from rank 1", "does not list 0 among its "
                        "destinations"])


def test_bad_neighbours_raise_naming_them(ctx):
    expect_error(hpcdist.InvalidArgumentError, ctx.graph, [ctx.size],
                 match=[f"names rank {ctx.size}", f"outside the {ctx.size} ranks"])
    expect_error(hpcdist.InvalidArgumentError, ctx.graph, [0, 0], match="names a rank twice")
    expect_error(hpcdist.InvalidArgumentTypeError, ctx.graph, [0.5], match="not a rank")
    expect_error(hpcdist.InvalidArgumentError, ctx.neighbor_allgather, np.ones(2),
                 match=r"no graph topology; make one with ctx.graph")


test_bad_neighbours_raise_naming_them_mpi = mpi_twin(test_bad_neighbours_raise_naming_them)
