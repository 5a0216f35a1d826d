"""Bad options, options that differ between ranks, and divergence: clear errors on every rank."""
import numpy as np
import pytest

import hpcdist
from hpcdist.nn.optim import SGD
from hpcdist.parallel import (
    AggregationMethod,
    DivergenceError,
    ElasticAveraging,
    FederatedAveraging,
    GossipSGD,
    LocalSGD,
    TrainingStrategy,
)
from tests.helpers import all_ranks, expect_error, mpi_twin
from tests.parallel._strategies import (
    KINDS,
    backward,
    local_rows,
    make_loss,
    make_model,
    make_optimizer,
    need,
    step_data,
)


def model_and_optimizer():
    model = make_model("hpcdist.nn")
    return model, make_optimizer("hpcdist.nn", model)


def test_bad_options_name_the_value_and_the_fix(ctx):
    model, optimizer = model_and_optimizer()
    error = hpcdist.InvalidArgumentError
    expect_error(error, LocalSGD, model, optimizer, period=0, ctx=ctx,
                 match=r"LocalSGD: period=0 should be >= 1 \(local steps between two averages")
    expect_error(hpcdist.InvalidArgumentTypeError, LocalSGD, model, optimizer, period=2.5,
                 ctx=ctx, match=r"period=2.5 should be an integer")
    expect_error(error, LocalSGD, model, optimizer, warmup_steps=-1, ctx=ctx,
                 match=r"warmup_steps=-1 should be >= 0")
    for alpha in (0.0, 1.0, 1.5, -0.1, float("nan")):
        expect_error(error, ElasticAveraging, model, optimizer, alpha=alpha, ctx=ctx,
                     match=rf"ElasticAveraging: alpha={alpha!r} should be in \(0, 1\)")
    expect_error(error, ElasticAveraging, model, optimizer, period=0, ctx=ctx,
                 match=r"period=0 should be >= 1")
    for aggregation in ("elastic", "bogus"):
        expect_error(error, ElasticAveraging, model, optimizer, aggregation=aggregation,
                     ctx=ctx, match=rf"aggregation='{aggregation}' is not supported; use "
                                    r"aggregation='sync' \(synchronous EASGD\) or 'async'")
    for clients in (0, ctx.size + 1):
        expect_error(error, FederatedAveraging, model, optimizer, clients_per_round=clients,
                     ctx=ctx, match=rf"clients_per_round={clients} should be in \[1, {ctx.size}\]")
    expect_error(error, FederatedAveraging, model, optimizer, proximal_mu=-1.0, ctx=ctx,
                 match=r"proximal_mu=-1.0 should be a finite number >= 0")
    expect_error(error, FederatedAveraging, model, optimizer, batch_size=0, ctx=ctx,
                 match=r"batch_size=0 should be >= 1")
    expect_error(error, GossipSGD, model, optimizer, topology="torus", ctx=ctx,
                 match=r"topology='torus' is unknown; use one of 'ring', 'exponential', "
                       r"'complete' or a dict")
    expect_error(error, GossipSGD, model, optimizer, ctx=ctx,
                 topology={r: [] for r in range(ctx.size + 1)},
                 match=rf"names rank {ctx.size}, outside the world of {ctx.size} ranks")
    expect_error(hpcdist.InvalidArgumentTypeError, LocalSGD, hpcdist.DDP(model, ctx=ctx),
                 optimizer, ctx=ctx, match=r"module is a DistributedDataParallel; pass the "
                                           r"model itself")
    expect_error(hpcdist.InvalidArgumentTypeError, LocalSGD, object(), optimizer, ctx=ctx,
                 match=r"module is a object, not an hpcdist.nn.Module or a torch.nn.Module")
    expect_error(hpcdist.InvalidArgumentTypeError, LocalSGD, model, None, ctx=ctx,
                 match=r"optimizer is a NoneType")


test_bad_options_name_the_value_and_the_fix_mpi = mpi_twin(
    test_bad_options_name_the_value_and_the_fix)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cls", [LocalSGD, ElasticAveraging, GossipSGD, FederatedAveraging])
