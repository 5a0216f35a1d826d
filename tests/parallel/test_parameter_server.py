"""ParameterServer in its three modes: sync equals data parallelism, async and bounded converge,
the staleness bound holds under a straggler, traces replay bit for bit, bad input is named.

Each test runs serially (one worker serving itself) and, as its ``_mpi`` twin, under
``mpiexec -n N``; the straggler and replay tests need two ranks or more.
"""
import math
import time
from contextlib import contextmanager

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import hpcdist
from hpcdist.ml import MLPClassifier
from hpcdist.parallel import DivergenceError, ParameterServer, ParameterServerTraining
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin
from tests.parallel import _strategies as shared

N_FEATURES = 20
SLICE = 1000  # slice_size of the servers here: "big" (1005 elements) is sliced
LEARNING_RATE = 0.1


@contextmanager
def serving(**options):
    """A ParameterServer, closed (collectively) however the block ends."""
    ps = ParameterServer(slice_size=SLICE, **options)
    try:
        yield ps
    finally:
        ps.close()


def least_squares():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((400, N_FEATURES))
    truth = rng.standard_normal(N_FEATURES)
    return A, truth, A @ truth


def worker_loop(ps, ctx, steps, *, delay=None, big=False):
    """The training loop of the parameter server's docstring on a least-squares problem
    (plus a large parameter that is sliced over the ranks and takes a scaled copy of the
    same update); ``delay(step)``
    seconds of sleep per step imitate a slow worker. Returns the final parameters."""
    A, truth, b = least_squares()
    ps.set_parameters("w", np.zeros(N_FEATURES))
    if big:
        ps.set_parameters("big", np.zeros(SLICE + 5))
    names = ("w", "big") if big else ("w",)
    rng = np.random.default_rng(ctx.rank)
    for step in range(steps):
        w = ps.get_parameters("w")
        if big:
            ps.get_parameters("big")
        rows = rng.integers(0, len(A), 32)
        gradient = A[rows].T @ (A[rows] @ w - b[rows]) / len(rows)
        ps.accumulate_gradient("w", gradient)
        if big:
            ps.accumulate_gradient("big", np.resize(gradient, SLICE + 5))
        if delay is not None:
            time.sleep(delay(step))
        for name in names:
            if ps.ready(name):
                ps.apply_gradients(name, LEARNING_RATE)
                ps.clear_gradients(name)
    ps.synchronize()
    return {name: ps.get_parameters(name) for name in ps.names()}, truth


# -- sync equals data parallelism -----------------------------------------------------------
def test_sync_mode_trains_like_ddp(ctx):
    """The explicit loop (one name per parameter) and ParameterServerTraining, both against
    DistributedDataParallel with plain SGD in float64."""
    steps = 5
    X, y = shared.step_data(steps)
    loss_fn = shared.make_loss("hpcdist.nn")
    ddp = hpcdist.DDP(shared.make_model("hpcdist.nn"), ctx=ctx)
    ddp_optimizer = shared.make_optimizer("hpcdist.nn", ddp)
    model = shared.make_model("hpcdist.nn")
    wrapped = shared.make_model("hpcdist.nn")
    training = ParameterServerTraining(wrapped, shared.make_optimizer("hpcdist.nn", wrapped),
                                       mode="sync", ctx=ctx)
    named = list(model.named_parameters())
    with serving(mode="sync", ctx=ctx) as ps:
        for name, p in named:
            ps.set_parameters(name, p.data)
        for step in range(steps):
            rows = shared.local_rows(step, ctx.rank, ctx.size)
            shared.backward("hpcdist.nn", ddp, loss_fn, X[rows], y[rows])
            ddp_optimizer.step()
            shared.backward("hpcdist.nn", wrapped, loss_fn, X[rows], y[rows])
            training.step()
            for name, p in named:
                p.data[...] = ps.get_parameters(name)
            shared.backward("hpcdist.nn", model, loss_fn, X[rows], y[rows])
            for name, p in named:
                ps.accumulate_gradient(name, p.grad)
                if ps.ready(name):
                    ps.apply_gradients(name, 0.1)
                    ps.clear_gradients(name)
        for name, p in named:
            p.data[...] = ps.get_parameters(name)
        stats = ps.stats()
    training.finalize()
    expected = [p.data for p in ddp.parameters()]
    with all_ranks("sync ParameterServer against DDP"):
        for (name, p), e in zip(named, expected):
            check_array(p.data, e, rtol=1e-12, atol=1e-14, what=f"explicit loop: {name}")
        for p, e in zip(wrapped.parameters(), expected):
            check_array(p.data, e, rtol=1e-12, atol=1e-14, what="ParameterServerTraining")
        assert stats["pushes"] == steps * len(named) and stats["pulls"] == (steps + 1) * len(named)
        assert stats["max_staleness"] == 0


