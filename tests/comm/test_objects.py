"""Object collectives: allreduce_object, broadcast_object, allgather_object, gather_object."""
import threading
import time

import numpy as np
import pytest

import hpcdist
from tests.helpers import all_ranks, check_scalar

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("op,expected", [
    ("sum", lambda n: n * (n + 1) // 2),
    ("max", lambda n: n),
    ("min", lambda n: 1),
    ("prod", lambda n: int(np.prod(np.arange(1, n + 1)))),
])
def test_allreduce_object_ints(ctx, op, expected):
    out = hpcdist.allreduce_object(ctx.rank + 1, op)
    with all_ranks(op):
        check_scalar(out, expected(ctx.size), int)


def test_allreduce_object_default_op_is_sum(ctx):
    out = hpcdist.allreduce_object(2)
    with all_ranks():
        assert out == 2 * ctx.size


def test_allreduce_object_big_int(ctx):
    # Python ints do not overflow
    out = hpcdist.allreduce_object(2 ** 70 + ctx.rank, "sum")
    with all_ranks():
        assert out == ctx.size * 2 ** 70 + ctx.size * (ctx.size - 1) // 2


def test_allreduce_object_floats_and_mean(ctx):
    n = ctx.size
    s = hpcdist.allreduce_object(ctx.rank + 0.25, "sum")
    m = hpcdist.allreduce_object(ctx.rank, "mean")
    mf = hpcdist.allreduce_object(float(ctx.rank), hpcdist.ReduceOp.MEAN)
    with all_ranks():
        assert abs(s - (n * (n - 1) / 2 + 0.25 * n)) < 1e-12
        assert abs(m - (n - 1) / 2) < 1e-12, m
        assert abs(mf - (n - 1) / 2) < 1e-12, mf


def test_allreduce_object_combines_in_rank_order_the_same_on_every_rank(ctx):
    words = hpcdist.allreduce_object([f"r{ctx.rank}"], "sum")  # list + list: order shows
    lowest = hpcdist.allreduce_object((ctx.rank % 2, -ctx.rank), "min")
    with all_ranks():
        assert words == [f"r{r}" for r in range(ctx.size)], words
        assert lowest == (0, -(ctx.size - 1 - (ctx.size - 1) % 2)), lowest


def test_allreduce_object_lets_other_threads_run_while_it_waits(ctx):
    """mpi4py's object allreduce keeps the GIL while it waits; hpcdist's must not (the
    stall watchdog and an RPC service are threads)."""
    ticks, stop = [0], threading.Event()

    def tick():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.005)

    ctx.barrier()
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    if ctx.rank != 0:
        time.sleep(0.5)  # rank 0 waits for the others inside the call
    before = ticks[0]
    hpcdist.allreduce_object(1, "sum")
    during = ticks[0] - before
    stop.set()
    ticker.join()
    with all_ranks():
        assert ctx.rank != 0 or during >= 10, f"the thread ticked {during} times in 0.5 s"


def test_allreduce_object_unknown_op(ctx):
    from tests.helpers import expect_error
    expect_error(ValueError, hpcdist.allreduce_object, 1, "median", match="median")


@pytest.mark.parametrize("root", ["first", "last"])
def test_broadcast_object(ctx, root):
    root = 0 if root == "first" else ctx.size - 1
    payload = {"a": [1, 2.5, "x"], "b": (None, True), "arr": np.arange(3), "root": root}
    out = hpcdist.broadcast_object(payload if ctx.rank == root else None, root=root)
    with all_ranks():
        assert out["a"] == [1, 2.5, "x"] and out["b"] == (None, True)
        assert out["root"] == root
        np.testing.assert_array_equal(out["arr"], np.arange(3))


def test_broadcast_object_default_root(ctx):
    out = hpcdist.broadcast_object("hello" if ctx.rank == 0 else "ignored")
    with all_ranks():
        assert out == "hello"


def test_allgather_object(ctx):
    out = hpcdist.allgather_object({"rank": ctx.rank, "sq": ctx.rank ** 2})
    with all_ranks():
        assert isinstance(out, list)
        assert out == [{"rank": r, "sq": r * r} for r in range(ctx.size)]


def test_allgather_object_ctx_method(ctx):
    out = ctx.allgather_object(str(ctx.rank) * ctx.rank)
    with all_ranks():
        assert out == [str(r) * r for r in range(ctx.size)]


@pytest.mark.parametrize("root", ["first", "last"])
def test_gather_object(ctx, root):
    root = 0 if root == "first" else ctx.size - 1
    out = hpcdist.gather_object(("r", ctx.rank), root=root)
    with all_ranks():
        if ctx.rank == root:
            assert isinstance(out, list)
            assert out == [("r", r) for r in range(ctx.size)]
        else:
            assert out is None


def test_gather_object_default_root(ctx):
    out = hpcdist.gather_object(ctx.rank)
    with all_ranks():
        assert out == (list(range(ctx.size)) if ctx.rank == 0 else None)
