"""hpcdist.rpc at any number of ranks: each test runs serially (calls to itself) and,
as its ``_mpi`` twin, under ``mpiexec -n N`` (N = 2, 3, 4)."""

import concurrent.futures
import gc
import operator
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest

import hpcdist
from hpcdist import rpc
from hpcdist.rpc.agent import current_agent
from tests.helpers import all_ranks as agree_on_all_ranks
from tests.helpers import assert_on_all_ranks, mpi_twin


# -- functions the calls run (module level: the callee imports them by name) -------------
def whoami(*args, **kwargs):
    return hpcdist.get_rank(), args, kwargs


def fail(value):
    raise ValueError(f"bad value {value}")


def chain(hops):
    """Run on the next rank ``hops`` times, each rank calling the next: a circular
    chain around all ranks; returns the ranks visited."""
    rank, size = hpcdist.get_rank(), hpcdist.get_world_size()
    if hops == 0:
        return [rank]
    return [rank] + rpc.rpc_sync((rank + 1) % size, chain, (hops - 1,))


def fan_out(value):
    """A handler that waits on calls to every rank at once (rpc_async futures)."""
    futures = [rpc.rpc_async(r, operator.add, (value, r)) for r in range(hpcdist.get_world_size())]
    return [f.result() for f in futures]


def slow(seconds, value):
    time.sleep(seconds)
    return value


def negate_and_sum(x):
    return -x, float(x.sum(dtype=np.float64))


def values_held():
    return len(current_agent().rrefs)


def local_value(rref):
    return rref.local_value(), rref.is_owner()


@contextmanager
def all_ranks(ctx, what):
    """tests.helpers.all_ranks, with a barrier first: a rank that finished its calls
    keeps serving the others' in MPI_Barrier (which releases the GIL), not in mpi4py's
    pickle-based allreduce (which holds it, so this rank's service thread would stop)."""
    with agree_on_all_ranks(what):
        try:
            yield
        finally:
            ctx.barrier()


def _next(ctx):
    return (ctx.rank + 1) % ctx.size


@pytest.fixture
def service(ctx):
    """RPC on for one test, shut down gracefully afterwards (if the test did not)."""
    rpc.init_rpc()
    yield ctx
    from hpcdist.rpc.agent import _AGENT
    if _AGENT:
        rpc.shutdown()


def test_results_from_every_rank(service):
    ctx = service
    with all_ranks(ctx, "rpc_sync"):
        for to in range(ctx.size):
            rank, args, kwargs = rpc.rpc_sync(to, whoami, (ctx.rank, "x"), {"k": [1, 2]})
            assert (rank, args, kwargs) == (to, (ctx.rank, "x"), {"k": [1, 2]})
            assert rpc.rpc_async(to, operator.mul, (to, 3)).result(timeout=30) == 3 * to


def test_registered_names(service):
    ctx = service
    rpc.register_function("test.scale", np.multiply)
    ctx.barrier()  # registered everywhere before anyone calls
    with all_ranks(ctx, "registered"):
        out = rpc.rpc_sync(_next(ctx), "test.scale", (np.arange(4), 2))
        np.testing.assert_array_equal(out, np.arange(4) * 2)
        with pytest.raises(rpc.RpcError, match=r"no function is registered as 'nope' on rank"):
            rpc.rpc_sync(_next(ctx), "nope")


def test_a_thousand_concurrent_calls(service):
    ctx = service
    with all_ranks(ctx, "1000 rpc_async"):
        futures = [rpc.rpc_async(i % ctx.size, operator.add, (i, ctx.rank)) for i in range(1000)]
        assert [f.result(timeout=60) for f in futures] == [i + ctx.rank for i in range(1000)]


def test_nested_chains_around_all_ranks(service):
    ctx = service
    hops = 3 * ctx.size + 1  # every rank's handlers wait on the next rank several times over
    with all_ranks(ctx, "chain"):
        visited = rpc.rpc_sync(_next(ctx), chain, (hops,))
        assert visited == [(ctx.rank + 1 + i) % ctx.size for i in range(hops + 1)]
        # handlers that wait on several ranks at once, themselves waited on from every rank
        out = rpc.rpc_sync(_next(ctx), fan_out, (10 * ctx.rank,))
        assert out == [10 * ctx.rank + r for r in range(ctx.size)]