test_sync_mode_trains_like_ddp_mpi = mpi_twin(test_sync_mode_trains_like_ddp)


# -- convergence -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["sync", "async", "bounded"])
def test_every_mode_converges_on_least_squares(ctx, mode):
    steps = 120
    with serving(mode=mode, staleness=2, ctx=ctx) as ps:
        final, truth = worker_loop(ps, ctx, steps)
        stats = ps.stats()
    error = float(np.linalg.norm(final["w"] - truth))
    with all_ranks(f"{mode}: distance to the solution"):
        assert error < 1e-2, error
        assert stats["pushes"] == steps and stats["pulls"] == steps + 1
        if mode != "sync":
            assert stats["applies"] == steps
    # synchronize(): every rank reads the same final parameters
    gathered = hpcdist.allgather_object(final["w"].tobytes(), ctx=ctx)
    with all_ranks("the same parameters after synchronize"):
        assert all(g == gathered[0] for g in gathered)


test_every_mode_converges_on_least_squares_mpi = mpi_twin(
    test_every_mode_converges_on_least_squares)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_large_parameter_is_sliced_over_the_ranks(ctx, mode):
    """One slice per rank; one round of pushes of ``rank + 1`` gives the exact update."""
    shape = (SLICE + 5,)
    with serving(mode=mode, ctx=ctx) as ps:
        ps.set_parameters("big", np.ones(shape, dtype=np.float32))
        ps.accumulate_gradient("big", np.full(shape, ctx.rank + 1.0))
        if ps.ready("big"):
            ps.apply_gradients("big", 0.5)
        ps.synchronize()
        final = ps.get_parameters("big")
        owners = [owner for owner, _, _ in ps._layouts["big"][2]]
    total = sum(range(1, ctx.size + 1))
    expected = 1 - 0.5 * (total / ctx.size if mode == "sync" else total)
    with all_ranks(f"{mode}: the sliced parameter"):
        assert owners == list(range(ctx.size))
        assert final.dtype == np.float32 and final.shape == shape
        check_array(final, np.full(shape, expected, dtype=np.float32), what="after one round")


test_a_large_parameter_is_sliced_over_the_ranks_mpi = mpi_twin(
    test_a_large_parameter_is_sliced_over_the_ranks)


# -- straggler, staleness ------------------------------------------------------------------
def straggler(ctx):
    """Rank 1 sleeps 20 ms a step, the others 1 ms: without a step of their own a fast
    rank that owns the parameters could finish all its steps before the straggler's first
    request reaches it, and no update would then be stale."""
    return lambda step: 0.02 if ctx.rank == 1 else 0.001


