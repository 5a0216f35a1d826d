"""DistributedDataParallel: N ranks with batch B/N train exactly like one rank with batch B."""
import math

import numpy as np
import pytest

import hpcdist
from hpcdist import nn
from hpcdist.nn.optim import SGD
from tests.helpers import (
    all_ranks,
    assert_on_all_ranks,
    check_array,
    expect_error,
    mpi_twin,
    same_on_all_ranks,
)

GLOBAL_BATCH = 12          # divisible by 1, 2, 3 and 4 ranks
N_FEATURES, N_HIDDEN, N_CLASSES = 5, 7, 3
BUCKET_SIZES = [0.0, 25.0, math.inf]   # one bucket per parameter, default, a single bucket


def make_model(seed=0, hidden=N_HIDDEN, xp=np):
    return nn.Sequential(
        nn.Linear(N_FEATURES, hidden, dtype=np.float64, random_state=seed, xp=xp), nn.Tanh(),
        nn.Linear(hidden, hidden, dtype=np.float64, random_state=seed + 1, xp=xp), nn.ReLU(),
        nn.Linear(hidden, N_CLASSES, dtype=np.float64, random_state=seed + 2, xp=xp))


def make_data(steps):
    rng = np.random.default_rng(42)
    X = rng.normal(size=(steps * GLOBAL_BATCH, N_FEATURES))
    y = rng.integers(0, N_CLASSES, size=steps * GLOBAL_BATCH)
    return X, y


def local_rows(step, rank, size):
    per_rank = GLOBAL_BATCH // size
    start = step * GLOBAL_BATCH + rank * per_rank
    return slice(start, start + per_rank)


def train_single(steps, X, y):
    model = make_model()
    optimizer = SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for step in range(steps):
        rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        optimizer.zero_grad()
        criterion(model(X[rows]), y[rows])
        model.backward(criterion.backward())
        optimizer.step()
    return model


def train_ddp(ctx, steps, X, y, **ddp_options):
    # every rank starts from a different initialisation: DDP must broadcast rank 0's
    model = nn.Sequential(*make_model(seed=0 if ctx.rank == 0 else 100 + ctx.rank))
    ddp = hpcdist.DDP(model, ctx=ctx, **ddp_options)
    optimizer = SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for step in range(steps):
        rows = local_rows(step, ctx.rank, ctx.size)
        optimizer.zero_grad()
        criterion(ddp(X[rows]), y[rows])
        ddp.backward(criterion.backward())
        optimizer.step()
    return ddp


def check_grads_against_one_batch(ddp, X, y, *, rtol, atol=1e-12, factor=1):
    """``ddp``'s gradients equal ``factor`` times one model's on the whole batch."""
    reference = make_model()
    criterion = nn.CrossEntropyLoss()
    criterion(reference(X), y)
    reference.backward(criterion.backward())
    for (name, expected), (_, actual) in zip(reference.named_parameters(),
                                             ddp.module.named_parameters()):
        check_array(actual.grad, factor * expected.grad, rtol=rtol, atol=atol, what=name)


@pytest.mark.parametrize("bucket_size_mb", BUCKET_SIZES)
def test_ddp_equals_single_rank_large_batch(ctx, bucket_size_mb):
    steps = 4
    X, y = make_data(steps)
    reference = train_single(steps, X, y)
    ddp = train_ddp(ctx, steps, X, y, bucket_size_mb=bucket_size_mb)
    for (name, expected), (_, actual) in zip(reference.named_parameters(),
                                             ddp.module.named_parameters()):
        check_array(actual.data, expected.data, rtol=1e-6, atol=1e-12, what=name)


@pytest.mark.mpi(min_size=2)
def test_ddp_parameters_identical_on_all_ranks(ctx):
    ddp = train_ddp(ctx, 2, *make_data(2))
    for name, parameter in ddp.named_parameters():
        gathered = hpcdist.allgather(parameter.data[None], ctx=ctx)
        assert_on_all_ranks(all(np.array_equal(g, gathered[0]) for g in gathered),
                            f"{name} differs between ranks")


def test_grad_is_average_over_ranks_after_backward(ctx):
    X, y = make_data(1)
    ddp = hpcdist.DDP(make_model(), ctx=ctx, bucket_size_mb=0)
    criterion = nn.CrossEntropyLoss()
    criterion(ddp(X[local_rows(0, ctx.rank, ctx.size)]), y[local_rows(0, ctx.rank, ctx.size)])
    ddp.backward(criterion.backward())
    check_grads_against_one_batch(ddp, X[:GLOBAL_BATCH], y[:GLOBAL_BATCH], rtol=1e-9)