def test_remote_exception(service):
    ctx = service
    with all_ranks(ctx, "remote exception"):
        with pytest.raises(rpc.RpcError) as caught:
            rpc.rpc_sync(_next(ctx), fail, (7,))
        error = caught.value
        assert isinstance(error, hpcdist.HpcdistError)
        assert error.remote_rank == _next(ctx)
        assert error.remote_type == "ValueError"
        assert error.remote_message == "bad value 7"
        assert "in fail" in error.remote_traceback
        text = str(error)
        assert f"rank {_next(ctx)}" in text and "ValueError: bad value 7" in text
        assert "tests.rpc.test_rpc.fail" in text and "in fail" in text
        future = rpc.rpc_async(_next(ctx), fail, ("async",))
        assert isinstance(future.exception(timeout=30), rpc.RpcError)


def test_timeouts(service):
    ctx = service
    with all_ranks(ctx, "timeout"):
        start = time.monotonic()
        with pytest.raises(rpc.RpcTimeoutError, match="did not answer within timeout=0.05"):
            rpc.rpc_sync(_next(ctx), slow, (0.5, 1), timeout=0.05)
        assert time.monotonic() - start < 0.45
        future = rpc.rpc_async(_next(ctx), slow, (0.5, 1), timeout=0.05)
        assert isinstance(future.exception(timeout=30), TimeoutError)
        assert rpc.rpc_sync(_next(ctx), slow, (0.0, 2), timeout=30) == 2


def test_a_late_reply_never_reaches_a_later_call(service):
    # a waiting caller receives the replies on its call's tag itself: the reply of a call
    # that timed out is dropped (and counted, so wait_all returns), never taken as the
    # answer of a later call
    ctx = service
    with all_ranks(ctx, "late reply"):
        with pytest.raises(rpc.RpcTimeoutError):
            rpc.rpc_sync(_next(ctx), slow, (0.2, "late"), timeout=0.01)
        deadline = time.monotonic() + 0.4
        answers = []
        while time.monotonic() < deadline:  # calls before, during and after the late reply
            answers.append(rpc.rpc_sync(_next(ctx), slow, (0.01, "fresh")))
        assert set(answers) == {"fresh"}
    rpc.wait_all()


def test_futures_complete_with_nobody_waiting_on_them(service):
    # replies nobody polls for are the service thread's: concurrent.futures.wait and
    # callbacks see the futures complete
    ctx = service
    with all_ranks(ctx, "futures.wait"):
        called = []
        futures = [rpc.rpc_async(i % ctx.size, operator.add, (i, 1)) for i in range(50)]
        futures[0].add_done_callback(called.append)
        done, not_done = concurrent.futures.wait(futures, timeout=30)
        assert not not_done
        assert [f.result() for f in futures] == [i + 1 for i in range(50)]
        assert called == [futures[0]]