@pytest.mark.mpi(min_size=2)
def test_bounded_staleness_holds_under_a_straggler(ctx):
    """With one slow rank, bounded keeps every gradient within (size - 1) * (2 s + 1) updates
    of the version it was computed on and makes the fast ranks wait; async lets it run far
    beyond that bound (so the check can fail)."""
    bound = 1
    results = {}
    for mode in ("bounded", "async"):
        with serving(mode=mode, staleness=bound, ctx=ctx) as ps:
            worker_loop(ps, ctx, 30, delay=straggler(ctx))
            results[mode] = ps.stats()
    limit = (ctx.size - 1) * (2 * bound + 1)
    worst = {mode: hpcdist.allreduce(stats["max_staleness"], op="max", ctx=ctx)
             for mode, stats in results.items()}
    with all_ranks("staleness"):
        assert worst["bounded"] <= limit, (worst, limit)
        assert worst["async"] > limit, (worst, limit)
        if ctx.rank == 0:
            assert results["bounded"]["seconds_waited"] > 0.05, results
            assert results["async"]["seconds_waited"] == 0.0, results


# -- trace and replay ------------------------------------------------------------------------
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("mode", ["async", "bounded"])
def test_replay_gives_the_same_parameters_bit_for_bit(ctx, tmp_path, mode):
    path = hpcdist.broadcast_object(str(tmp_path / "ps.trace.npz"), root=0, ctx=ctx)
    runs = []
    steps = 20
    for seed, options in ((1, {"trace": path}), (2, {"replay": path})):
        rng = np.random.default_rng([seed, ctx.rank])
        delays = rng.uniform(0, 0.004, steps)   # a different timing in each run
        with serving(mode=mode, staleness=1, ctx=ctx, **options) as ps:
            final, _ = worker_loop(ps, ctx, steps, delay=lambda step: delays[step], big=True)
        runs.append(final)
    with all_ranks("replayed parameters"):
        for name in runs[0]:
            assert runs[0][name].tobytes() == runs[1][name].tobytes(), name
    # a run that does more than the trace recorded is told so, not left waiting
    with serving(mode=mode, staleness=1, replay=path, ctx=ctx) as ps:
        worker_loop(ps, ctx, steps, big=True)
        with all_ranks("a pull beyond the trace"):
            expect_error(hpcdist.HpcdistError, ps.get_parameters, "w",
                         match=r"asks for a pull of 'w#0' that the trace does not hold")


# -- the strategies on top ------------------------------------------------------------------
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("mode", ["sync", "async", "bounded"])
def test_mlp_with_the_parameter_server_strategy_reaches_95_percent(ctx, mode):
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16, y, random_state=0)
    clf = MLPClassifier(hidden_layer_sizes=(64,), max_iter=20, random_state=0,
                        learning_rate_init=0.01,
                        strategy="parameter_server",
                        strategy_options={"mode": mode, "staleness": 2})
    clf.fit(X_train, y_train)
    score = clf.score(X_test, y_test)
    stats = clf._training.strategy.stats()
    with all_ranks(f"parameter_server ({mode}) held-out accuracy"):
        assert score >= 0.95, score
        assert stats["pushes"] == stats["steps"] > 0
    assert hpcdist.allreduce(score, op="max", ctx=ctx) == score  # the same model everywhere


test_mlp_with_the_parameter_server_strategy_reaches_95_percent_mpi = mpi_twin(
    test_mlp_with_the_parameter_server_strategy_reaches_95_percent)