def test_no_sync_accumulation_equals_one_large_batch(ctx):
    """Two micro-batches (the first under no_sync) sum to twice the large-batch mean."""
    X, y = make_data(2)
    ddp = hpcdist.DDP(make_model(), ctx=ctx, bucket_size_mb=0)
    criterion = nn.CrossEntropyLoss()
    for step, context in ((0, ddp.no_sync()), (1, None)):
        rows = local_rows(step, ctx.rank, ctx.size)
        criterion(ddp(X[rows]), y[rows])
        if context is None:
            ddp.backward(criterion.backward())
        else:
            with context:
                ddp.backward(criterion.backward())
                # nothing communicated yet: the local gradient is this rank's own
                assert_on_all_ranks(not ddp._in_flight, "no_sync started communication")
    check_grads_against_one_batch(ddp, X[:2 * GLOBAL_BATCH], y[:2 * GLOBAL_BATCH],
                                  rtol=1e-9, factor=2)


class _Probe(nn.Module):
    """Identity layer that records how many buckets are in flight when its backward runs."""

    def __init__(self):
        super().__init__()
        self.ddp_holder = []  # a list, so the DDP is not registered as a sub-module
        self.seen_in_flight = None

    def forward(self, x):
        return x

    def backward(self, grad_output):
        ddp = self.ddp_holder[0]
        self.seen_in_flight = sum(bucket.request is not None for bucket in ddp.buckets)
        return grad_output


@pytest.mark.mpi(min_size=2)
def test_buckets_start_during_the_backward_pass(ctx):
    probe = _Probe()
    model = nn.Sequential(nn.Linear(N_FEATURES, N_HIDDEN, dtype=np.float64, random_state=0),
                          probe,
                          nn.Linear(N_HIDDEN, N_CLASSES, dtype=np.float64, random_state=1))
    ddp = hpcdist.DDP(model, ctx=ctx, bucket_size_mb=0)
    probe.ddp_holder.append(ddp)
    X, y = make_data(1)
    criterion = nn.CrossEntropyLoss()
    criterion(ddp(X[:4]), y[:4])
    ddp.backward(criterion.backward())
    # the last Linear's weight and bias buckets were launched before the probe's backward
    assert_on_all_ranks(probe.seen_in_flight == 2,
                        f"{probe.seen_in_flight} buckets in flight, expected 2")
    assert_on_all_ranks(not ddp._in_flight, "requests left after backward")


class _TwoHeads(nn.Module):
    """Uses head ``a`` on rank 0 and head ``b`` elsewhere: parameters without gradients."""

    def __init__(self, rank):
        super().__init__()
        self.a = nn.Linear(N_FEATURES, N_CLASSES, dtype=np.float64, random_state=0)
        self.b = nn.Linear(N_FEATURES, N_CLASSES, dtype=np.float64, random_state=1)
        self.rank = rank

    def forward(self, x):
        return (self.a if self.rank == 0 else self.b).forward(x)

    def backward(self, grad_output):
        return (self.a if self.rank == 0 else self.b).backward(grad_output)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_size_mb", BUCKET_SIZES)
@pytest.mark.timeout(60)
def test_parameters_without_gradient_count_as_zero(ctx, bucket_size_mb):
    model = _TwoHeads(ctx.rank)
    ddp = hpcdist.DDP(model, ctx=ctx, bucket_size_mb=bucket_size_mb)
    X, _ = make_data(1)
    grad = np.ones((4, N_CLASSES))
    ddp(X[:4])
    ddp.backward(grad)
    expected_a = (grad.T @ X[:4]) / ctx.size                # rank 0's only
    expected_b = (grad.T @ X[:4]) * (ctx.size - 1) / ctx.size
    check_array(model.a.weight.grad, expected_a, rtol=1e-12, what="head a")
    check_array(model.b.weight.grad, expected_b, rtol=1e-12, what="head b")


@pytest.mark.mpi(min_size=2)
def test_layout_mismatch_names_the_parameter(ctx):
    hidden = N_HIDDEN + (ctx.rank == 1)
    expect_error(hpcdist.ConfigMismatchError, hpcdist.DDP, make_model(hidden=hidden), ctx=ctx,
                 match=[r"^DistributedDataParallel: parameter 0\.weight differs across ranks: ",
                        rf"rank 1 has float64\[{N_HIDDEN + 1}, {N_FEATURES}\]", r"same model"])
    # the job goes on
    assert hpcdist.allreduce(1, ctx=ctx) == ctx.size


