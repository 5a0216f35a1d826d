"""hpcdist.torch: collectives on tensors, DistributedOptimizer, parameter broadcasts.

In float64, N ranks each training on their share of a batch with the
DistributedOptimizer must train exactly like one process on the whole batch.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import hpcdist  # noqa: E402
import hpcdist.torch as hvd  # noqa: E402
from hpcdist.compression import FP16Compressor  # noqa: E402
from hpcdist.torch import optimizer as optimizer_module  # noqa: E402
from tests.helpers import all_ranks, assert_on_all_ranks, expect_error, mpi_twin  # noqa: E402

GLOBAL_BATCH = 12  # divisible by 1, 2, 3 and 4 ranks
N_IN, N_HIDDEN, N_OUT = 5, 7, 3


def _model(seed=0, hidden=N_HIDDEN):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(N_IN, hidden), torch.nn.Tanh(),
                               torch.nn.Linear(hidden, N_OUT)).double()


def _batch(step, rank=None, size=1):
    generator = torch.Generator().manual_seed(100 + step)
    X = torch.randn(GLOBAL_BATCH, N_IN, generator=generator, dtype=torch.float64)
    y = torch.randint(0, N_OUT, (GLOBAL_BATCH,), generator=generator)
    if rank is None:
        return X, y
    share = GLOBAL_BATCH // size
    return X[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]


def _train(model, optimizer, batches):
    for X, y in batches:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(X), y).backward()
        optimizer.step()


def _same_parameters(a, b, rtol):
    for (name, p), q in zip(a.named_parameters(), b.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=rtol, atol=1e-12,
                                   err_msg=name)


@pytest.fixture(params=["bucketed", "direct"])
def direct(request, monkeypatch):
    """Whether every gradient is reduced in its own memory (``DIRECT_BYTES`` lowered to
    one byte, as a gradient of 1 MiB or more is) or copied into flat buckets."""
    if request.param == "direct":
        monkeypatch.setattr(optimizer_module, "DIRECT_BYTES", 1)
    return request.param == "direct"


@pytest.mark.parametrize("make_optimizer", [
    lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    lambda params: torch.optim.Adam(params, lr=0.01)], ids=["sgd-momentum", "adam"])
@pytest.mark.parametrize("bucket_size_mb", [25.0, 1e-4])
@pytest.mark.parametrize("progress_thread", [False, True], ids=["tested", "thread"])
def test_trains_like_one_process_on_the_whole_batch(ctx, make_optimizer, bucket_size_mb,
                                                    progress_thread, direct):
    reference = _model()
    _train(reference, make_optimizer(reference.parameters()), [_batch(s) for s in range(3)])
    model = _model()
    optimizer = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                         model.named_parameters(),
                                         bucket_size_mb=bucket_size_mb,
                                         progress_thread=progress_thread, ctx=ctx)
    assert isinstance(optimizer, torch.optim.Optimizer)
    _train(model, optimizer, [_batch(s, ctx.rank, ctx.size) for s in range(3)])
    with all_ranks("parameters"):
        _same_parameters(model, reference, rtol=1e-10)


test_trains_like_one_process_on_the_whole_batch_mpi = mpi_twin(
    test_trains_like_one_process_on_the_whole_batch)


def test_large_gradients_are_averaged_where_autograd_left_them(ctx):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 2)).double()  # 1 MiB of weights first
    big, small = model[0].weight, model[2].weight
    produced, mine = {}, {}  # where autograd put each gradient, and its values, seen by

    def seen(p):  # hooks that run before the optimizer's
        produced[id(p)], mine[id(p)] = p.grad.data_ptr(), p.grad.clone()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(seen)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         model.named_parameters(), ctx=ctx)
    X = torch.randn(4, 512, generator=torch.Generator().manual_seed(ctx.rank),
                    dtype=torch.float64)
    optimizer.zero_grad()
    model(X).square().sum().backward()
    optimizer.synchronize()
    everyone = hpcdist.allgather_object([mine[id(p)].numpy() for p in model.parameters()],
                                        ctx=ctx)
    with all_ranks("direct and bucketed gradients"):
        assert big.grad.data_ptr() == produced[id(big)]  # reduced in place, not copied
        assert small.grad._base is not None or ctx.size == 1  # a view of its flat bucket
        for p, grads in zip(model.parameters(), zip(*everyone)):
            np.testing.assert_allclose(p.grad.numpy(), np.mean(grads, axis=0), rtol=1e-12,
                                       atol=1e-15)  # sums in another order


test_large_gradients_are_averaged_where_autograd_left_them_mpi = mpi_twin(
    test_large_gradients_are_averaged_where_autograd_left_them)


def test_accumulates_backward_passes_before_averaging(ctx, direct):
    reference, model = _model(), _model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         model.named_parameters(), backward_passes_per_step=2,
                                         ctx=ctx)
    for net, opt, share in ((reference, ref_opt, (None, 1)), (model, optimizer,
                                                             (ctx.rank, ctx.size))):
        opt.zero_grad()
        for step in range(2):  # two passes, summed, then one step
            X, y = _batch(step, *share)
            torch.nn.functional.cross_entropy(net(X), y).backward()
        opt.step()
    with all_ranks("accumulated"):
        _same_parameters(model, reference, rtol=1e-10)
    optimizer.zero_grad()
    for step in range(2):
        X, y = _batch(step, ctx.rank, ctx.size)
        torch.nn.functional.cross_entropy(model(X), y).backward()
    X, y = _batch(2, ctx.rank, ctx.size)
    with pytest.raises(RuntimeError, match=r"computed 3 times before step\(\), more than "
                                           r"backward_passes_per_step=2"):
        torch.nn.functional.cross_entropy(model(X), y).backward()
    optimizer.synchronize()  # leaves the optimizer ready for the next steps


test_accumulates_backward_passes_before_averaging_mpi = mpi_twin(
    test_accumulates_backward_passes_before_averaging)


@pytest.mark.mpi(min_size=2)
def test_compression_and_skip_synchronize(ctx):
    reference = _model()
    _train(reference, torch.optim.SGD(reference.parameters(), lr=0.1), [_batch(0)])
    model = _model()
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         model.named_parameters(), compression=FP16Compressor(),
                                         ctx=ctx)
    X, y = _batch(0, ctx.rank, ctx.size)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(X), y).backward()
    optimizer.synchronize()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)  # the averaged gradients
    with optimizer.skip_synchronize():
        optimizer.step()
    with all_ranks("fp16 compressed"):
        assert np.isfinite(norm.item())
        _same_parameters(model, reference, rtol=2e-3)


@pytest.mark.mpi(min_size=2)
def test_unused_parameters_count_as_zero_and_never_hang(ctx, direct):
    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(N_IN, N_OUT).double()
            self.b = torch.nn.Linear(N_IN, N_OUT).double()

        def forward(self, x, head):
            return getattr(self, head)(x)

    torch.manual_seed(0)
    model = TwoHeads()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                         model.named_parameters(), ctx=ctx)
    X, y = _batch(0, ctx.rank, ctx.size)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(X, "a" if ctx.rank == 0 else "b"), y).backward()
    optimizer.step()
    gathered = hpcdist.allgather_object([p.grad.numpy().copy() for p in model.parameters()],
                                        ctx=ctx)
    with all_ranks("unused heads"):
        for grads in gathered[1:]:
            for mine, other in zip(gathered[0], grads):
                np.testing.assert_array_equal(mine, other)
        moved = [not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)]
        assert all(moved)  # head a moved by rank 0's gradient, head b by the others'


@pytest.mark.mpi(min_size=2)
def test_models_that_differ_are_named_on_every_rank(ctx):
    model = _model(hidden=N_HIDDEN + (ctx.rank == 1))
    expect_error(hpcdist.ConfigMismatchError, hvd.DistributedOptimizer,
                 torch.optim.SGD(model.parameters(), lr=0.1), model.named_parameters(), ctx=ctx,
                 match=[r"^DistributedOptimizer: 0\.weight differs across ranks",
                        rf"rank 1 has float64\[{N_HIDDEN + 1}, {N_IN}\]", r"same model"])


def test_bad_arguments_name_the_value():
    model = _model()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"backward_passes_per_step=0 should be an int >= 1"):
        hvd.DistributedOptimizer(sgd, model.named_parameters(), backward_passes_per_step=0)
    with pytest.raises(ValueError, match=r"op='max' should be one of"):
        hvd.DistributedOptimizer(sgd, model.named_parameters(), op="max")
    with pytest.raises(ValueError, match=r"2 parameter\(s\) of the optimizer are not in"):
        hvd.DistributedOptimizer(sgd, list(model.named_parameters())[:2])
    with pytest.raises(TypeError, match=r"not a torch.optim.Optimizer"):
        hvd.DistributedOptimizer(object(), model.named_parameters())
    with pytest.raises(TypeError, match=r"DistributedOptimizer: compression='fp16' is not a "
                                        r"compressor"):
        hvd.DistributedOptimizer(sgd, model.named_parameters(), compression="fp16")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("form", ["model", "state_dict", "named_parameters"])
def test_broadcast_parameters_of_each_form_from_root(ctx, form):
    model = _model(seed=ctx.rank)  # different weights on every rank
    expected = [p.detach().numpy().copy() for p in _model(seed=0).parameters()]
    given = {"model": model, "state_dict": model.state_dict(),
             "named_parameters": model.named_parameters()}[form]
    hvd.broadcast_parameters(model_or_state_dict=given, root=0, ctx=ctx)
    with all_ranks(form):
        for a, b in zip(model.parameters(), expected, strict=True):
            np.testing.assert_array_equal(a.detach().numpy(), b)


@pytest.mark.mpi(min_size=2)
def test_broadcast_parameters_and_optimizer_state_from_root(ctx):
    model = _model(seed=ctx.rank)  # different weights on every rank
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01 * (ctx.rank + 1))
    X, y = _batch(ctx.rank)
    torch.nn.functional.cross_entropy(model(X), y).backward()
    optimizer.step()  # a different Adam state on every rank
    hvd.broadcast_parameters(model, root=0, ctx=ctx)
    hvd.broadcast_optimizer_state(optimizer, root=0, ctx=ctx)
    weights = hpcdist.allgather_object([p.detach().numpy().copy() for p in model.parameters()],
                                       ctx=ctx)
    moments = hpcdist.allgather_object(
        [optimizer.state[p]["exp_avg"].numpy().copy() for p in model.parameters()], ctx=ctx)
    rates = hpcdist.allgather_object(optimizer.param_groups[0]["lr"], ctx=ctx)
    with all_ranks("from rank 0"):
        for per_rank in (weights, moments):
            for other in per_rank[1:]:
                for a, b in zip(per_rank[0], other):
                    np.testing.assert_array_equal(a, b)
        assert rates == [0.01] * ctx.size


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64,
                                   torch.int64])
def test_collectives_on_every_dtype(ctx, dtype):
    values = (torch.arange(6) % 4 + ctx.rank).to(dtype).reshape(2, 3)
    total = hvd.allreduce(values, op="sum", ctx=ctx)
    mean = hvd.allreduce(values.to(torch.float64), ctx=ctx)
    gathered = hvd.allgather(values, ctx=ctx)
    root = values.clone() if ctx.rank == 0 else torch.zeros_like(values)
    hvd.broadcast(root, root=0, ctx=ctx)
    expected = sum((torch.arange(6) % 4 + r).reshape(2, 3).to(torch.float64)
                   for r in range(ctx.size))
    with all_ranks(str(dtype)):
        assert total.dtype == dtype and total.shape == (2, 3)
        np.testing.assert_allclose(total.to(torch.float64).numpy(), expected.numpy())
        np.testing.assert_allclose(mean.numpy(), expected.numpy() / ctx.size)
        assert gathered.dtype == dtype and gathered.shape == (2 * ctx.size, 3)
        assert torch.equal(root, (torch.arange(6) % 4).to(dtype).reshape(2, 3))
        assert_on_all_ranks(True)


test_collectives_on_every_dtype_mpi = mpi_twin(test_collectives_on_every_dtype)


def test_reduce_scatter_and_alltoall(ctx):
    rows = torch.arange(4 * ctx.size * 2, dtype=torch.float64).reshape(4 * ctx.size, 2)
    mine = hvd.reduce_scatter(rows + ctx.rank, op="sum", ctx=ctx)
    sent = torch.full((2 * ctx.size, 3), float(ctx.rank), dtype=torch.float32)
    received = hvd.alltoall(sent, ctx=ctx)
    total = sum(rows + r for r in range(ctx.size))
    with all_ranks("reduce_scatter, alltoall"):
        assert torch.equal(mine, total[4 * ctx.rank:4 * (ctx.rank + 1)])
        assert received.dtype == torch.float32 and received.shape == (2 * ctx.size, 3)
        assert torch.equal(received[:, 0], torch.arange(ctx.size).repeat_interleave(2).float())


test_reduce_scatter_and_alltoall_mpi = mpi_twin(test_reduce_scatter_and_alltoall)


def test_collectives_refuse_what_is_not_a_tensor():
    with pytest.raises(TypeError, match=r"hpcdist.torch.allreduce: expected a torch.Tensor, "
                                        r"got ndarray"):
        hvd.allreduce(np.ones(3))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cuda_tensors_stay_on_the_device(ctx, dtype):
    pytest.importorskip("cupy", reason="CUDA tensors travel through CuPy")
    device = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
    values = (torch.arange(6, device=device) % 4 + ctx.rank).to(dtype)
    total = hvd.allreduce(values, op="sum", ctx=ctx)
    gathered = hvd.allgather(values, ctx=ctx)
    torch.cuda.synchronize()
    expected = sum((torch.arange(6) % 4 + r).to(torch.float64) for r in range(ctx.size))
    with all_ranks(str(dtype)):
        assert total.is_cuda and total.dtype == dtype and gathered.is_cuda
        np.testing.assert_allclose(total.double().cpu().numpy(), expected.numpy())
        assert gathered.shape == (6 * ctx.size,)


test_cuda_tensors_stay_on_the_device_mpi = mpi_twin(test_cuda_tensors_stay_on_the_device)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_model_trains_like_one_process(ctx):
    pytest.importorskip("cupy", reason="CUDA tensors travel through CuPy")
    device = torch.device("cuda", ctx.local_rank % torch.cuda.device_count())
    reference = _model()
    _train(reference, torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9),
           [_batch(s) for s in range(3)])
    model = _model().to(device)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1,
                                                         momentum=0.9),
                                         model.named_parameters(), ctx=ctx)
    _train(model, optimizer, [tuple(t.to(device) for t in _batch(s, ctx.rank, ctx.size))
                              for s in range(3)])
    with all_ranks("CUDA parameters"):
        _same_parameters(model.cpu(), reference, rtol=1e-9)


test_cuda_model_trains_like_one_process_mpi = mpi_twin(test_cuda_model_trains_like_one_process)