# -- bad input -------------------------------------------------------------------------------
def test_bad_input_names_the_value_and_the_fix(ctx, tmp_path):
    error, type_error = hpcdist.InvalidArgumentError, hpcdist.InvalidArgumentTypeError
    expect_error(error, ParameterServer, mode="eventual", ctx=ctx,
                 match=r"mode='eventual' is not one of \('sync', 'async', 'bounded'\)")
    expect_error(type_error, ParameterServer, staleness=1.5, ctx=ctx,
                 match=r"staleness=1.5 should be an int")
    expect_error(error, ParameterServer, staleness=-1, ctx=ctx,
                 match=r"staleness=-1 should be >= 0")
    expect_error(error, ParameterServer, slice_size=0, ctx=ctx,
                 match=r"slice_size=0 should be an int >= 1")
    expect_error(error, ParameterServer, trace="a", replay="b", ctx=ctx,
                 match=r"give trace= or replay=, not both")
    expect_error(error, ParameterServer, replay=str(tmp_path / "missing.npz"), ctx=ctx,
                 match=r"missing.npz' does not exist; pass the trace= path")
    not_a_trace = tmp_path / "other.npz"
    np.savez(not_a_trace, x=np.zeros(2))
    expect_error(error, ParameterServer, replay=str(not_a_trace), ctx=ctx,
                 match=r"is not a trace written by ParameterServer")
    with serving(mode="async", ctx=ctx) as ps:
        expect_error(type_error, ps.set_parameters, "ints", np.arange(3), match=r"dtype int64 "
                     r"is not a floating type")
        ps.set_parameters("w", np.zeros((2, 3)))
        expect_error(hpcdist.InvalidStateError, ps.set_parameters, "w", np.zeros(2),
                     match=r"'w' is served already")
        expect_error(error, ps.get_parameters, "v",
                     match=r"'v' is not served; call set_parameters\('v', initial_values\) on "
                           r"every rank first \(served: \['w'\]\)")
        expect_error(error, ps.accumulate_gradient, "w", np.zeros(6),
                     match=r"grad has shape \(6,\), the parameters \(2, 3\)")
        expect_error(error, ps.accumulate_gradient, "w", np.zeros((2, 3)), worker_rank=ctx.size,
                     match=rf"worker_rank={ctx.size} should be a rank in 0\.\.{ctx.size - 1}")
        for rate in (-0.1, math.inf):
            expect_error(error, ps.apply_gradients, "w", rate,
                         match=rf"learning_rate={rate} should be a finite number >= 0")
        expect_error(DivergenceError, ps.accumulate_gradient, "w", np.full((2, 3), np.nan),
                     match=r"accumulate_gradient\('w'\): the gradient holds NaN or infinity")
        assert not ps.ready("w")
        ps.accumulate_gradient("w", np.ones((2, 3)))
        assert ps.ready("w")
        ps.clear_gradients("w")
        assert not ps.ready("w") and not ps.apply_gradients("w", 1.0)
        check_array(ps.get_parameters("w"), np.zeros((2, 3)), what="after clear_gradients")
    expect_error(hpcdist.InvalidStateError, ps.get_parameters, "w", match=r"the server is closed")
    with serving(mode="sync", ctx=ctx) as ps:
        ps.set_parameters("w", np.zeros(1))
    expect_error(error, ParameterServer, mode="async", replay=_trace(tmp_path, ctx), ctx=ctx,
                 match=rf"was recorded with mode='sync' at {ctx.size} ranks; this run has "
                       rf"mode='async' at {ctx.size}")


def _trace(tmp_path, ctx):
    """A sync trace on a path every rank shares."""
    path = hpcdist.broadcast_object(str(tmp_path / "sync.npz"), root=0, ctx=ctx)
    with serving(mode="sync", trace=path, ctx=ctx) as traced:
        traced.set_parameters("w", np.zeros(1))
    return path


test_bad_input_names_the_value_and_the_fix_mpi = mpi_twin(
    test_bad_input_names_the_value_and_the_fix)


@pytest.mark.mpi(min_size=2)
def test_options_and_parameters_must_agree_across_ranks(ctx):
    with serving(mode="sync" if ctx.rank == 0 else "async", ctx=ctx) as ps:
        expect_error(hpcdist.ConfigMismatchError, ps.set_parameters, "w", np.zeros(3),
                     match=r"ParameterServer.set_parameters\('w'\): mode differs across ranks: "
                           r"rank 0 has 'sync'")
    with serving(ctx=ctx) as ps:
        expect_error(hpcdist.ConfigMismatchError, ps.set_parameters, "w",
                     np.full(3, float(ctx.rank)), match=r"values differs across ranks")