def test_waiting_calls_from_many_threads(service):
    ctx = service
    results = {}

    def caller(thread):
        results[thread] = [rpc.rpc_sync((thread + i) % ctx.size, operator.add, (thread, i))
                           for i in range(50)]

    with all_ranks(ctx, "threads"):
        threads = [threading.Thread(target=caller, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == {t: [t + i for i in range(50)] for t in range(8)}


def test_reply_tags_skip_those_in_use(service):
    agent = current_agent()
    agent._largest_reply_tag = 3
    agent._tags_in_use.update({(0, 1), (0, 2)})
    try:
        assert [agent._free_reply_tag(0) for _ in range(3)] == [3, 3, 3]
        assert agent._free_reply_tag(1) in (1, 2, 3)
    finally:
        agent._tags_in_use.difference_update({(0, 1), (0, 2)})


def test_arrays_of_ten_million_elements(service):
    ctx = service
    x = np.arange(10**7, dtype=np.float32) * (ctx.rank + 1)
    with all_ranks(ctx, "1e7 elements"):
        negated, total = rpc.rpc_sync(_next(ctx), negate_and_sum, (x,))
        assert negated.dtype == np.float32 and negated.shape == (10**7,)
        assert negated[-1] == -x[-1] and negated[12345] == -x[12345]
        assert total == float(x.sum(dtype=np.float64))


def echo(x):
    return x


def test_large_results_kept_while_more_arrive(service):
    # received buffers of 1 MiB and more are reused once nothing refers to them: results
    # still held must keep theirs, and arguments held by a handler too
    ctx = service
    with all_ranks(ctx, "buffers reused"):
        kept = []
        for round_ in range(6):
            x = np.full(2**18, float(round_ + 100 * ctx.rank))  # 2 MiB, one size
            kept.append(rpc.rpc_sync(_next(ctx), echo, (x,)))
            if round_ % 2:
                kept.pop(0)  # drop one: its buffer may serve the next call
        for index, result in enumerate(kept):
            round_ = 3 + index
            assert result.shape == (2**18,)
            assert np.all(result == float(round_ + 100 * ctx.rank))


def test_remote_references(service):
    ctx = service
    with all_ranks(ctx, "remote"):
        rref = rpc.remote(_next(ctx), np.full, (3, ctx.rank))
        assert rref.owner == _next(ctx)
        np.testing.assert_array_equal(rref.to_here(), np.full(3, ctx.rank))
        value, owner = rpc.rpc_sync(rref.owner, local_value, (rref,))  # a borrowed copy
        assert owner and value.tolist() == [ctx.rank] * 3
        failing = rpc.remote(_next(ctx), fail, ("rref",))
        with pytest.raises(rpc.RpcError, match="bad value rref"):
            failing.to_here()
        del rref, failing
    ctx.barrier()
    # the values are freed on their owner once the RRefs that remote() returned are collected
    gc.collect()
    deadline = time.monotonic() + 10
    while rpc.rpc_sync(ctx.rank, values_held) and time.monotonic() < deadline:
        time.sleep(0.01)
    ctx.barrier()
    held = rpc.rpc_sync(ctx.rank, values_held)
    ctx.barrier()
    assert_on_all_ranks(held == 0, f"{held} values not freed")


def test_shutdown_waits_for_calls_in_flight(service):
    ctx = service
    futures = [rpc.rpc_async(_next(ctx), slow, (0.01 * (i % 5), i)) for i in range(40)]
    chains = [rpc.rpc_async(_next(ctx), chain, (2 * ctx.size,)) for _ in range(3)]
    rpc.shutdown(graceful=True)  # returns only when every rank's calls are answered
    with all_ranks(ctx, "shutdown"):
        assert all(f.done() for f in futures + chains)
        assert [f.result() for f in futures] == list(range(40))
        assert all(len(f.result()) == 2 * ctx.size + 1 for f in chains)
        with pytest.raises(rpc.RpcError, match="not initialised"):
            rpc.rpc_sync(0, whoami)


def test_argument_errors(service):
    ctx = service
    with all_ranks(ctx, "argument errors"):
        with pytest.raises(hpcdist.InvalidArgumentError, match=f"to={ctx.size} should be"):
            rpc.rpc_sync(ctx.size, whoami)
        with pytest.raises(hpcdist.InvalidArgumentTypeError, match="to='0'"):
            rpc.rpc_async("0", whoami)
        with pytest.raises(hpcdist.InvalidArgumentTypeError, match="args=3"):
            rpc.rpc_sync(0, whoami, 3)
        with pytest.raises(hpcdist.InvalidArgumentError, match="timeout=0"):
            rpc.rpc_sync(0, whoami, timeout=0)
        with pytest.raises(rpc.RpcError, match="cannot be pickled"):
            rpc.rpc_sync(0, lambda: 1)
        with pytest.raises(hpcdist.InvalidStateError, match="already initialised"):
            rpc.init_rpc()
        with pytest.raises(hpcdist.InvalidArgumentTypeError, match="not callable"):
            rpc.register_function("x", 3)


test_results_from_every_rank_mpi = mpi_twin(test_results_from_every_rank)
test_registered_names_mpi = mpi_twin(test_registered_names)
test_a_thousand_concurrent_calls_mpi = mpi_twin(test_a_thousand_concurrent_calls)
test_nested_chains_around_all_ranks_mpi = mpi_twin(test_nested_chains_around_all_ranks)
test_remote_exception_mpi = mpi_twin(test_remote_exception)
test_timeouts_mpi = mpi_twin(test_timeouts)
test_a_late_reply_never_reaches_a_later_call_mpi = mpi_twin(
    test_a_late_reply_never_reaches_a_later_call)
test_waiting_calls_from_many_threads_mpi = mpi_twin(test_waiting_calls_from_many_threads)
test_futures_complete_with_nobody_waiting_on_them_mpi = mpi_twin(
    test_futures_complete_with_nobody_waiting_on_them)
test_arrays_of_ten_million_elements_mpi = mpi_twin(test_arrays_of_ten_million_elements)
test_remote_references_mpi = mpi_twin(test_remote_references)
test_large_results_kept_while_more_arrive_mpi = mpi_twin(test_large_results_kept_while_more_arrive)
test_shutdown_waits_for_calls_in_flight_mpi = mpi_twin(test_shutdown_waits_for_calls_in_flight)
test_argument_errors_mpi = mpi_twin(test_argument_errors)