def test_an_optimizer_of_other_parameters_is_refused(ctx, kind, cls):
    """An optimizer that does not step the module's parameters would leave the averaged model
    untrained: the constructor names how many parameters differ and the fix."""
    need(kind)
    model = make_model(kind)
    other = make_model(kind)
    fix = r"make the optimizer from this module's parameters"
    expect_error(hpcdist.InvalidArgumentError, cls, model, make_optimizer(kind, other), ctx=ctx,
                 match=[rf"{cls.__name__}: the optimizer holds 4 parameter\(s\) that are not "
                        r"the module's and lacks 4 of the module's 4 trainable", fix])
    first_layer = list(model.parameters())[:2]
    part = (SGD(first_layer, lr=0.1) if kind == "hpcdist.nn"
            else need(kind).optim.SGD(first_layer, lr=0.1))
    expect_error(hpcdist.InvalidArgumentError, cls, model, part, ctx=ctx,
                 match=[r"the optimizer lacks 2 of the module's 4 trainable parameter\(s\) "
                        r"\(the first: '2.weight'\)", fix])
    cls(model, make_optimizer(kind, model), ctx=ctx)  # its own optimizer is accepted


test_an_optimizer_of_other_parameters_is_refused_mpi = mpi_twin(
    test_an_optimizer_of_other_parameters_is_refused)


def test_enums_are_their_strings():
    assert TrainingStrategy("local_sgd") is TrainingStrategy.LOCAL_SGD
    assert TrainingStrategy.DECENTRALIZED == "gossip" and str(TrainingStrategy.FEDERATED) == \
        "federated"
    assert [s.value for s in TrainingStrategy] == ["data_parallel", "local_sgd", "easgd",
                                                   "gossip", "federated", "parameter_server",
                                                   "pipeline"]
    assert [a.value for a in AggregationMethod] == ["sync", "async", "elastic"]
    assert hpcdist.TrainingStrategy is TrainingStrategy
    assert hpcdist.AggregationMethod is AggregationMethod


def one_step(s, model, ctx):
    X, y = step_data(1)
    rows = local_rows(0, ctx.rank, ctx.size)
    backward("hpcdist.nn", model, make_loss("hpcdist.nn"), X[rows], y[rows])
    s.step()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("make, name, match", [
    (lambda m, o, r, ctx: LocalSGD(m, o, period=8 if r == 0 else 4, ctx=ctx), "LocalSGD.step",
     r"period differs across ranks: rank 0 has 8, rank.* 1.* 4"),
    (lambda m, o, r, ctx: GossipSGD(m, o, topology="ring" if r == 0 else "complete", ctx=ctx),
     "GossipSGD.step", r"topology differs across ranks: rank 0 has 'ring'"),
    (lambda m, o, r, ctx: ElasticAveraging(m, o, alpha=0.1 if r == 0 else 0.2, ctx=ctx),
     "ElasticAveraging.step", r"alpha differs across ranks: rank 0 has 0.1"),
])
def test_options_that_differ_between_ranks_raise_at_the_first_step(ctx, make, name, match):
    model, optimizer = model_and_optimizer()
    s = make(model, optimizer, ctx.rank, ctx)  # the constructor does not communicate
    expect_error(hpcdist.ConfigMismatchError, one_step, s, model, ctx, match=[name, match])


@pytest.mark.mpi(min_size=2)
def test_different_initial_parameters_are_named(ctx):
    model = make_model("hpcdist.nn", seed=0 if ctx.rank == 0 else 1)
    s = LocalSGD(model, make_optimizer("hpcdist.nn", model), ctx=ctx)
    expect_error(hpcdist.ConfigMismatchError, one_step, s, model, ctx,
                 match=[r"initial values of 0.weight differs across ranks",
                        r"broadcast rank 0's parameters first"])
    fed_model = make_model("hpcdist.nn", hidden=7 + (ctx.rank == 0))
    fed = FederatedAveraging(fed_model, make_optimizer("hpcdist.nn", fed_model), ctx=ctx)
    expect_error(hpcdist.ConfigMismatchError, fed.round, np.zeros((2, 5)), np.zeros(2, int),
                 make_loss("hpcdist.nn"),
                 match=r"FederatedAveraging.round: parameter 0.weight differs across ranks: "
                       r"rank 0 has float64\[8, 5\]")


