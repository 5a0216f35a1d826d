"""Degenerate cases of the model-averaging strategies train exactly like data parallelism.

LocalSGD(period=1) and GossipSGD("complete") with plain SGD, and FedAvg with every
rank sampled, one full-batch local step and equal counts, all equal one process
stepping on the whole global batch (float64), with an hpcdist.nn model and a torch one.
"""
import numpy as np
import pytest

import hpcdist
from hpcdist.parallel import ElasticAveraging, FederatedAveraging, GossipSGD, LocalSGD
from tests.helpers import all_ranks, check_array, mpi_twin
from tests.parallel._strategies import (
    GLOBAL_BATCH,
    KINDS,
    backward,
    local_rows,
    make_loss,
    make_model,
    make_optimizer,
    need,
    parameters,
    step_data,
    whole_batch_training,
)

STEPS = 4
AVERAGING = {
    "local_sgd": lambda model, optimizer, ctx: LocalSGD(model, optimizer, period=1, ctx=ctx),
    "gossip_complete": lambda model, optimizer, ctx: GossipSGD(model, optimizer,
                                                               topology="complete", ctx=ctx),
}


def check_parameters(actual, expected, what):
    with all_ranks(what):
        for index, (a, e) in enumerate(zip(actual, expected)):
            check_array(a, e, rtol=1e-12, atol=1e-14, what=f"{what} parameter {index}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", sorted(AVERAGING))
def test_averaging_every_step_equals_data_parallel(ctx, kind, strategy):
    need(kind)
    X, y = step_data(STEPS)
    model = make_model(kind)
    optimizer = make_optimizer(kind, model)
    s = AVERAGING[strategy](model, optimizer, ctx)
    loss_fn = make_loss(kind)
    for step in range(STEPS):
        rows = local_rows(step, ctx.rank, ctx.size)
        backward(kind, model, loss_fn, X[rows], y[rows])
        s.step()
    check_parameters(parameters(kind, model), whole_batch_training(kind, STEPS, X, y),
                     f"{strategy} ({kind})")
    with all_ranks("stats"):
        assert s.stats()["steps"] == STEPS
        assert s.stats()["communication_rounds"] == (STEPS if ctx.size > 1 else 0)


test_averaging_every_step_equals_data_parallel_mpi = mpi_twin(
    test_averaging_every_step_equals_data_parallel)


@pytest.mark.parametrize("kind", KINDS)
def test_local_sgd_with_period_1_equals_ddp(ctx, kind):
    """Against DistributedDataParallel itself (hpcdist.nn), or torch's one-process run."""
    need(kind)
    X, y = step_data(STEPS)
    model = make_model("hpcdist.nn")
    ddp = hpcdist.DDP(make_model("hpcdist.nn"), ctx=ctx)
    optimizers = [make_optimizer("hpcdist.nn", model, momentum=0.9),
                  make_optimizer("hpcdist.nn", ddp, momentum=0.9)]
    s = LocalSGD(model, optimizers[0], period=1, ctx=ctx)
    loss_fn = make_loss("hpcdist.nn")
    for step in range(STEPS):
        rows = local_rows(step, ctx.rank, ctx.size)
        backward("hpcdist.nn", model, loss_fn, X[rows], y[rows])
        s.step()
        ddp.zero_grad()
        loss_fn(ddp(X[rows]), y[rows])
        ddp.backward(loss_fn.backward())
        optimizers[1].step()
    # momentum is linear in the gradients: averaging after each step still equals DDP
    check_parameters(parameters("hpcdist.nn", model), parameters("hpcdist.nn", ddp.module),
                     "LocalSGD(period=1) against DDP")


test_local_sgd_with_period_1_equals_ddp_mpi = mpi_twin(test_local_sgd_with_period_1_equals_ddp)


@pytest.mark.parametrize("kind", KINDS)
def test_federated_full_batch_round_equals_data_parallel(ctx, kind):
    need(kind)
    X, y = step_data(STEPS)
    model = make_model(kind)
    fed = FederatedAveraging(model, make_optimizer(kind, model), local_epochs=1,
                             batch_size=GLOBAL_BATCH, ctx=ctx)
    loss_fn = make_loss(kind)
    for step in range(STEPS):
        rows = local_rows(step, ctx.rank, ctx.size)
        loss = fed.round(X[rows], y[rows], loss_fn)
    check_parameters(parameters(kind, model), whole_batch_training(kind, STEPS, X, y),
                     f"FederatedAveraging ({kind})")
    with all_ranks("rounds"):
        assert fed.sampled_ranks(0) == list(range(ctx.size))
        assert fed.rounds == STEPS and fed.stats()["steps"] == STEPS
        assert np.isfinite(loss)


test_federated_full_batch_round_equals_data_parallel_mpi = mpi_twin(
    test_federated_full_batch_round_equals_data_parallel)


@pytest.mark.mpi(min_size=2)
def test_elastic_update_follows_the_formula(ctx):
    """One elastic update: x_i - alpha (x_i - c) and c + alpha sum_i (x_i - c)."""
    model = make_model("hpcdist.nn")
    optimizer = make_optimizer("hpcdist.nn", model)
    s = ElasticAveraging(model, optimizer, alpha=0.3, period=1, ctx=ctx)
    X, y = step_data(1)
    rows = local_rows(0, ctx.rank, ctx.size)
    center = parameters("hpcdist.nn", model)
    backward("hpcdist.nn", model, make_loss("hpcdist.nn"), X[rows], y[rows])
    local = [c - 0.1 * p.grad for c, p in zip(center, model.parameters())]
    differences = [x - c for x, c in zip(local, center)]
    totals = [hpcdist.allreduce(d, ctx=ctx) for d in differences]
    s.step()
    with all_ranks("elastic update"):
        assert abs(s.alpha - 0.3) < 1e-15
        for index, (p, x, d) in enumerate(zip(model.parameters(), local, differences)):
            check_array(p.data, x - 0.3 * d, rtol=1e-12, atol=1e-14, what=f"replica {index}")
        flat_center = np.concatenate([(c + 0.3 * t).ravel() for c, t in zip(center, totals)])
        check_array(s.center[0], flat_center, rtol=1e-12, atol=1e-14, what="center")
    s.finalize()
    mean = [hpcdist.allreduce(p.data, op="mean", ctx=ctx) for p in model.parameters()]
    with all_ranks("finalize"):
        for p, m in zip(model.parameters(), mean):
            check_array(p.data, m, rtol=0, atol=0, what="finalized replica")
        assert ElasticAveraging(model, optimizer, ctx=ctx).alpha == pytest.approx(0.9 / ctx.size)
