"""allgather(x, counts=...) and iallgather: a count that is wrong on one rank raises on
every rank (before, that rank raised and the others waited in the collective)."""
import numpy as np
import pytest

import hpcdist
from tests.helpers import expect_error


def _rows(rank):
    return np.full((3, 2), float(rank))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("gather", ["allgather", "iallgather"])
def test_rows_not_matching_their_count_on_one_rank(gather):
    size, rank = hpcdist.get_world_size(), hpcdist.get_rank()
    x = _rows(rank)[:2] if rank == size - 1 else _rows(rank)  # the last rank holds 2 rows
    counts = [3] * size  # equal to the rows everywhere else: their quick path

    def call():
        result = getattr(hpcdist, gather)(x, counts=counts)
        return result.wait() if gather == "iallgather" else result

    expect_error(ValueError, call,
                 match=[rf"counts\[{size - 1}\]=3 but rank {size - 1} passed 2 along axis=0"])


@pytest.mark.mpi(min_size=2)
def test_counts_that_differ_across_ranks():
    size, rank = hpcdist.get_world_size(), hpcdist.get_rank()
    x = _rows(rank)
    counts = [3] * size
    if rank == 0:
        counts[1] = 4  # rank 0 believes rank 1 sends 4 rows; rank 1 sends 3
    error = expect_error(ValueError, hpcdist.allgather, x, counts=counts,
                         match=[r"allgather: counts differs across ranks",
                                r"rank 0 has \[3, 4"])
    assert isinstance(error, hpcdist.ConfigMismatchError)


@pytest.mark.mpi(min_size=2)
def test_matching_counts_gather_as_before():
    size, rank = hpcdist.get_world_size(), hpcdist.get_rank()
    counts = [r + 1 for r in range(size)]
    result = hpcdist.allgather(np.full((rank + 1, 2), float(rank)), counts=counts)
    expected = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(size)])
    np.testing.assert_array_equal(result, expected)


def test_a_wrong_count_at_one_rank():
    expect_error(ValueError, hpcdist.allgather, np.zeros((2, 2)),
                 counts=[3] * hpcdist.get_world_size(), match=r"but rank \d+ passed 2")
