"""The strategies train for real: held-out accuracy on digits at 2 and 4 ranks, and the bytes
they send (from ctx.stats()) against data parallelism."""
import numpy as np
import pytest

import hpcdist
from hpcdist.data import dirichlet_partition
from hpcdist.parallel import (
    ElasticAveraging,
    FederatedAveraging,
    GossipSGD,
    LocalSGD,
    ParameterServerTraining,
)
from tests.helpers import all_ranks, mpi_twin
from tests.parallel._strategies import (
    KINDS,
    backward,
    digits,
    make_loss,
    make_model,
    make_optimizer,
    need,
)

BATCH = 16  # rows per rank and step
EPOCHS = 12
STRATEGIES = {
    "local_sgd": lambda m, o, ctx: LocalSGD(m, o, period=8, ctx=ctx),
    "easgd": lambda m, o, ctx: ElasticAveraging(m, o, ctx=ctx),
    "easgd_async": lambda m, o, ctx: ElasticAveraging(m, o, aggregation="async", ctx=ctx),
    "parameter_server_async": lambda m, o, ctx: ParameterServerTraining(m, o, mode="async",
                                                                        ctx=ctx),
    "gossip": lambda m, o, ctx: GossipSGD(m, o, topology="ring", ctx=ctx),
}


def accuracy(kind, model, X, y):
    if kind == "torch":
        import torch
        with torch.no_grad():
            scores = model(torch.as_tensor(X)).numpy()
    else:
        scores = model(X)
    return float((scores.argmax(axis=1) == y).mean())


def train_steps(kind, model, step, X, y, rows, epochs, rank):
    """``epochs`` shuffled passes over this rank's rows, calling ``step()`` after each backward."""
    loss_fn = make_loss(kind)
    rng = np.random.default_rng(rank)
    for _ in range(epochs):
        order = rng.permutation(rows)
        for start in range(0, len(order) - BATCH + 1, BATCH):
            batch = order[start:start + BATCH]
            backward(kind, model, loss_fn, X[batch], y[batch])
            step()


#: asynchronous parameter-server training applies every worker's update as it comes, with
#: the staleness the machine's load gives it: under a loaded CI run at 4 ranks on 2 cores
#: 12 epochs once ended at 0.947; it gets a third more
EPOCHS_OF = {"parameter_server_async": 16}


def at_2_and_4_ranks(ctx):
    if ctx.size not in (2, 4):
        pytest.skip("convergence is checked at 2 and 4 ranks")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_averaging_strategies_reach_95_percent_on_digits(ctx, kind, strategy):
    at_2_and_4_ranks(ctx)
    need(kind)
    X, y, rows, X_test, y_test = digits(ctx.rank, ctx.size)
    model = make_model(kind, n_in=64, hidden=64, n_out=10)
    optimizer = make_optimizer(kind, model, lr=0.1, momentum=0.9)
    s = STRATEGIES[strategy](model, optimizer, ctx)
    train_steps(kind, model, s.step, X, y, rows, EPOCHS_OF.get(strategy, EPOCHS), ctx.rank)
    s.finalize()
    score = accuracy(kind, model, X_test, y_test)
    with all_ranks(f"{strategy} ({kind}) held-out accuracy"):
        assert score >= 0.95, f"{score:.4f} < 0.95"
    assert hpcdist.allreduce(score, op="max", ctx=ctx) == score  # the same model everywhere


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("split", ["balanced", "dirichlet"])
def test_federated_averaging_on_digits(ctx, kind, split):
    """FedAvg: >= 0.95 on balanced shares, >= 0.9 on a label-skewed Dirichlet(0.5) split."""
    at_2_and_4_ranks(ctx)
    need(kind)
    X, y, rows, X_test, y_test = digits(ctx.rank, ctx.size)
    if split == "dirichlet":
        rows = dirichlet_partition(y, ctx.size, 0.5, seed=0)[ctx.rank]
    model = make_model(kind, n_in=64, hidden=64, n_out=10)
    fed = FederatedAveraging(model, make_optimizer(kind, model, lr=0.1, momentum=0.9),
                             batch_size=BATCH, seed=1, ctx=ctx)
    losses = [fed.round(X[rows], y[rows], make_loss(kind)) for _ in range(15)]
    score = accuracy(kind, model, X_test, y_test)
    target = 0.95 if split == "balanced" else 0.9
    with all_ranks(f"FedAvg ({kind}, {split}) held-out accuracy"):
        assert score >= target, f"{score:.4f} < {target}"
        assert losses[-1] < losses[0]


def bytes_sent(ctx):
    return sum(record["bytes_sent"] for record in ctx.stats().values())


@pytest.mark.mpi(min_size=2)
def test_local_sgd_period_8_sends_at_most_a_quarter_of_data_parallel(ctx):
    X, y, rows, _, _ = digits(ctx.rank, ctx.size)
    ctx.reset_stats()
    ddp = hpcdist.DDP(make_model("hpcdist.nn", n_in=64, hidden=32, n_out=10), ctx=ctx)
    optimizer = make_optimizer("hpcdist.nn", ddp, lr=0.1)
    loss_fn = make_loss("hpcdist.nn")
    rng = np.random.default_rng(ctx.rank)
    for _ in range(2):
        order = rng.permutation(rows)
        for start in range(0, len(order) - BATCH + 1, BATCH):
            batch = order[start:start + BATCH]
            ddp.zero_grad()
            loss_fn(ddp(X[batch]), y[batch])
            ddp.backward(loss_fn.backward())
            optimizer.step()
    data_parallel = bytes_sent(ctx)
    ctx.reset_stats()
    model = make_model("hpcdist.nn", n_in=64, hidden=32, n_out=10)
    s = LocalSGD(model, make_optimizer("hpcdist.nn", model, lr=0.1), period=8, ctx=ctx)
    train_steps("hpcdist.nn", model, s.step, X, y, rows, 2, ctx.rank)
    local = bytes_sent(ctx)
    with all_ranks("bytes"):
        assert local <= data_parallel / 4, f"local SGD {local} B, data parallel {data_parallel} B"
        assert local == s.stats()["bytes_sent"]
        assert s.stats()["communication_rounds"] == s.stats()["steps"] // 8


def test_gossip_bytes_per_step_do_not_grow_with_ranks(ctx):
    """A ring sends its parameters to at most 2 neighbours per step, at any size."""
    X, y, rows, _, _ = digits(ctx.rank, ctx.size)
    model = make_model("hpcdist.nn", n_in=64, hidden=32, n_out=10)
    parameter_bytes = sum(p.data.nbytes for p in model.parameters())
    s = GossipSGD(model, make_optimizer("hpcdist.nn", model, lr=0.1), ctx=ctx)
    train_steps("hpcdist.nn", model, s.step, X, y, rows[:4 * BATCH], 1, ctx.rank)
    stats = s.stats()
    per_step = stats["bytes_sent"] / stats["steps"]
    neighbours = min(2, ctx.size - 1)
    with all_ranks("gossip bytes"):
        assert stats["steps"] == 4
        assert per_step == neighbours * (parameter_bytes + 8)  # parameters and a NaN flag
        if s.graph is not None:
            record = s.graph.stats()["neighbor_allgather"]
            assert record["bytes_sent"] == stats["bytes_sent"] and record["calls"] == 4


test_gossip_bytes_per_step_do_not_grow_with_ranks_mpi = mpi_twin(
    test_gossip_bytes_per_step_do_not_grow_with_ranks)