class _WithBuffer(nn.Module):
    def __init__(self, value):
        super().__init__()
        self.layer = nn.Linear(2, 2, dtype=np.float64, random_state=0)
        self.register_buffer("running", np.full(3, float(value)))
        self.register_buffer("count", value)

    def forward(self, x):
        return self.layer.forward(x)

    def backward(self, grad_output):
        return self.layer.backward(grad_output)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("broadcast_buffers", [True, False])
def test_buffers_follow_rank_0_when_asked(ctx, broadcast_buffers):
    model = _WithBuffer(ctx.rank)
    ddp = hpcdist.DDP(model, ctx=ctx, broadcast_buffers=broadcast_buffers)
    # construction always starts from rank 0's state
    with all_ranks("after construction"):
        assert model.running.tolist() == [0.0] * 3 and model.count == 0
    model.running[...] = ctx.rank + 5
    ddp(np.ones((1, 2)))
    expected = 5.0 if broadcast_buffers else ctx.rank + 5.0
    with all_ranks("after forward"):
        assert model.running.tolist() == [expected] * 3


@pytest.mark.mpi(min_size=2)
def test_buffers_are_synced_coalesced_one_broadcast_per_dtype(ctx):
    """Two BatchNorm layers: 4 float32 arrays, 2 int64 0-d counters and one
    Python number: two array broadcasts and one object broadcast per forward."""
    model = nn.Sequential(nn.Linear(3, 4, random_state=0), nn.BatchNorm1d(4),
                          nn.Linear(4, 2, random_state=0), nn.BatchNorm1d(2))
    model.register_buffer("step", 0)
    ddp = hpcdist.DDP(model, ctx=ctx)
    norm_a, norm_b = model[1], model[3]
    for norm in (norm_a, norm_b):        # every rank drifts its own way
        norm.running_mean[...] = ctx.rank + 1
        norm.running_var[...] = ctx.rank + 2
        norm.num_batches_tracked[...] = ctx.rank + 3
    model._buffers["step"] = ctx.rank + 4
    ctx.reset_stats()
    ddp(np.ones((2, 3), np.float32))
    stats = ctx.stats()
    with all_ranks("after forward"):
        # BatchNorm then updates its statistics from this batch; the counters show
        # that it started from rank 0's (3 + 1), not from this rank's
        assert int(norm_a.num_batches_tracked) == 4 and int(norm_b.num_batches_tracked) == 4
        assert model._buffers["step"] == 4
        assert stats["broadcast"]["calls"] == 2, stats          # float32, int64
        assert stats["broadcast_object"]["calls"] == 1, stats   # the Python number
    # same input and weights everywhere: equal statistics iff they started equal
    for norm in (norm_a, norm_b):
        assert same_on_all_ranks(norm.running_mean.tolist() + norm.running_var.tolist())


@pytest.mark.mpi(min_size=2)
def test_buffer_layout_mismatch_names_the_buffer(ctx):
    model = _WithBuffer(0)
    if ctx.rank == 1:
        model.register_buffer("running", np.zeros(4))
    expect_error(hpcdist.ConfigMismatchError, hpcdist.DDP, model, ctx=ctx,
                 match=[r"buffer running differs across ranks", r"float64\[3\]",
                        r"rank 1 has float64\[4\]", r"same model"])


@pytest.mark.mpi(min_size=2)
def test_settings_that_differ_are_named(ctx):
    expect_error(hpcdist.ConfigMismatchError, hpcdist.DDP, make_model(), ctx=ctx,
                 bucket_size_mb=1.0 if ctx.rank == 0 else 2.0,
                 match=[r"bucket_size_mb differs across ranks: rank 0 has 1\.0"])


