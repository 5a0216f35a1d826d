"""hpcdist.torch.ShardedOptimizer (stages 1-2) and FullyShardedModule (stage 3): exactly like
DistributedOptimizer with the same torch optimizer, and like one process on the whole batch."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hpcdist  # noqa: E402
import hpcdist.torch as hvd  # noqa: E402
from hpcdist.exceptions import (  # noqa: E402
    ConfigMismatchError,
    InvalidArgumentError,
    InvalidArgumentTypeError,
)
from tests.helpers import all_ranks, expect_error, mpi_twin  # noqa: E402

GLOBAL_BATCH = 12
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda params: torch.optim.Adam(params, lr=0.01),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, amsgrad=True),
}


class Block(torch.nn.Module):
    def __init__(self, checkpointed):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(7, 7), torch.nn.Tanh())
        self.checkpointed = checkpointed

    def forward(self, x):
        if self.checkpointed:
            return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=False)
        return self.inner(x)


def make_model(seed=0, checkpointed=False):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), Block(checkpointed),
                               torch.nn.Linear(7, 3)).double()


def make_data(steps, micro=1):
    rng = np.random.default_rng(42)
    n = steps * micro * GLOBAL_BATCH
    return torch.from_numpy(rng.normal(size=(n, 5))), torch.from_numpy(rng.integers(0, 3, n))


def rows_of(batch, ctx):
    per_rank = GLOBAL_BATCH // ctx.size
    start = batch * GLOBAL_BATCH + ctx.rank * per_rank
    return slice(start, start + per_rank)


def train(ctx, kind, optimizer_name, steps=3, micro=1, checkpointed=False, no_sync=False):
    """kind: "single" (one process, whole batch), "ddp" (DistributedOptimizer), 1, 2 (sharded
    optimizer) or 3 (FullyShardedModule). Returns the whole model's state dict."""
    X, y = make_data(steps, micro)
    model = make_model(0 if ctx.rank == 0 or kind == "single" else 10 + ctx.rank, checkpointed)
    wrapped = model
    if kind == 3:
        wrapped = hvd.FullyShardedModule(model, ctx=ctx)
    optimizer = OPTIMIZERS[optimizer_name](wrapped.parameters())
    if kind == "ddp":
        hvd.broadcast_parameters(model, root=0, ctx=ctx)
        optimizer = hvd.DistributedOptimizer(optimizer, model.named_parameters(), ctx=ctx,
                                             backward_passes_per_step=micro)
    elif kind in (1, 2):
        optimizer = hvd.ShardedOptimizer(optimizer, model.named_parameters(), stage=kind,
                                         ctx=ctx)
    # the schedule drives the torch optimizer (the sharded one's is its .optimizer)
    scheduler = torch.optim.lr_scheduler.StepLR(getattr(optimizer, "optimizer", optimizer),
                                                step_size=1, gamma=0.5)
    for step in range(steps):
        optimizer.zero_grad()
        for m in range(micro):
            batch = step * micro + m
            rows = (slice(batch * GLOBAL_BATCH, (batch + 1) * GLOBAL_BATCH) if kind == "single"
                    else rows_of(batch, ctx))
            loss = torch.nn.functional.cross_entropy(wrapped(X[rows]), y[rows])
            if no_sync and kind in (1, 2) and m < micro - 1:
                with optimizer.no_sync():
                    loss.backward()
            else:
                loss.backward()
        optimizer.step()
        scheduler.step()
    return wrapped.state_dict()


def check_same(actual, expected, what, atol=1e-12):
    with all_ranks(what):
        assert list(actual) == list(expected)
        for name, value in expected.items():
            np.testing.assert_allclose(actual[name].numpy(), value.numpy(), rtol=0, atol=atol,
                                       err_msg=f"{what}: {name}")


@pytest.mark.parametrize("kind", [1, 2, 3])
@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_sharded_torch_trains_like_distributed_optimizer(ctx, kind, optimizer_name):
    expected = train(ctx, "ddp", optimizer_name)
    check_same(train(ctx, kind, optimizer_name), expected, f"stage {kind}, {optimizer_name}")


test_sharded_torch_trains_like_distributed_optimizer_mpi = mpi_twin(
    test_sharded_torch_trains_like_distributed_optimizer)


