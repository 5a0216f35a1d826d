"""BatchNorm1d and SyncBatchNorm.

Serial tests compare with PyTorch and finite differences. MPI tests give
every rank its own batch (sizes differ; at 3+ ranks rank 1 has no rows) and
compare SyncBatchNorm with BatchNorm1d applied to the gathered batch.
"""
import re

import numpy as np
import pytest

import hpcdist
from hpcdist.nn import BatchNorm1d, Linear, ReLU, Sequential, SyncBatchNorm
from tests.helpers import all_ranks, check_array, expect_error
from tests.nn.gradcheck import gradcheck

mpi = pytest.mark.mpi(min_size=2)


def _randn(*shape, seed=0, dtype=np.float64, loc=0.0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (loc + scale * rng.standard_normal(shape)).astype(dtype)


def _set_affine(bn, seed=5):
    rng = np.random.default_rng(seed)
    bn.weight.data[...] = rng.uniform(0.5, 2.0, bn.num_features)
    bn.bias.data[...] = rng.standard_normal(bn.num_features)
    return bn


def _allreduce_calls(ctx):
    return ctx.stats().get("allreduce", {}).get("calls", 0)


# -- BatchNorm1d against PyTorch -------------------------------------------------------------
@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
@pytest.mark.parametrize("shape", [(8, 3), (5, 3, 4)])
def test_batchnorm_matches_torch(momentum, shape):
    torch = pytest.importorskip("torch")
    bn = _set_affine(BatchNorm1d(3, momentum=momentum, dtype=np.float64))
    ref = torch.nn.BatchNorm1d(3, momentum=momentum, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(bn.weight.data))
        ref.bias.copy_(torch.from_numpy(bn.bias.data))
    for step in range(3):
        x = _randn(*shape, seed=step, loc=step, scale=1 + step)
        g = _randn(*shape, seed=10 + step)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        yt = ref(xt)
        yt.backward(torch.from_numpy(g))
        np.testing.assert_allclose(bn(x), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(bn.backward(g), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(bn.running_mean, ref.running_mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(bn.running_var, ref.running_var.numpy(), rtol=1e-12)
        assert int(bn.num_batches_tracked) == int(ref.num_batches_tracked) == step + 1
    np.testing.assert_allclose(bn.weight.grad, ref.weight.grad.numpy(), rtol=1e-9)
    np.testing.assert_allclose(bn.bias.grad, ref.bias.grad.numpy(), rtol=1e-9)
    bn.eval()
    ref.eval()
    x = _randn(*shape, seed=99)
    g = _randn(*shape, seed=98)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = ref(xt)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(bn(x), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(bn.backward(g), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_running_stats_formula():
    bn = BatchNorm1d(2, momentum=0.25, dtype=np.float64)
    x = _randn(6, 2, loc=3.0, scale=2.0)
    bn(x)
    mean, var = x.mean(0), x.var(0, ddof=1)
    np.testing.assert_allclose(bn.running_mean, 0.75 * 0 + 0.25 * mean)
    np.testing.assert_allclose(bn.running_var, 0.75 * 1 + 0.25 * var)
    cumulative = BatchNorm1d(2, momentum=None, dtype=np.float64)
    batches = [_randn(4, 2, seed=s, loc=s) for s in range(3)]
    for b in batches:
        cumulative(b)
    np.testing.assert_allclose(cumulative.running_mean, np.mean([b.mean(0) for b in batches], 0))
    np.testing.assert_allclose(cumulative.running_var,
                               np.mean([b.var(0, ddof=1) for b in batches], 0))
    assert cumulative.num_batches_tracked.dtype == np.int64
    assert int(cumulative.num_batches_tracked) == 3


def test_train_uses_batch_stats_eval_uses_running_stats():
    bn = BatchNorm1d(3, dtype=np.float64)
    x = _randn(50, 3, loc=4.0, scale=3.0)
    y = bn(x)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(y.var(0), 1, rtol=1e-4)
    bn.eval()
    y_eval = bn(x)
    expected = (x - bn.running_mean) / np.sqrt(bn.running_var + bn.eps)
    np.testing.assert_allclose(y_eval, expected)
    tracked = int(bn.num_batches_tracked)
    bn(x)
    assert int(bn.num_batches_tracked) == tracked  # eval leaves the statistics alone
    one = bn(x[:1])  # a single row is fine outside training
    assert one.shape == (1, 3)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(6, 4), (3, 4, 2)])
def test_batchnorm_gradcheck(train, affine, shape):
    bn = BatchNorm1d(4, affine=affine, dtype=np.float64)
    if affine:
        _set_affine(bn)
    bn(_randn(*shape, seed=3, loc=1.0, scale=2.0))  # non-trivial running statistics
    bn.train(train)
    grads = gradcheck(bn, _randn(*shape, seed=4, loc=-1.0, scale=1.5))
    assert set(grads) == ({"input", "weight", "bias"} if affine else {"input"})


def test_no_running_stats():
    bn = BatchNorm1d(3, track_running_stats=False, dtype=np.float64)
    assert bn.running_mean is None and bn.running_var is None
    assert bn.num_batches_tracked is None
    assert list(bn.state_dict()) == ["weight", "bias"]
    x = _randn(10, 3, loc=2.0)
    train_out = bn(x)
    bn.eval()
    np.testing.assert_allclose(bn(x), train_out)  # batch statistics in both modes
    gradcheck(bn, x)


def test_state_dict_round_trip():
    bn = _set_affine(BatchNorm1d(3))
    for step in range(4):
        bn(_randn(8, 3, seed=step, loc=step, dtype=np.float32))
    state = bn.state_dict()
    assert list(state) == ["weight", "bias", "running_mean", "running_var",
                           "num_batches_tracked"]
    assert int(state["num_batches_tracked"]) == 4
    fresh = BatchNorm1d(3).load_state_dict(state)
    for name, value in fresh.state_dict().items():
        np.testing.assert_array_equal(value, state[name], err_msg=name)
    x = _randn(5, 3, seed=7, dtype=np.float32)
    np.testing.assert_array_equal(fresh.eval()(x), bn.eval()(x))
    bn.running_mean[...] = 100  # state_dict holds copies
    assert not np.array_equal(state["running_mean"], bn.running_mean)


def test_float16_input():
    bn = BatchNorm1d(4)
    x = _randn(16, 4, loc=2.0, dtype=np.float16)
    y = bn(x)
    assert y.dtype == np.float16
    ref = BatchNorm1d(4, dtype=np.float64)
    np.testing.assert_allclose(y.astype(np.float64), ref(x.astype(np.float64)), atol=5e-3)
    grad = bn.backward(np.ones_like(x))
    assert grad.dtype == np.float16 and bn.weight.grad.dtype == np.float32
    assert bn.running_mean.dtype == np.float32


def test_frozen_affine():
    bn = BatchNorm1d(2, dtype=np.float64)
    bn.weight.requires_grad = False
    bn(_randn(4, 2))
    bn.backward(np.ones((4, 2)))
    assert bn.weight.grad is None
    np.testing.assert_allclose(bn.bias.grad, [4, 4])


def test_batchnorm_errors():
    bn = BatchNorm1d(8)
    with pytest.raises(ValueError, match=re.escape("BatchNorm1d(num_features=8) got input of "
                                                   "shape (4, 3); expected (n_samples, 8)")):
        bn(np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=re.escape("got input of shape (8,)")):
        bn(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="training needs more than one value per feature"):
        bn(np.zeros((1, 8), np.float32))
    with pytest.raises(TypeError, match="floating-point input"):
        bn(np.zeros((2, 8), np.int32))
    with pytest.raises(RuntimeError, match="backward called before forward"):
        BatchNorm1d(2).backward(np.zeros((2, 2)))
    with pytest.raises(ValueError, match="num_features=0 should be a positive integer"):
        BatchNorm1d(0)
    with pytest.raises(ValueError, match="eps=-1.0 should be a finite number >= 0"):
        BatchNorm1d(2, eps=-1.0)
    with pytest.raises(ValueError, match=re.escape("momentum=1.5 should be in [0, 1]")):
        BatchNorm1d(2, momentum=1.5)


def test_batchnorm_repr():
    assert repr(BatchNorm1d(4)) == ("BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True, "
                                    "track_running_stats=True)")
    assert repr(SyncBatchNorm(2, momentum=None)).startswith("SyncBatchNorm(2, eps=1e-05, "
                                                            "momentum=None")


# -- SyncBatchNorm on one process --------------------------------------------------------------
def test_sync_batchnorm_single_process_is_batchnorm(ctx):
    if ctx.size != 1:
        pytest.skip("single-process test")
    sync = _set_affine(SyncBatchNorm(3, dtype=np.float64, ctx=ctx))
    bn = _set_affine(BatchNorm1d(3, dtype=np.float64))
    before = _allreduce_calls(ctx)
    for step in range(2):
        x = _randn(7, 3, seed=step, loc=3.0)
        g = _randn(7, 3, seed=20 + step)
        np.testing.assert_array_equal(sync(x), bn(x))
        np.testing.assert_array_equal(sync.backward(g), bn.backward(g))
    for name, value in bn.state_dict().items():
        np.testing.assert_array_equal(sync.state_dict()[name], value, err_msg=name)
    np.testing.assert_array_equal(sync.weight.grad, bn.weight.grad)
    assert _allreduce_calls(ctx) == before  # no communication at size 1


def test_sync_batchnorm_default_context_gradcheck():
    sync = _set_affine(SyncBatchNorm(3, dtype=np.float64))
    if hpcdist.get_world_size() != 1:
        pytest.skip("single-process test")
    gradcheck(sync, _randn(5, 3, loc=1.0))


def test_convert_sync_batchnorm():
    model = Sequential(Linear(4, 3, random_state=0), BatchNorm1d(3), ReLU(),
                       Sequential(BatchNorm1d(3, affine=False, momentum=None)))
    model[1](_randn(5, 3, dtype=np.float32))
    model.eval()
    weight, running_mean = model[1].weight, model[1].running_mean
    converted = SyncBatchNorm.convert_sync_batchnorm(model)
    assert converted is model
    assert type(model[1]) is SyncBatchNorm and type(model[3][0]) is SyncBatchNorm
    assert model[1].weight is weight and model[1].running_mean is running_mean
    assert int(model[1].num_batches_tracked) == 1
    assert model[3][0].momentum is None and not model[3][0].affine
    assert not model[1].training
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias", "1.weight",
                                                        "1.bias"]
    single = SyncBatchNorm.convert_sync_batchnorm(BatchNorm1d(2, dtype=np.float64))
    assert type(single) is SyncBatchNorm and single.weight.dtype == np.float64


# -- SyncBatchNorm across ranks ------------------------------------------------------------------
def _rows(rank, size):
    """Rows of each rank's batch: they differ, and rank 1 has none at 3+ ranks."""
    if size >= 3 and rank == 1:
        return 0
    return 3 + 2 * rank


def _local_batch(rank, size, shape_tail, dtype, step):
    n = _rows(rank, size)
    x = _randn(n, *shape_tail, seed=100 * step + rank, loc=5.0 + step, scale=2.0, dtype=dtype)
    g = _randn(n, *shape_tail, seed=1000 + 100 * step + rank, dtype=dtype)
    return x, g


@mpi
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape_tail", [(4,), (4, 3)])
@pytest.mark.parametrize("affine", [True, False])
def test_sync_batchnorm_matches_gathered_batch(ctx, dtype, shape_tail, affine):
    rank, size = ctx.rank, ctx.size
    sync = SyncBatchNorm(4, affine=affine, dtype=dtype, ctx=ctx)
    ref = BatchNorm1d(4, affine=affine, dtype=dtype)
    if affine:
        _set_affine(sync)
        _set_affine(ref)
    tol = {"rtol": 1e-10, "atol": 1e-10} if dtype == np.float64 else {"rtol": 1e-4, "atol": 1e-4}
    start = sum(_rows(r, size) for r in range(rank))
    rows = slice(start, start + _rows(rank, size))
    for step in range(2):
        x, g = _local_batch(rank, size, shape_tail, dtype, step)
        calls = _allreduce_calls(ctx)
        y = sync(x)
        grad_x = sync.backward(g)
        calls = _allreduce_calls(ctx) - calls
        x_all = hpcdist.allgather(x, ctx=ctx)
        g_all = hpcdist.allgather(g, ctx=ctx)
        y_ref = ref(x_all)
        grad_ref = ref.backward(g_all)
        with all_ranks(f"step {step}"):
            assert calls == 2, f"{calls} allreduce calls, expected one forward, one backward"
            check_array(y, y_ref[rows], **tol, what="output")
            check_array(grad_x, grad_ref[rows], **tol, what="input gradient")
            check_array(sync.running_mean, ref.running_mean, **tol, what="running_mean")
            check_array(sync.running_var, ref.running_var, **tol, what="running_var")
            assert int(sync.num_batches_tracked) == step + 1
    if affine:
        for name in ("weight", "bias"):
            local = getattr(sync, name).grad
            total = hpcdist.allreduce(local, op="sum", ctx=ctx)
            with all_ranks(f"{name}.grad"):
                check_array(total, getattr(ref, name).grad, **tol, what=f"{name}.grad summed")
    # evaluation with running statistics: the same on every rank, no communication
    sync.eval()
    ref.eval()
    x, g = _local_batch(rank, size, shape_tail, dtype, 5)
    calls = _allreduce_calls(ctx)
    y = sync(x)
    grad_x = sync.backward(g)
    with all_ranks("eval"):
        assert _allreduce_calls(ctx) == calls
        check_array(y, ref(x), **tol, what="eval output")
        check_array(grad_x, ref.backward(g), **tol, what="eval input gradient")


@mpi
def test_sync_batchnorm_without_running_stats_syncs_in_eval(ctx):
    rank, size = ctx.rank, ctx.size
    sync = SyncBatchNorm(4, track_running_stats=False, dtype=np.float64, ctx=ctx).eval()
    ref = BatchNorm1d(4, track_running_stats=False, dtype=np.float64).eval()
    x, g = _local_batch(rank, size, (4,), np.float64, 0)
    y = sync(x)
    grad_x = sync.backward(g)
    start = sum(_rows(r, size) for r in range(rank))
    rows = slice(start, start + len(x))
    y_ref = ref(hpcdist.allgather(x, ctx=ctx))
    grad_ref = ref.backward(hpcdist.allgather(g, ctx=ctx))
    with all_ranks("no running stats"):
        check_array(y, y_ref[rows], rtol=1e-10, atol=1e-10)
        check_array(grad_x, grad_ref[rows], rtol=1e-10, atol=1e-10)


@mpi
def test_sync_batchnorm_large_offset_keeps_variance(ctx):
    """float32 data far from zero: the global variance is not lost to cancellation."""
    rank = ctx.rank
    x = _randn(64, 2, seed=rank, loc=1e4, scale=1.0, dtype=np.float32)
    sync = SyncBatchNorm(2, ctx=ctx)
    y = sync(x)
    ref = BatchNorm1d(2, dtype=np.float64)
    start = 64 * rank
    y_ref = ref(hpcdist.allgather(x, ctx=ctx).astype(np.float64))[start:start + 64]
    with all_ranks("large offset"):
        np.testing.assert_allclose(y, y_ref, atol=1e-2)


@mpi
def test_sync_batchnorm_one_value_in_total_fails_everywhere(ctx):
    x = np.ones((1 if ctx.rank == 0 else 0, 3), np.float32)
    sync = SyncBatchNorm(3, ctx=ctx)
    expect_error(ValueError, sync, x, match=r"more than one value per feature.*1 values over "
                                            r"all ranks")
    # two rows in total, on different ranks, are enough
    x = np.ones((1 if ctx.rank < 2 else 0, 3), np.float32)
    with all_ranks("two rows"):
        assert sync(x).shape == x.shape
