"""Device arrays through a fake backend: direct (CUDA-aware) and staged paths.

``FakeDeviceArray`` keeps its data in host memory and has no ``__array__``,
so hpcdist must go through the registered backend (staging) or hand the
``__cuda_array_interface__`` to MPI (direct). Results must come back as
``FakeDeviceArray``.
"""
import os

import numpy as np
import pytest

import hpcdist
import hpcdist.comm.devices as devices
from tests.fake_device import FakeBackend, FakeDeviceArray
from tests.helpers import all_ranks, check_array
from tests.reference import balanced_counts, dtype_name, make_input, reference_reduce, split_blocks


@pytest.fixture(scope="module")
def backend():
    b = FakeBackend()
    devices.register_backend(b)
    yield b
    devices.unregister_backend(b)


@pytest.fixture(scope="module", params=["staged", "direct"])
def dctx(request, ctx, backend):
    """A fresh context with HPCDIST_CUDA_AWARE forced to 0 (staged) or 1 (direct)."""
    mode = request.param
    os.environ["HPCDIST_CUDA_AWARE"] = "0" if mode == "staged" else "1"
    try:
        sub = ctx.split(0)
    finally:
        del os.environ["HPCDIST_CUDA_AWARE"]
    return mode, sub


def _dev(a):
    return FakeDeviceArray(a)


def _check_dev(result, expected, dtype=None, what="result"):
    assert isinstance(result, FakeDeviceArray), (
        f"{what}: expected FakeDeviceArray, got {type(result).__name__}")
    check_array(result._host, expected, dtype=dtype, what=what)


def test_fake_array_has_no_array_protocol():
    a = FakeDeviceArray(np.arange(3.0))
    assert not hasattr(a, "__array__")
    assert a.__cuda_array_interface__["shape"] == (3,)


@pytest.mark.mpi
def test_mode_flag(dctx):
    mode, sub = dctx
    with all_ranks():
        assert sub.cuda_aware is (mode == "direct")


@pytest.mark.mpi
@pytest.mark.parametrize("op", ["sum", "max", "mean", "prod"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.complex128],
                         ids=dtype_name)
def test_allreduce(dctx, op, dtype):
    mode, sub = dctx
    if (op == "mean" and dtype is np.int64) or (op == "max" and dtype is np.complex128):
        pytest.skip("TypeError combination")
    inputs = [make_input(r, (4, 6), dtype, seed=601, op=op) for r in range(sub.size)]
    x = _dev(inputs[sub.rank])
    out = hpcdist.allreduce(x, op, ctx=sub)
    with all_ranks(f"{mode} allreduce"):
        _check_dev(out, reference_reduce(inputs, op), dtype=dtype)
        assert out is not x
        np.testing.assert_array_equal(x._host, inputs[sub.rank])


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["ring", "tree", "hierarchical"])
def test_allreduce_algorithms(dctx, algorithm):
    mode, sub = dctx
    n = 3 * sub.size + 1
    inputs = [make_input(r, (n,), np.float64, seed=602) for r in range(sub.size)]
    out = sub.allreduce(_dev(inputs[sub.rank]), "sum", algorithm=algorithm)
    with all_ranks(f"{mode} {algorithm}"):
        _check_dev(out, reference_reduce(inputs, "sum"))


@pytest.mark.mpi
def test_allreduce_out_and_in_place(dctx):
    mode, sub = dctx
    x = _dev(np.full(5, sub.rank + 1.0))
    out = _dev(np.zeros(5))
    r1 = sub.allreduce(x, "sum", out=out)
    r2 = sub.allreduce(x, "max", out=x)
    with all_ranks(mode):
        assert r1 is out and r2 is x
        _check_dev(out, np.full(5, sub.size * (sub.size + 1) / 2))
        _check_dev(x, np.full(5, float(sub.size)))


@pytest.mark.mpi
def test_nonblocking_allreduces_in_flight_together_keep_their_own_results(dctx):
    mode, sub = dctx
    arrays = [_dev(np.full(7, (sub.rank + 1.0) * (i + 1))) for i in range(3)]
    requests = [sub.iallreduce(x, "sum", out=x) for x in arrays]
    results = [request.wait() for request in requests]
    total = sub.size * (sub.size + 1) / 2
    with all_ranks(mode):
        for i, (x, result) in enumerate(zip(arrays, results)):
            assert result is x
            _check_dev(x, np.full(7, total * (i + 1)), what=f"request {i}")


