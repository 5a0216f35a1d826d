"""Point-to-point: send / recv with shapes, dtypes, tags and sources."""
import numpy as np
import pytest

import hpcdist
from tests.helpers import all_ranks, check_array
from tests.reference import BFLOAT16, dtype_name, make_input

pytestmark = pytest.mark.mpi(min_size=2)

DTYPES = [np.float64, np.float32, np.int8, np.uint64, np.bool_, BFLOAT16,
          np.float16, np.complex64, np.longdouble]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shape", [(10,), (3, 4, 2), (0,), (4, 0), ()])
def test_send_recv_new_array(ctx, dtype, shape):
    data = make_input(0, shape, dtype, seed=301)
    got = None
    if ctx.rank == 0:
        assert hpcdist.send(data.copy(), 1, tag=3) is None
    elif ctx.rank == 1:
        got = hpcdist.recv(source=0, tag=3)
    with all_ranks(f"{dtype_name(dtype)}{list(shape)}"):
        if ctx.rank == 1:
            check_array(got, data, dtype=dtype, rtol=0, atol=0)


@pytest.mark.parametrize("shape", [(5, 3), (700, 3)], ids=["inline", "after the header"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, BFLOAT16], ids=dtype_name)
def test_send_recv_into_out(ctx, dtype, shape):
    data = make_input(1, shape, dtype, seed=302)
    got = out = None
    if ctx.rank == 1:
        hpcdist.send(data, 0)
    elif ctx.rank == 0:
        out = np.zeros(shape, dtype=dtype)
        got = hpcdist.recv(source=1, out=out)
    with all_ranks():
        if ctx.rank == 0:
            assert got is out, "recv(out=...) must fill and return out"
            check_array(out, data, dtype=dtype, rtol=0, atol=0)


def test_send_non_contiguous(ctx):
    base = np.arange(48, dtype=np.float64).reshape(6, 8)
    view = base[::2, 1::3]
    got = None
    if ctx.rank == 0:
        hpcdist.send(view, 1)
    elif ctx.rank == 1:
        got = hpcdist.recv(source=0)
    with all_ranks():
        if ctx.rank == 1:
            check_array(got, np.ascontiguousarray(view))


def test_recv_defaults_any_source_any_tag(ctx):
    got = None
    if ctx.rank == ctx.size - 1:
        hpcdist.send(np.array([42, 43], dtype=np.int32), 0, tag=17)
    elif ctx.rank == 0:
        got = hpcdist.recv()
    with all_ranks():
        if ctx.rank == 0:
            check_array(got, np.array([42, 43], dtype=np.int32))
    got = None
    if ctx.rank == 1:
        hpcdist.send(np.array([1.5]), 0)
    elif ctx.rank == 0:
        got = hpcdist.recv(source=hpcdist.ANY_SOURCE, tag=hpcdist.ANY_TAG)
    with all_ranks():
        if ctx.rank == 0:
            check_array(got, np.array([1.5]))


def test_many_to_one_any_source(ctx):
    received = []
    if ctx.rank == 0:
        for _ in range(ctx.size - 1):
            received.append(hpcdist.recv(source=hpcdist.ANY_SOURCE, tag=9))
    else:
        hpcdist.send(np.full(ctx.rank, ctx.rank, dtype=np.int64), 0, tag=9)
    with all_ranks():
        if ctx.rank == 0:
            seen = sorted(int(a[0]) for a in received)
            assert seen == list(range(1, ctx.size)), seen
            for a in received:
                check_array(a, np.full(int(a[0]), a[0], dtype=np.int64))


def test_tags_select_messages(ctx):
    got = {}
    if ctx.rank == 0:
        r5 = hpcdist.isend(np.array([5.0, 5.0]), 1, tag=5)
        r7 = hpcdist.isend(np.array([7, 7, 7], dtype=np.int16), 1, tag=7)
        r5.wait()
        r7.wait()
    elif ctx.rank == 1:
        got[7] = hpcdist.recv(source=0, tag=7)
        got[5] = hpcdist.recv(source=0, tag=5)
    with all_ranks():
        if ctx.rank == 1:
            check_array(got[7], np.array([7, 7, 7], dtype=np.int16))
            check_array(got[5], np.array([5.0, 5.0]))


def test_ring_exchange(ctx):
    right = (ctx.rank + 1) % ctx.size
    left = (ctx.rank - 1) % ctx.size
    mine = make_input(ctx.rank, (2 + ctx.rank, 3), np.float32, seed=303)
    req = hpcdist.isend(mine, right, tag=1)
    got = hpcdist.recv(source=left, tag=1)
    req.wait()
    with all_ranks():
        check_array(got, make_input(left, (2 + left, 3), np.float32, seed=303), rtol=0, atol=0)