def poison(model, ctx):
    if ctx.rank == ctx.size - 1:
        next(iter(model.parameters())).data[0, 0] = np.nan


@pytest.mark.parametrize("make, match", [
    (lambda m, o, ctx: LocalSGD(m, o, period=2, ctx=ctx),
     r"LocalSGD: the parameters hold NaN or infinity after the average at step 2"),
    (lambda m, o, ctx: ElasticAveraging(m, o, period=2, ctx=ctx),
     r"ElasticAveraging: the parameters hold NaN or infinity after the average at step 2"),
])
def test_nan_after_an_average_names_the_strategy_and_step(ctx, make, match):
    model, optimizer = model_and_optimizer()
    s = make(model, optimizer, ctx)
    one_step(s, model, ctx)
    poison(model, ctx)
    if ctx.size == 1 and isinstance(s, LocalSGD):
        return  # one rank: nothing is averaged
    expect_error(DivergenceError, one_step, s, model, ctx, match=[match, "lower the learning"])


test_nan_after_an_average_names_the_strategy_and_step_mpi = mpi_twin(
    test_nan_after_an_average_names_the_strategy_and_step)


@pytest.mark.mpi(min_size=2)
def test_a_bad_federated_round_raises_on_every_rank(ctx):
    model, optimizer = model_and_optimizer()
    fed = FederatedAveraging(model, optimizer, ctx=ctx)
    X, y = step_data(1)
    last = ctx.rank == ctx.size - 1
    expect_error(hpcdist.InvalidArgumentError, fed.round, X, y[:-1] if last else y,
                 make_loss("hpcdist.nn"), match=r"X_local has \d+ rows but y_local has")
    expect_error(hpcdist.InvalidArgumentTypeError, fed.round, X, y,
                 "mse" if last else make_loss("hpcdist.nn"),
                 match=r"loss_fn='mse' should be a callable loss\(output, y\)")


@pytest.mark.mpi(min_size=2)
def test_nan_in_federated_round_and_finalize(ctx):
    model, optimizer = model_and_optimizer()
    fed = FederatedAveraging(model, optimizer, ctx=ctx)
    X, y = step_data(1)
    fed.round(X, y, make_loss("hpcdist.nn"))
    poison(model, ctx)
    expect_error(DivergenceError, fed.round, X, y, make_loss("hpcdist.nn"),
                 match=r"FederatedAveraging: the parameters hold NaN or infinity after the "
                       r"average at round 2")
    model, optimizer = model_and_optimizer()
    s = LocalSGD(model, optimizer, period=100, ctx=ctx)
    one_step(s, model, ctx)
    poison(model, ctx)
    expect_error(DivergenceError, s.finalize, match=r"average at finalize \(after step 1\)")


@pytest.mark.mpi(min_size=2)
def test_gossip_nan_reaches_every_rank_at_the_same_step(ctx):
    """NaN on the last rank of a ring: every rank raises at the step the flag has crossed the
    ring (its diameter later), naming the step it was first seen."""
    model, optimizer = model_and_optimizer()
    s = GossipSGD(model, optimizer, topology="ring", ctx=ctx)
    one_step(s, model, ctx)
    poison(model, ctx)
    raised_at = []

    def steps():
        for _ in range(ctx.size + 2):
            one_step(s, model, ctx)
            raised_at.append(s.steps)

    diameter = ctx.size // 2
    expect_error(DivergenceError, steps,
                 match=rf"GossipSGD: the parameters hold NaN or infinity after the average at "
                       rf"step 2 on some rank; every rank raises at step {2 + diameter}")
    with all_ranks("same step"):
        assert s.steps == 2 + diameter