@pytest.mark.mpi
@pytest.mark.parametrize("root", ["first", "last"])
def test_broadcast(dctx, root):
    mode, sub = dctx
    root = 0 if root == "first" else sub.size - 1
    data = make_input(root, (3, 7), np.float32, seed=603)
    x = _dev(data) if sub.rank == root else _dev(np.zeros((3, 7), np.float32))
    out = sub.broadcast(x, root=root)
    with all_ranks(mode):
        assert out is x
        _check_dev(out, data)


@pytest.mark.mpi
@pytest.mark.parametrize("axis", [0, 1])
def test_allgather(dctx, axis):
    mode, sub = dctx
    pieces = [make_input(r, (r + 1, 3) if axis == 0 else (3, r + 1), np.int32, seed=604)
              for r in range(sub.size)]
    out = sub.allgather(_dev(pieces[sub.rank]), axis=axis)
    with all_ranks(mode):
        _check_dev(out, np.concatenate(pieces, axis=axis))


@pytest.mark.mpi
def test_reduce_scatter(dctx):
    mode, sub = dctx
    n = 2 * sub.size + 1
    inputs = [make_input(r, (n, 2), np.float64, seed=605) for r in range(sub.size)]
    out = sub.reduce_scatter(_dev(inputs[sub.rank]), "sum")
    full = reference_reduce(inputs, "sum")
    with all_ranks(mode):
        _check_dev(out, split_blocks(full, balanced_counts(n, sub.size))[sub.rank])


@pytest.mark.mpi(min_size=2)
def test_send_recv(dctx):
    mode, sub = dctx
    data = make_input(0, (4, 4), np.float64, seed=606)
    got = out = None
    if sub.rank == 0:
        sub.send(_dev(data), 1, tag=6)
    elif sub.rank == 1:
        out = _dev(np.zeros((4, 4)))
        got = sub.recv(source=0, tag=6, out=out)
    with all_ranks(mode):
        if sub.rank == 1:
            assert got is out
            _check_dev(got, data)


@pytest.mark.mpi
def test_staging_buffers_are_reused(dctx, backend):
    mode, sub = dctx
    n = 1000
    x = _dev(np.full(n, float(sub.rank)))
    sub.allreduce(x, "sum")
    sub.broadcast(_dev(np.ones(n)), root=0)
    first = sub.staging.allocations
    copies = backend.to_host_calls
    for _ in range(5):
        out = sub.allreduce(x, "sum")
        sub.broadcast(_dev(np.ones(n)), root=0)
    later = sub.staging.allocations
    with all_ranks(f"{mode} staging"):
        _check_dev(out, np.full(n, sub.size * (sub.size - 1) / 2))
        assert later == first, f"staging pool grew from {first} to {later} buffers"
        if mode == "staged":
            assert first >= 1, "staged mode allocated no staging buffer"
            assert backend.to_host_calls > copies, "staged mode never copied to host"
        else:
            assert later == 0, f"direct mode allocated {later} staging buffers"


@pytest.mark.mpi
def test_direct_mode_passes_device_buffers_to_mpi(dctx, backend):
    mode, sub = dctx
    if mode != "direct":
        pytest.skip("direct (CUDA-aware) mode only")
    # large enough that no small-message optimisation applies (32 KiB)
    n = 4096
    before = backend.to_host_calls
    out = sub.allreduce(_dev(np.ones(n)), "sum")
    b = sub.broadcast(_dev(np.ones(n)), root=0)
    after = backend.to_host_calls
    with all_ranks():
        _check_dev(out, np.full(n, float(sub.size)))
        _check_dev(b, np.ones(n))
        assert after == before, f"{after - before} device->host copies in direct mode"


def test_single_process_device_arrays(ctx, backend):
    if ctx.size != 1:
        pytest.skip("serial only")
    for mode in ("0", "1"):
        os.environ["HPCDIST_CUDA_AWARE"] = mode
        try:
            sub = ctx.split(0)
        finally:
            del os.environ["HPCDIST_CUDA_AWARE"]
        x = _dev(np.arange(6.0).reshape(2, 3))
        _check_dev(sub.allreduce(x, "sum"), np.arange(6.0).reshape(2, 3))
        _check_dev(sub.allgather(x), np.arange(6.0).reshape(2, 3))
        _check_dev(sub.broadcast(x, root=0), np.arange(6.0).reshape(2, 3))