@pytest.mark.parametrize("kind", [1, 2, 3])
def test_sharded_torch_equals_one_process(ctx, kind):
    expected = train(ctx, "single", "adam")
    check_same(train(ctx, kind, "adam"), expected, f"stage {kind}", atol=1e-10)


test_sharded_torch_equals_one_process_mpi = mpi_twin(test_sharded_torch_equals_one_process)


@pytest.mark.parametrize("kind", [1, 2, 3])
def test_torch_utils_checkpoint_under_sharding(ctx, kind):
    expected = train(ctx, "ddp", "adam")
    check_same(train(ctx, kind, "adam", checkpointed=True), expected,
               f"stage {kind} with torch.utils.checkpoint")


test_torch_utils_checkpoint_under_sharding_mpi = mpi_twin(
    test_torch_utils_checkpoint_under_sharding)


@pytest.mark.parametrize("kind", [1, 2, 3])
def test_gradient_accumulation(ctx, kind):
    expected = train(ctx, "ddp", "sgd", micro=2)
    check_same(train(ctx, kind, "sgd", micro=2), expected, f"stage {kind}, 2 micro-batches")
    if kind != 3:
        check_same(train(ctx, kind, "sgd", micro=2, no_sync=True), expected,
                   f"stage {kind}, no_sync")


test_gradient_accumulation_mpi = mpi_twin(test_gradient_accumulation)


def test_optimizer_state_is_split(ctx):
    model = make_model()
    optimizer = hvd.ShardedOptimizer(torch.optim.Adam(model.parameters()),
                                     model.named_parameters(), stage=2, ctx=ctx)
    X, y = make_data(1)
    torch.nn.functional.cross_entropy(model(X[rows_of(0, ctx)]), y[rows_of(0, ctx)]).backward()
    optimizer.step()
    stats = optimizer.memory_stats()
    total = hpcdist.allreduce(np.array([stats["optimizer_state"], stats["gradients"]]), ctx=ctx)
    full = sum(p.numel() * 8 for p in model.parameters())
    with all_ranks("memory_stats"):
        assert total[0] == 2 * full and total[1] == full


test_optimizer_state_is_split_mpi = mpi_twin(test_optimizer_state_is_split)


def test_fully_sharded_state_dict_round_trip(ctx):
    fsm = hvd.FullyShardedModule(make_model(ctx.rank), ctx=ctx)
    state = fsm.state_dict()
    plain = make_model(0).state_dict()
    check_same(state, plain, "state_dict is rank 0's whole model")
    other = hvd.FullyShardedModule(make_model(5), ctx=ctx)
    other.load_state_dict(state)
    check_same(other.state_dict(), plain, "load_state_dict")
    expect_error(InvalidArgumentError, other.load_state_dict,
                 {**state, "0.weight": torch.zeros(2, 2)}, match=r"'0.weight' has shape")


test_fully_sharded_state_dict_round_trip_mpi = mpi_twin(test_fully_sharded_state_dict_round_trip)


def test_bad_input(ctx):
    model = make_model()
    adam = torch.optim.Adam(model.parameters())
    expect_error(InvalidArgumentError, hvd.ShardedOptimizer, adam, model.named_parameters(),
                 stage=3, ctx=ctx, match="stage=3 should be 1 or 2 .*FullyShardedModule")
    expect_error(InvalidArgumentTypeError, hvd.ShardedOptimizer, adam, model.named_parameters(),
                 stage="1", ctx=ctx, match="stage='1'")
    other = make_model()
    expect_error(InvalidArgumentError, hvd.ShardedOptimizer,
                 torch.optim.Adam(other.parameters()), model.named_parameters(), ctx=ctx,
                 match="holds 6 parameter")
    expect_error(InvalidArgumentTypeError, hvd.FullyShardedModule, "model", ctx=ctx,
                 match="module is a str")


test_bad_input_mpi = mpi_twin(test_bad_input)


@pytest.mark.mpi(min_size=2)
def test_mismatch_across_ranks(ctx):
    model = make_model()
    adam = torch.optim.Adam(model.parameters())
    expect_error(ConfigMismatchError, hvd.ShardedOptimizer, adam, model.named_parameters(),
                 stage=1 + ctx.rank % 2, ctx=ctx, match="stage differs across ranks")
    torch.manual_seed(0)
    odd = torch.nn.Linear(4, 3 + (ctx.rank == 1))
    expect_error(ConfigMismatchError, hvd.FullyShardedModule, odd, ctx=ctx, match="weight")
