"""Non-blocking operations: Request.wait() / Request.test()."""
import time

import numpy as np
import pytest

import hpcdist
from tests.helpers import all_ranks, check_array
from tests.reference import dtype_name, make_input, reference_reduce

pytestmark = pytest.mark.mpi


def _poll(req, deadline_s=60.0):
    """test() until True; returns the number of polls, or None on timeout."""
    polls = 0
    end = time.monotonic() + deadline_s
    while True:
        polls += 1
        flag = req.test()
        assert isinstance(flag, bool), f"test() returned {type(flag).__name__}"
        if flag:
            return polls
        if time.monotonic() > end:
            return None
        time.sleep(0.0005)


@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64], ids=dtype_name)
def test_iallreduce_wait(ctx, op, dtype):
    if op == "mean" and dtype is np.int64:
        pytest.skip("mean on integers is a TypeError")
    inputs = [make_input(r, (33,), dtype, seed=401, op=op) for r in range(ctx.size)]
    req = hpcdist.iallreduce(inputs[ctx.rank].copy(), op)
    out = req.wait()
    with all_ranks():
        check_array(out, reference_reduce(inputs, op), dtype=dtype)


def test_iallreduce_test_then_wait(ctx):
    inputs = [make_input(r, (1000,), np.float64, seed=402) for r in range(ctx.size)]
    req = hpcdist.iallreduce(inputs[ctx.rank].copy(), "sum")
    polls = _poll(req)
    out = req.wait()
    with all_ranks():
        assert polls is not None, "test() never returned True"
        check_array(out, reference_reduce(inputs, "sum"))


def test_iallreduce_default_op_and_ctx_method(ctx):
    x = np.full(4, ctx.rank, dtype=np.int32)
    a = hpcdist.iallreduce(x)
    b = ctx.iallreduce(x, "max")
    ra, rb = a.wait(), b.wait()
    with all_ranks():
        check_array(ra, np.full(4, ctx.size * (ctx.size - 1) // 2, dtype=np.int32))
        check_array(rb, np.full(4, ctx.size - 1, dtype=np.int32))


def test_several_outstanding_waited_in_reverse(ctx):
    xs = [np.full(8, (ctx.rank + 1) * (i + 1), dtype=np.int64) for i in range(4)]
    reqs = [hpcdist.iallreduce(x, "sum") for x in xs]
    results = [req.wait() for req in reversed(reqs)][::-1]
    tri = ctx.size * (ctx.size + 1) // 2
    with all_ranks():
        for i, r in enumerate(results):
            check_array(r, np.full(8, tri * (i + 1), dtype=np.int64))


def test_iallreduce_zero_size(ctx):
    out = hpcdist.iallreduce(np.zeros((0, 3)), "sum").wait()
    with all_ranks():
        check_array(out, np.zeros((0, 3)))


@pytest.mark.parametrize("mode", ["buffer", "none"])
@pytest.mark.parametrize("root", ["first", "last"])
def test_ibroadcast(ctx, mode, root):
    root = 0 if root == "first" else ctx.size - 1
    data = make_input(root, (6, 2), np.float32, seed=403)
    if ctx.rank == root:
        x = data.copy()
    else:
        x = np.zeros_like(data) if mode == "buffer" else None
    req = hpcdist.ibroadcast(x, root=root)
    polls = _poll(req)
    out = req.wait()
    with all_ranks():
        assert polls is not None
        check_array(out, data)
        if mode == "buffer" and ctx.rank != root:
            check_array(x, data)


@pytest.mark.parametrize("axis", [0, 1])
def test_iallgather(ctx, axis):
    pieces = []
    for r in range(ctx.size):
        shape = (r + 1, 3) if axis == 0 else (3, r + 1)
        pieces.append(make_input(r, shape, np.int32, seed=404))
    req = hpcdist.iallgather(pieces[ctx.rank].copy(), axis=axis)
    polls = _poll(req)
    out = req.wait()
    with all_ranks():
        assert polls is not None
        check_array(out, np.concatenate(pieces, axis=axis))


def test_iallgather_default_axis_wait_only(ctx):
    pieces = [np.full(r, r, dtype=np.float64) for r in range(ctx.size)]
    out = hpcdist.iallgather(pieces[ctx.rank]).wait()
    with all_ranks():
        check_array(out, np.concatenate(pieces))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("with_out", [False, True])
def test_isend_irecv_ring(ctx, with_out):
    right = (ctx.rank + 1) % ctx.size
    left = (ctx.rank - 1) % ctx.size
    mine = make_input(ctx.rank, (5, 2), np.float64, seed=405)
    out = np.empty((5, 2)) if with_out else None
    rreq = (hpcdist.irecv(source=left, tag=4, out=out) if with_out
            else hpcdist.irecv(source=left, tag=4))
    sreq = hpcdist.isend(mine, right, tag=4)
    polls = _poll(rreq)
    got = rreq.wait()
    sreq.wait()
    with all_ranks():
        assert polls is not None
        check_array(got, make_input(left, (5, 2), np.float64, seed=405), rtol=0, atol=0)
        if with_out:
            assert got is out


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("form", ["irecv_isend", "irecv_known_then_blocking_send"])
def test_ring_exchange_of_large_arrays_in_the_documented_forms(ctx, form):
    """1 MiB to the right, from the left, in both forms irecv's docstring names (a
    self-describing irecv waited on after its rank's send would wait on every rank)."""
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    mine = make_input(ctx.rank, (512, 256), np.float64, seed=406)
    if form == "irecv_isend":
        received = hpcdist.irecv(source=left, tag=5)
        sent = hpcdist.isend(mine, right, tag=5)
        got = received.wait()
        sent.wait()
    else:
        received = hpcdist.irecv(source=left, tag=5, out=np.empty_like(mine),
                                 shape_known=True)
        hpcdist.send(mine, right, tag=5, shape_known=True)
        got = received.wait()
    with all_ranks(form):
        check_array(got, make_input(left, (512, 256), np.float64, seed=406), rtol=0, atol=0)


@pytest.mark.mpi(min_size=2)
def test_isend_test_and_irecv_any_source(ctx):
    got = None
    if ctx.rank == 1:
        req = hpcdist.isend(np.arange(4, dtype=np.uint16), 0, tag=12)
        polls = _poll(req)
        req.wait()
    elif ctx.rank == 0:
        req = hpcdist.irecv()
        polls = _poll(req)
        got = req.wait()
    else:
        polls = 0
    with all_ranks():
        assert polls is not None
        if ctx.rank == 0:
            check_array(got, np.arange(4, dtype=np.uint16))


def test_overlap_with_blocking_collective(ctx):
    x = np.full(10, float(ctx.rank))
    req = hpcdist.iallreduce(x, "sum")
    n = 2 * ctx.size
    b = hpcdist.allreduce(np.ones(n), "sum")
    r = req.wait()
    with all_ranks():
        check_array(b, np.full(n, float(ctx.size)))
        check_array(r, np.full(10, ctx.size * (ctx.size - 1) / 2))