def test_ctx_methods(ctx):
    got = None
    if ctx.rank == 0:
        ctx.send(np.arange(3), 1, tag=2)
    elif ctx.rank == 1:
        got = ctx.recv(source=0, tag=2)
    with all_ranks():
        if ctx.rank == 1:
            check_array(got, np.arange(3))


# ------------------------------------------------------------------ shape_known=True
def _ring_known(ctx, data, out, *, nonblocking=False):
    """Rank r sends ``data`` to r + 1 and receives into ``out`` from r - 1, headerless."""
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    if nonblocking:
        request = hpcdist.irecv(source=left, tag=5, out=out, shape_known=True)
        hpcdist.isend(data, right, tag=5, shape_known=True).wait()
        return request.wait()
    if ctx.rank % 2 == 0:
        hpcdist.send(data, right, tag=5, shape_known=True)
        return hpcdist.recv(source=left, tag=5, out=out, shape_known=True)
    got = hpcdist.recv(source=left, tag=5, out=out, shape_known=True)
    hpcdist.send(data, right, tag=5, shape_known=True)
    return got


@pytest.fixture(params=[False, True], ids=["unchecked", "checked"])
def either_mode(request, ctx):
    """The test once without and once with check mode (the header path that verifies)."""
    old, ctx.check = ctx.check, request.param
    yield
    ctx.check = old


@pytest.mark.parametrize("nonblocking", [False, True], ids=["blocking", "nonblocking"])
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_name)
@pytest.mark.parametrize("shape", [(10,), (3, 4, 2), (0,)])
def test_send_recv_shape_known(ctx, dtype, shape, nonblocking, either_mode):
    left = (ctx.rank - 1) % ctx.size
    data = make_input(ctx.rank, shape, dtype, seed=311)
    out = np.zeros(shape, dtype=dtype)
    got = _ring_known(ctx, data, out, nonblocking=nonblocking)
    with all_ranks(f"{dtype_name(dtype)}{list(shape)} check={ctx.check}"):
        assert got is out
        check_array(out, make_input(left, shape, dtype, seed=311), dtype=dtype, rtol=0, atol=0)


def test_send_recv_shape_known_non_contiguous(ctx):
    base = np.zeros((6, 8))
    out = base[::2, 1::3]  # filled in place through a contiguous buffer
    data = np.arange(out.size, dtype=np.float64).reshape(out.shape) + ctx.rank
    got = _ring_known(ctx, data[:, ::-1].copy()[:, ::-1], out)
    with all_ranks():
        assert got is out
        check_array(base[::2, 1::3], data - ctx.rank + (ctx.rank - 1) % ctx.size)
        assert base[1::2].sum() == 0


def test_shape_known_needs_out_and_an_array(ctx):
    with all_ranks("recv without out"):
        with pytest.raises(TypeError, match=r"recv\(shape_known=True\).*out="):
            hpcdist.recv(source=0, shape_known=True)
        with pytest.raises(TypeError, match=r"irecv\(shape_known=True\).*out="):
            hpcdist.irecv(source=0, shape_known=True)
        with pytest.raises(TypeError, match=r"send\(shape_known=True\).*scalar"):
            hpcdist.send(3.0, 0, shape_known=True)


def test_shape_known_promise_is_verified_in_check_mode(ctx, check_mode):
    right, left = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    n = 4 if ctx.rank == 0 else 3  # rank 0 sends 4 elements: rank 1 expects 3
    out = np.zeros(3, dtype=np.float32)
    error = None
    hpcdist.isend(np.zeros(n, dtype=np.float32), right, tag=6, shape_known=True)
    try:
        hpcdist.recv(source=left, tag=6, out=out, shape_known=True)
    except hpcdist.CollectiveMismatchError as exc:
        error = str(exc)
    with all_ranks("promise"):
        if ctx.rank == 1:
            assert error is not None and "float32[3]" in error and "float32[4]" in error
            assert "rank 0 sent" in error
        else:
            assert error is None
    _ring_known(ctx, np.ones(2), np.zeros(2))  # still in step


@pytest.mark.parametrize("nbytes", [4096, 4100, 20_000, 200_000])
def test_self_describing_messages_around_the_inline_size(ctx, nbytes):
    """Small arrays ride inside the header's message, larger ones follow it."""
    data = np.arange(nbytes, dtype=np.uint8) ^ 0x5A
    got = got_nonblocking = out = None
    if ctx.rank == 0:
        hpcdist.send(data, 1, tag=7)
        hpcdist.isend(data, 1, tag=8).wait()
    elif ctx.rank == 1:
        got = hpcdist.recv(source=0, tag=7)
        out = np.zeros(nbytes, dtype=np.uint8)
        got_nonblocking = hpcdist.irecv(source=0, tag=8, out=out).wait()
    with all_ranks(f"{nbytes} bytes"):
        if ctx.rank == 1:
            check_array(got, data)
            assert got_nonblocking is out
            check_array(out, data)
