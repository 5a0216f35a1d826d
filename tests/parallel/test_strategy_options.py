"""Options of the strategies at work: LocalSGD's warm-up, FedAvg's client sampling and
FedProx's proximal term, AdaptiveBatchSize's norm test."""
import numpy as np
import pytest

import hpcdist
from hpcdist.parallel import AdaptiveBatchSize, DivergenceError, FederatedAveraging, LocalSGD
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin
from tests.parallel._strategies import (
    backward,
    local_rows,
    make_loss,
    make_model,
    make_optimizer,
    parameters,
    step_data,
    whole_batch_training,
)

STEPS = 4
KIND = "hpcdist.nn"


def test_warmup_steps_average_gradients_like_data_parallel(ctx):
    X, y = step_data(STEPS)
    model = make_model(KIND)
    s = LocalSGD(model, make_optimizer(KIND, model), period=1000, warmup_steps=STEPS, ctx=ctx)
    for step in range(STEPS):
        rows = local_rows(step, ctx.rank, ctx.size)
        backward(KIND, model, make_loss(KIND), X[rows], y[rows])
        s.step()
    expected = whole_batch_training(KIND, STEPS, X, y)
    with all_ranks("warm-up"):
        for index, (actual, wanted) in enumerate(zip(parameters(KIND, model), expected)):
            check_array(actual, wanted, rtol=1e-12, atol=1e-14, what=f"parameter {index}")
        assert s.stats()["communication_rounds"] == (STEPS if ctx.size > 1 else 0)


test_warmup_steps_average_gradients_like_data_parallel_mpi = mpi_twin(
    test_warmup_steps_average_gradients_like_data_parallel)


def local_training(X, y, mu, batch, rank):
    """FedProx by hand on one replica: SGD steps on loss + mu/2 |w - w0|^2."""
    model = make_model(KIND)
    optimizer = make_optimizer(KIND, model)
    anchors = parameters(KIND, model)
    loss_fn = make_loss(KIND)
    order = np.random.default_rng((7, 0, rank)).permutation(len(X))
    for start in range(0, len(X), batch):
        rows = order[start:start + batch]
        backward(KIND, model, loss_fn, X[rows], y[rows])
        for p, anchor in zip(model.parameters(), anchors):
            p.grad += mu * (p.data - anchor)
        optimizer.step()
    return parameters(KIND, model)


@pytest.mark.parametrize("mu", [0.0, 0.5])
def test_one_sampled_client_trains_with_the_proximal_term(ctx, mu):
    """clients_per_round=1: the round's model is the sampled rank's local training (FedProx's
    term included), whatever the other ranks hold."""
    X, y = step_data(2)
    model = make_model(KIND)
    fed = FederatedAveraging(model, make_optimizer(KIND, model), clients_per_round=1,
                             batch_size=6, proximal_mu=mu, seed=7, ctx=ctx)
    sampled = fed.sampled_ranks()
    mine = X if ctx.rank in sampled else X[: 3 + ctx.rank]  # unsampled rows never count
    fed.round(mine, y[: len(mine)], make_loss(KIND))
    expected = local_training(X, y, mu, 6, sampled[0])
    other = make_model(KIND)
    with all_ranks("FedProx"):
        assert len(sampled) == 1 and sampled == FederatedAveraging(
            other, make_optimizer(KIND, other), clients_per_round=1, seed=7,
            ctx=ctx).sampled_ranks(0)
        for index, (actual, wanted) in enumerate(zip(parameters(KIND, model), expected)):
            check_array(actual, wanted, rtol=1e-12, atol=1e-14, what=f"parameter {index}")
        assert fed.stats()["steps"] == (4 if ctx.rank in sampled else 0)


test_one_sampled_client_trains_with_the_proximal_term_mpi = mpi_twin(
    test_one_sampled_client_trains_with_the_proximal_term)


@pytest.mark.mpi(min_size=2)
def test_norm_test_grows_the_batch_by_the_formula(ctx):
    """Rank r's gradient g + (r - mean r) * d: the variance estimate and the next batch follow
    Byrd et al.'s norm test; average=True hands back the row-weighted mean."""
    g, d = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.1, -0.2])
    rows = 4 + ctx.rank
    grads = [g + (ctx.rank - (ctx.size - 1) / 2) * d]
    adaptive = AdaptiveBatchSize(8, 10_000, variance_threshold=0.01, ctx=ctx)
    batch = adaptive.update(grads, local_batch=rows, average=True)
    counts = np.arange(ctx.size) + 4
    locals_ = [g + (r - (ctx.size - 1) / 2) * d for r in range(ctx.size)]
    total = counts.sum()
    mean = sum(c * v for c, v in zip(counts, locals_)) / total
    variance = sum(c * np.sum((v - mean) ** 2) for c, v in zip(counts, locals_)) / (ctx.size - 1)
    wanted = variance / (0.01 * np.sum(mean ** 2))
    with all_ranks("norm test"):
        check_array(grads[0], mean, rtol=1e-12, atol=1e-14, what="averaged gradient")
        assert adaptive.last_ratio == pytest.approx(variance / (total * np.sum(mean ** 2)))
        assert batch == max(8, int(np.ceil(wanted))) if adaptive.last_ratio > 0.01 else 8
    capped = AdaptiveBatchSize(8, 9, variance_threshold=1e-9, ctx=ctx)
    with all_ranks("bounds"):
        assert capped.update([np.full(3, ctx.rank, float)]) == 9      # never past max_batch
        assert capped.update([np.ones(3)]) == 9                       # never shrinks
        assert capped.state_dict() == {"batch_size": 9}


def test_one_rank_keeps_its_batch_and_bad_arguments(ctx):
    if ctx.size == 1:
        assert AdaptiveBatchSize(4, 64, ctx=ctx).update(np.ones(3)) == 4
    error = hpcdist.InvalidArgumentError
    expect_error(error, AdaptiveBatchSize, 0, 8, ctx=ctx, match=r"min_batch=0 should be >= 1")
    expect_error(error, AdaptiveBatchSize, 16, 8, ctx=ctx,
                 match=r"max_batch=8 should be >= 16 \(at least min_batch=16\)")
    expect_error(error, AdaptiveBatchSize, 8, 16, variance_threshold=0.0, ctx=ctx,
                 match=r"variance_threshold=0.0 should be a finite number > 0")
    for grads in ("x", []):
        expect_error(hpcdist.InvalidArgumentTypeError, AdaptiveBatchSize(4, 64, ctx=ctx).update,
                     grads, match=r"grads should be an array or a non-empty sequence of arrays")
    nan_on_last = np.full(3, np.nan if ctx.rank == ctx.size - 1 else 1.0)
    expect_error(DivergenceError, AdaptiveBatchSize(4, 64, ctx=ctx).update, nan_on_last,
                 match=r"AdaptiveBatchSize.update: the gradients hold NaN or infinity")


test_one_rank_keeps_its_batch_and_bad_arguments_mpi = mpi_twin(
    test_one_rank_keeps_its_batch_and_bad_arguments)


@pytest.mark.mpi(min_size=2)
def test_adaptive_settings_that_differ_between_ranks(ctx):
    adaptive = AdaptiveBatchSize(8, 64 if ctx.rank == 0 else 32, ctx=ctx)
    expect_error(hpcdist.ConfigMismatchError, adaptive.update, np.ones(3),
                 match=r"AdaptiveBatchSize.update: max_batch differs across ranks: rank 0 has 64")
