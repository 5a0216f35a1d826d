"""from_dask / to_dask: each rank computes only its rows; the round trip is exact."""
import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="the dask extra is not installed")

import hpcdist  # noqa: E402
from hpcdist.data import DataPartitioner, from_dask, to_dask  # noqa: E402
from tests.helpers import all_ranks, expect_error, mpi_twin  # noqa: E402


def _data():
    return np.arange(37 * 3, dtype=np.float64).reshape(37, 3) / 7


@pytest.mark.parametrize("chunks", [(7, 3), (37, 3), (1, 1), (5, 2)])
def test_round_trip_is_exact_whatever_the_chunking(ctx, chunks):
    data = _data()
    lazy = da.from_array(data, chunks=chunks) * 2 + 1  # a graph, not a materialised array
    mine = from_dask(lazy, ctx=ctx)
    start, stop = DataPartitioner(len(data), ctx.size).get_partition(ctx.rank)
    back = to_dask(mine, ctx=ctx, root=0)
    with all_ranks(f"chunks {chunks}"):
        np.testing.assert_array_equal(mine, data[start:stop] * 2 + 1)
        if ctx.rank == 0:
            assert back.chunks[0] == tuple(DataPartitioner(len(data), ctx.size).partition_size(r)
                                           for r in range(ctx.size))
            np.testing.assert_array_equal(back.compute(), data * 2 + 1)
        else:
            assert back is None


test_round_trip_is_exact_whatever_the_chunking_mpi = mpi_twin(
    test_round_trip_is_exact_whatever_the_chunking)


def test_rows_are_computed_only_where_they_are_needed(ctx):
    data = _data()
    computed = []

    def record(block, block_info=None):
        computed.append(block_info[0]["array-location"][0])
        return block

    lazy = da.from_array(data, chunks=(4, 3)).map_blocks(record, dtype=data.dtype)
    mine = from_dask(lazy, ctx=ctx)
    start, stop = DataPartitioner(len(data), ctx.size).get_partition(ctx.rank)
    with all_ranks("only this rank's chunks"):
        np.testing.assert_array_equal(mine, data[start:stop])
        assert computed and all(lo < stop and hi > start for lo, hi in computed)


test_rows_are_computed_only_where_they_are_needed_mpi = mpi_twin(
    test_rows_are_computed_only_where_they_are_needed)


def test_unknown_chunk_sizes_name_the_fix(ctx):
    lazy = da.from_array(_data(), chunks=(7, 3))
    masked = lazy[lazy[:, 0] > 1]  # boolean indexing: row counts unknown until computed
    expect_error(ValueError, from_dask, masked, ctx=ctx,
                 match=r"unknown sizes \(nan\).*compute_chunk_sizes\(\)")
    expect_error(TypeError, from_dask, _data(), ctx=ctx, match=r"expected a dask.array.Array")


test_unknown_chunk_sizes_name_the_fix_mpi = mpi_twin(test_unknown_chunk_sizes_name_the_fix)


@pytest.mark.mpi(min_size=2)
def test_arrays_that_differ_between_ranks_are_named(ctx):
    lazy = da.from_array(_data()[:30 + ctx.rank], chunks=(7, 3))
    expect_error(hpcdist.ConfigMismatchError, from_dask, lazy, ctx=ctx,
                 match=r"from_dask: shape differs across ranks: rank 0 has \(30, 3\)")


def test_dataframes_are_taken_with_their_lengths(ctx):
    dd = pytest.importorskip("dask.dataframe", reason="dask.dataframe needs pandas")
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(_data(), columns=["a", "b", "c"])
    mine = from_dask(dd.from_pandas(frame, npartitions=4), ctx=ctx)
    start, stop = DataPartitioner(len(frame), ctx.size).get_partition(ctx.rank)
    with all_ranks("dataframe rows"):
        np.testing.assert_array_equal(mine, _data()[start:stop])


test_dataframes_are_taken_with_their_lengths_mpi = mpi_twin(
    test_dataframes_are_taken_with_their_lengths)
