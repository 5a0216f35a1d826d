"""balance_workload: longest processing time first, against brute force on small cases."""
import itertools

import numpy as np
import pytest

import hpcdist
from hpcdist.parallel import balance_workload


def _best_makespan(costs, world_size):
    return min(max(sum(c for c, owner in zip(costs, owners) if owner == rank)
                   for rank in range(world_size))
               for owners in itertools.product(range(world_size), repeat=len(costs)))


def _makespan(costs, parts):
    return max(float(np.sum(np.asarray(costs, dtype=float)[p])) for p in parts)


@pytest.mark.parametrize("case", range(60))
def test_within_the_lpt_bound_of_brute_force(case):
    rng = np.random.default_rng(case)
    world_size = int(rng.integers(1, 4))
    costs = rng.integers(0, 20, size=int(rng.integers(0, 8))).tolist()
    parts = balance_workload(costs, world_size)
    assert len(parts) == world_size
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(costs)))
    assert all(p.dtype == np.int64 and np.all(np.diff(p) > 0) for p in parts)
    best = _best_makespan(costs, world_size)
    assert _makespan(costs, parts) <= (4 / 3 - 1 / (3 * world_size)) * best + 1e-9


def test_graham_worst_case_reaches_the_bound():
    # 2m+1 jobs 2m-1, 2m-1, 2m-2, 2m-2, ..., m, m, m on m machines: LPT gives 4m-1, best 3m
    m = 3
    costs = [5, 5, 4, 4, 3, 3, 3]
    parts = balance_workload(costs, m)
    assert _makespan(costs, parts) == 4 * m - 1 == 11
    assert _best_makespan(costs, m) == 3 * m


def test_ties_are_deterministic():
    parts = balance_workload([1.0, 1.0, 1.0, 1.0], 2)
    assert [p.tolist() for p in parts] == [[0, 2], [1, 3]]


@pytest.mark.parametrize("costs,world_size,error,match", [
    ([1, -2], 2, hpcdist.InvalidArgumentError, r"task_costs\[1\]=-2"),
    ([1, float("inf")], 2, hpcdist.InvalidArgumentError, r"task_costs\[1\]=inf"),
    ([[1, 2]], 2, hpcdist.InvalidArgumentError, "1-D"),
    (["a"], 2, hpcdist.InvalidArgumentError, "numbers"),
    ([1, 2], 0, ValueError, "world_size=0"),
])
def test_bad_arguments_name_the_value(costs, world_size, error, match):
    with pytest.raises(error, match=match):
        balance_workload(costs, world_size)
