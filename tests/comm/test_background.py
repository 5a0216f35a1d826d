"""The communication thread: calls in submission order, errors to the waiter, counted stats."""
import numpy as np
import pytest

import hpcdist
from hpcdist.comm.background import CommunicationThread
from tests.helpers import all_ranks, mpi_twin


def test_calls_run_in_order_and_errors_reach_the_waiter(ctx):
    thread = ctx.communication_thread()
    assert ctx.communication_thread() is thread
    seen = []
    futures = [thread.submit(seen.append, i) for i in range(100)]
    failing = thread.submit(int, "not a number")
    last = thread.submit(len, seen)
    assert [f.result(timeout=60) for f in futures] == [None] * 100
    with pytest.raises(ValueError, match="not a number"):
        failing.result(timeout=60)
    assert last.result(timeout=60) == 100 and seen == list(range(100))


def test_collectives_on_the_thread_count_in_the_context_stats(ctx):
    if ctx.size > 1 and not CommunicationThread.available():
        pytest.skip("the MPI library does not run with MPI_THREAD_MULTIPLE")
    thread = ctx.communication_thread()
    x = np.arange(6.0) + ctx.rank
    ctx.reset_stats()
    result = thread.submit(hpcdist.allreduce, x, "sum", out=x, ctx=thread.ctx).result(timeout=60)
    stats = ctx.stats()
    with all_ranks("allreduce on the communication thread"):
        assert result is x
        np.testing.assert_array_equal(x, ctx.size * np.arange(6.0) + sum(range(ctx.size)))
        assert stats["allreduce"]["calls"] == 1 and stats["allreduce"]["bytes_sent"] == 48
    ctx.reset_stats()
    assert ctx.stats() == {}


test_calls_run_in_order_and_errors_reach_the_waiter_mpi = mpi_twin(
    test_calls_run_in_order_and_errors_reach_the_waiter)
test_collectives_on_the_thread_count_in_the_context_stats_mpi = mpi_twin(
    test_collectives_on_the_thread_count_in_the_context_stats)
