"""Real CuPy arrays (needs CuPy and a CUDA GPU; skipped elsewhere).

Run serially and under ``mpiexec -n N ... --with-mpi`` on a GPU node; the
same checks as test_devices.py, with cupy.ndarray instead of the fake type.
"""
import os

import numpy as np
import pytest

cp = pytest.importorskip("cupy")

import hpcdist  # noqa: E402
from tests.helpers import all_ranks, check_array  # noqa: E402
from tests.reference import balanced_counts, make_input, reference_reduce, split_blocks  # noqa: E402


def _gpu_count():
    try:
        return cp.cuda.runtime.getDeviceCount()
    except Exception:  # noqa: BLE001 - no driver / no device
        return 0


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_gpu_count() == 0, reason="no CUDA GPU visible"),
]


@pytest.fixture(scope="module", params=["staged", "direct"])
def gctx(request, ctx):
    mode = request.param
    os.environ["HPCDIST_CUDA_AWARE"] = "0" if mode == "staged" else "auto"
    try:
        sub = ctx.split(0)
    finally:
        del os.environ["HPCDIST_CUDA_AWARE"]
    if mode == "direct" and not sub.cuda_aware:
        pytest.skip("MPI library is not CUDA-aware")
    cp.cuda.Device(ctx.local_rank % _gpu_count()).use()
    return mode, sub


def _check_gpu(result, expected, what="result"):
    assert isinstance(result, cp.ndarray), f"{what}: got {type(result).__name__}"
    check_array(cp.asnumpy(result), expected, what=what)


def test_device_selected(ctx):
    assert ctx.device == f"cuda:{ctx.local_rank % _gpu_count()}"
    assert ctx.xp is cp


def test_allreduce_single_process(ctx):
    if ctx.size != 1:
        pytest.skip("serial only")
    x = cp.arange(10, dtype=cp.float32)
    _check_gpu(hpcdist.allreduce(x, "sum"), np.arange(10, dtype=np.float32))


@pytest.mark.mpi
@pytest.mark.parametrize("op", ["sum", "max", "mean"])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "tree", "hierarchical"])
def test_allreduce(gctx, op, algorithm):
    mode, sub = gctx
    inputs = [make_input(r, (257,), np.float32, seed=701, op=op) for r in range(sub.size)]
    out = sub.allreduce(cp.asarray(inputs[sub.rank]), op, algorithm=algorithm)
    cp.cuda.get_current_stream().synchronize()
    with all_ranks(f"{mode} {algorithm}"):
        _check_gpu(out, reference_reduce(inputs, op))


@pytest.mark.mpi
def test_broadcast_allgather_reduce_scatter(gctx):
    mode, sub = gctx
    data = make_input(0, (5, 3), np.float64, seed=702)
    x = cp.asarray(data) if sub.rank == 0 else cp.zeros((5, 3))
    b = sub.broadcast(x, root=0)
    pieces = [make_input(r, (r + 1, 2), np.int32, seed=703) for r in range(sub.size)]
    g = sub.allgather(cp.asarray(pieces[sub.rank]))
    n = 2 * sub.size + 1
    rs_in = [make_input(r, (n,), np.float64, seed=704) for r in range(sub.size)]
    rs = sub.reduce_scatter(cp.asarray(rs_in[sub.rank]), "sum")
    with all_ranks(mode):
        assert b is x
        _check_gpu(b, data)
        _check_gpu(g, np.concatenate(pieces))
        _check_gpu(rs, split_blocks(reference_reduce(rs_in, "sum"),
                                    balanced_counts(n, sub.size))[sub.rank])


@pytest.mark.mpi(min_size=2)
def test_send_recv(gctx):
    mode, sub = gctx
    got = out = None
    if sub.rank == 0:
        sub.send(cp.arange(12.0).reshape(3, 4), 1)
    elif sub.rank == 1:
        out = cp.zeros((3, 4))
        got = sub.recv(source=0, out=out)
    with all_ranks(mode):
        if sub.rank == 1:
            assert got is out
            _check_gpu(got, np.arange(12.0).reshape(3, 4))


@pytest.mark.mpi
def test_staging_reuse(gctx):
    mode, sub = gctx
    x = cp.ones(4096, dtype=cp.float32)
    sub.allreduce(x, "sum")
    first = sub.staging.allocations
    for _ in range(5):
        out = sub.allreduce(x, "sum")
    with all_ranks(mode):
        assert sub.staging.allocations == first
        _check_gpu(out, np.full(4096, float(sub.size), dtype=np.float32))


@pytest.mark.mpi
def test_staged_results_are_not_overwritten_by_the_next_call(gctx):
    """Results copied to the device asynchronously from the staging buffers stay
    right when the next calls reuse those buffers at once (no synchronisation between)."""
    mode, sub = gctx
    n = 1 << 22  # 16 MiB: long copies
    inputs = [cp.full(n, float(i + 1), dtype=cp.float32) for i in range(4)]
    results = [sub.allreduce(x, "sum") for x in inputs]
    received = [sub.broadcast(cp.full(n, float(i), dtype=cp.float32) if sub.rank == 0
                              else cp.empty(n, dtype=cp.float32), root=0) for i in range(4)]
    cp.cuda.get_current_stream().synchronize()
    with all_ranks(mode):
        for i, (result, got) in enumerate(zip(results, received)):
            assert float(result.min()) == float(result.max()) == (i + 1) * sub.size, i
            assert float(got.min()) == float(got.max()) == i, i