def test_compression_per_bucket(ctx):
    from hpcdist.compression import FP16Compressor
    X, y = make_data(1)
    ddp = hpcdist.DDP(make_model(), ctx=ctx, bucket_size_mb=0, compression=FP16Compressor())
    criterion = nn.CrossEntropyLoss()
    rows = local_rows(0, ctx.rank, ctx.size)
    criterion(ddp(X[rows]), y[rows])
    ddp.backward(criterion.backward())
    check_grads_against_one_batch(ddp, X[:GLOBAL_BATCH], y[:GLOBAL_BATCH], rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("kwargs, exc, match", [
    ({"bucket_size_mb": -1}, ValueError, r"bucket_size_mb=-1.0 should be >= 0"),
    ({"bucket_size_mb": math.nan}, ValueError, r"bucket_size_mb=nan should be >= 0"),
    ({"bucket_size_mb": "x"}, TypeError, r"bucket_size_mb='x' should be a number >= 0"),
    ({"broadcast_buffers": "no"}, TypeError, r"broadcast_buffers='no' should be True or False"),
    ({"broadcast_buffers": None}, TypeError, r"broadcast_buffers=None should be True or False"),
    ({"compression": "fp16"}, TypeError,
     r"compression='fp16' is not a compressor .*collective=None.*FP16Compressor\(\)"),
    ({"compression": 123}, TypeError, r"compression=123 is not a compressor"),
])
def test_bad_arguments(kwargs, exc, match):
    with pytest.raises(exc, match=match) as info:
        hpcdist.DDP(make_model(), **kwargs)
    assert isinstance(info.value, hpcdist.HpcdistError)


def test_a_module_that_is_not_an_hpcdist_module():
    with pytest.raises(TypeError, match=r"not an hpcdist.nn.Module"):
        hpcdist.DDP(object())


def test_set_to_none_gradients_still_reduce_into_buckets(ctx):
    ddp = hpcdist.DDP(make_model(), ctx=ctx)
    ddp.zero_grad(set_to_none=True)
    X, y = make_data(1)
    criterion = nn.CrossEntropyLoss()
    criterion(ddp(X[:4]), y[:4])
    ddp.backward(criterion.backward())
    for bucket in ddp.buckets:
        for parameter, view in zip(bucket.parameters, bucket.views):
            assert parameter.grad is view


@pytest.mark.gpu
@pytest.mark.parametrize("progress_thread", [True, False])
def test_cupy_gradients_are_averaged_on_the_gpu(ctx, progress_thread):
    cp = pytest.importorskip("cupy")
    if not ctx.device.startswith("cuda:"):
        pytest.skip("no CUDA GPU visible")
    X, y = make_data(1)
    ddp = hpcdist.DDP(make_model(xp=cp), ctx=ctx, bucket_size_mb=0,
                      progress_thread=progress_thread)
    criterion = nn.CrossEntropyLoss()
    rows = local_rows(0, ctx.rank, ctx.size)
    criterion(ddp(cp.asarray(X[rows])), cp.asarray(y[rows]))
    ddp.backward(criterion.backward())
    reference = make_model()
    criterion(reference(X[:GLOBAL_BATCH]), y[:GLOBAL_BATCH])
    reference.backward(criterion.backward())
    with all_ranks("gradients of a CuPy model"):
        for (name, expected), (_, actual) in zip(reference.named_parameters(),
                                                 ddp.module.named_parameters()):
            assert isinstance(actual.grad, cp.ndarray), name
            check_array(cp.asnumpy(actual.grad), expected.grad, rtol=1e-9, atol=1e-12,
                        what=name)


test_ddp_equals_single_rank_large_batch_mpi = mpi_twin(test_ddp_equals_single_rank_large_batch)
test_cupy_gradients_are_averaged_on_the_gpu_mpi = mpi_twin(
    test_cupy_gradients_are_averaged_on_the_gpu)
test_grad_is_average_over_ranks_after_backward_mpi = mpi_twin(
    test_grad_is_average_over_ranks_after_backward)
test_no_sync_accumulation_equals_one_large_batch_mpi = mpi_twin(
    test_no_sync_accumulation_equals_one_large_batch)
test_compression_per_bucket_mpi = mpi_twin(test_compression_per_bucket)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("progress_thread", [True, False])
def test_progress_thread_on_or_off_gives_the_same_average(ctx, progress_thread):
    X, y = make_data(1)
    ddp = hpcdist.DDP(make_model(), ctx=ctx, bucket_size_mb=0, progress_thread=progress_thread)
    assert_on_all_ranks((ddp._thread is not None) == progress_thread, "thread setting ignored")
    criterion = nn.CrossEntropyLoss()
    rows = local_rows(0, ctx.rank, ctx.size)
    criterion(ddp(X[rows]), y[rows])
    ddp.backward(criterion.backward())
    check_grads_against_one_batch(ddp, X[:GLOBAL_BATCH], y[:GLOBAL_BATCH], rtol=1e-9)
    assert_on_all_ranks(not ddp._in_flight, "allreduces still in flight after backward")
    if progress_thread:  # one communication thread per context, shared by its DDPs
        other = hpcdist.DDP(make_model(), ctx=ctx, progress_thread=True)
        assert_on_all_ranks(other._thread is ddp._thread, "a second communication thread")
