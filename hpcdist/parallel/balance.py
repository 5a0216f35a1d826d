"""Workload balancing: tasks of known cost spread over ranks."""

import heapq

import numpy as np

from .._checks import check_int
from ..exceptions import InvalidArgumentError

__all__ = ["balance_workload"]


def balance_workload(task_costs, world_size):
    """Assign tasks to ranks so that the largest total cost stays small.

    Longest processing time first (Graham 1969): tasks in order of falling
    cost, each to the rank with the least work so far (ties: the earlier
    task, the lower rank). The largest load is at most
    ``4/3 - 1/(3 * world_size)`` times the best possible.

    Parameters
    ----------
    task_costs : array-like of shape (n_tasks,)
        Non-negative, finite cost of each task.
    world_size : int
        Number of ranks (>= 1).

    Returns
    -------
    list of ndarray of int64
        ``world_size`` sorted arrays of task indices; every task in exactly
        one. The same input gives the same answer on every rank.

    Examples
    --------
    >>> [a.tolist() for a in balance_workload([5, 4, 3, 3, 3], 2)]
    [[0, 3], [1, 2, 4]]
    """
    costs = np.asarray(task_costs)
    if costs.ndim != 1 or costs.dtype.kind not in "iuf":
        raise InvalidArgumentError(f"balance_workload: task_costs should be a 1-D array of "
                                   f"numbers, got {costs.dtype}{list(costs.shape)}")
    world_size = check_int(world_size, "world_size", minimum=1)
    bad = np.flatnonzero(~np.isfinite(costs) | (costs < 0)) if costs.size else []
    if len(bad):
        first = bad[0]
        raise InvalidArgumentError(f"balance_workload: task_costs[{first}]="
                                   f"{costs[first].item()!r} should be a finite number >= 0")
    costs = costs.astype(np.float64)
    loads = [(0.0, rank) for rank in range(world_size)]  # a heap: least loaded, lowest rank
    owners = np.empty(len(costs), dtype=np.int64)
    for task in np.argsort(-costs, kind="stable").tolist():
        load, rank = loads[0]
        owners[task] = rank
        heapq.heapreplace(loads, (load + costs[task], rank))
    return [np.flatnonzero(owners == rank).astype(np.int64) for rank in range(world_size)]
