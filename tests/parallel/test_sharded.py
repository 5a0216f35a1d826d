"""ShardedDataParallel: stages 1-3 train exactly like DDP with the same optimizer."""
import numpy as np
import pytest

import hpcdist
from hpcdist import nn
from hpcdist.checkpoint import CheckpointManager
from hpcdist.exceptions import ConfigMismatchError, InvalidArgumentError, InvalidArgumentTypeError
from hpcdist.nn.amp import DynamicLossScaler
from hpcdist.nn.optim import SGD, Adam, AdamW, StepLR
from hpcdist.parallel import ShardedDataParallel
from tests.helpers import all_ranks, assert_on_all_ranks, check_array, expect_error, mpi_twin

GLOBAL_BATCH = 12
N_FEATURES, N_HIDDEN, N_CLASSES = 5, 7, 3   # 7 and 3 rows: no even split at 2 or 4 ranks
STAGES = [1, 2, 3]
OPTIMIZERS = {
    "sgd": lambda params: SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda params: Adam(params, lr=0.01, weight_decay=1e-3),
    "adamw": lambda params: AdamW(params, lr=0.01, amsgrad=True),
}


def make_model(seed=0, recompute=False):
    block = nn.Sequential(nn.Linear(N_HIDDEN, N_HIDDEN, dtype=np.float64, random_state=seed + 1),
                          nn.ReLU())
    return nn.Sequential(
        nn.Linear(N_FEATURES, N_HIDDEN, dtype=np.float64, random_state=seed), nn.Tanh(),
        nn.Checkpoint(block) if recompute else block,
        nn.Linear(N_HIDDEN, N_CLASSES, dtype=np.float64, random_state=seed + 2))


def make_data(steps, micro=1):
    rng = np.random.default_rng(42)
    X = rng.normal(size=(steps * micro * GLOBAL_BATCH, N_FEATURES))
    y = rng.integers(0, N_CLASSES, size=steps * micro * GLOBAL_BATCH)
    return X, y


def local_rows(batch, rank, size):
    per_rank = GLOBAL_BATCH // size
    start = batch * GLOBAL_BATCH + rank * per_rank
    return slice(start, start + per_rank)


def train(ctx, wrap, optimizer_name, steps=3, micro=1, no_sync=False, recompute=False,
          schedule=False):
    """Train with ``wrap(model, optimizer)`` (DDP or ShardedDataParallel); every rank starts
    from its own initialisation, so the wrapper must copy rank 0's."""
    X, y = make_data(steps, micro)
    model = make_model(0 if ctx.rank == 0 else 50 + ctx.rank, recompute)
    optimizer = OPTIMIZERS[optimizer_name](model.parameters())
    wrapped = wrap(model, optimizer)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.5) if schedule else None
    criterion = nn.CrossEntropyLoss()
    for step in range(steps):
        wrapped.zero_grad() if hasattr(wrapped, "step") else optimizer.zero_grad()
        for m in range(micro):
            rows = local_rows(step * micro + m, ctx.rank, ctx.size)
            criterion(wrapped(X[rows]), y[rows])
            if no_sync and m < micro - 1:
                with wrapped.no_sync():
                    wrapped.backward(criterion.backward())
            else:
                wrapped.backward(criterion.backward())
        wrapped.step() if hasattr(wrapped, "step") else optimizer.step()
        if scheduler is not None:
            scheduler.step()
    return wrapped


def ddp_wrap(ctx):
    return lambda model, optimizer: hpcdist.DDP(model, ctx=ctx)


def sdp_wrap(ctx, stage, **options):
    return lambda model, optimizer: ShardedDataParallel(model, optimizer, stage=stage, ctx=ctx,
                                                        **options)


def check_same_model(sdp, reference, what):
    state = sdp.full_state_dict()
    expected = reference.module.state_dict() if hasattr(reference, "module") \
        else reference.state_dict()
    with all_ranks(what):
        assert len(state) == len(expected)
        for (name, value), expected_value in zip(state.items(), expected.values()):
            np.testing.assert_allclose(value, expected_value, rtol=0, atol=1e-12,
                                       err_msg=f"{what}: {name}")


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("optimizer_name", sorted(OPTIMIZERS))
def test_sharded_trains_like_ddp(ctx, stage, optimizer_name):
    ddp = train(ctx, ddp_wrap(ctx), optimizer_name, schedule=True)
    sdp = train(ctx, sdp_wrap(ctx, stage), optimizer_name, schedule=True)
    check_same_model(sdp, ddp, f"stage {stage}, {optimizer_name}")


test_sharded_trains_like_ddp_mpi = mpi_twin(test_sharded_trains_like_ddp)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("bucket_size_mb", [0, 1e-4, 25])
def test_sharded_equals_one_process_on_the_whole_batch(ctx, stage, bucket_size_mb):
    X, y = make_data(3)
    model = make_model()
    optimizer = OPTIMIZERS["adam"](model.parameters())
    criterion = nn.CrossEntropyLoss()
    for step in range(3):
        rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        optimizer.zero_grad()
        criterion(model(X[rows]), y[rows])
        model.backward(criterion.backward())
        optimizer.step()
    sdp = train(ctx, sdp_wrap(ctx, stage, bucket_size_mb=bucket_size_mb), "adam")
    state = sdp.full_state_dict()
    for name, expected in model.state_dict().items():
        check_array(state[name], expected, rtol=1e-9, atol=1e-12, what=name)


test_sharded_equals_one_process_on_the_whole_batch_mpi = mpi_twin(
    test_sharded_equals_one_process_on_the_whole_batch)


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("no_sync", [False, True])
def test_gradient_accumulation_like_ddp(ctx, stage, no_sync):
    ddp = train(ctx, ddp_wrap(ctx), "sgd", micro=3, no_sync=no_sync)
    sdp = train(ctx, sdp_wrap(ctx, stage), "sgd", micro=3, no_sync=no_sync)
    check_same_model(sdp, ddp, f"stage {stage}, no_sync={no_sync}")


test_gradient_accumulation_like_ddp_mpi = mpi_twin(test_gradient_accumulation_like_ddp)


@pytest.mark.parametrize("stage", STAGES)
def test_recomputed_blocks_under_sharding(ctx, stage):
    ddp = train(ctx, ddp_wrap(ctx), "adam")
    sdp = train(ctx, sdp_wrap(ctx, stage), "adam", recompute=True)
    check_same_model(sdp, ddp, f"stage {stage} with nn.Checkpoint")


test_recomputed_blocks_under_sharding_mpi = mpi_twin(test_recomputed_blocks_under_sharding)


def test_frozen_parameter_stays_and_is_not_sharded(ctx):
    def freeze(wrap):
        def wrapped(model, optimizer):
            model[0].bias.requires_grad = False
            return wrap(model, optimizer)
        return wrapped
    for stage in STAGES:
        ddp = train(ctx, freeze(ddp_wrap(ctx)), "adam")
        sdp = train(ctx, freeze(sdp_wrap(ctx, stage)), "adam")
        check_same_model(sdp, ddp, f"stage {stage}, a frozen bias")


test_frozen_parameter_stays_and_is_not_sharded_mpi = mpi_twin(
    test_frozen_parameter_stays_and_is_not_sharded)


def _total(ctx, value):
    return int(hpcdist.allreduce(np.array([value], dtype=np.int64), ctx=ctx)[0])


def test_memory_stats_split_the_state(ctx):
    ddp_model = make_model()
    full = sum(p.nbytes for p in ddp_model.parameters())
    stats = {stage: train(ctx, sdp_wrap(ctx, stage), "adam", steps=1).memory_stats()
             for stage in STAGES}
    with all_ranks("memory_stats"):
        assert stats[1]["parameters"] == full and stats[1]["gradients"] == full
        assert stats[2]["parameters"] == full
        for stage in STAGES:
            assert set(stats[stage]) == {"parameters", "gradients", "optimizer_state"}
    # summed over the ranks, each sharded part is held exactly once
    for stage in STAGES:
        assert_on_all_ranks(_total(ctx, stats[stage]["optimizer_state"]) == 2 * full,
                            f"stage {stage}: optimizer state not split")
    for stage in (2, 3):
        assert_on_all_ranks(_total(ctx, stats[stage]["gradients"]) == full,
                            f"stage {stage}: gradients not split")
    assert_on_all_ranks(_total(ctx, stats[3]["parameters"]) == full, "parameters not split")


test_memory_stats_split_the_state_mpi = mpi_twin(test_memory_stats_split_the_state)


@pytest.mark.parametrize("stage", STAGES)
def test_checkpoint_restores_at_fewer_ranks_and_into_a_plain_model(ctx, stage, tmp_path_factory):
    directory = hpcdist.broadcast_object(str(tmp_path_factory.mktemp("sharded")), ctx=ctx)
    sdp = train(ctx, sdp_wrap(ctx, stage), "adam", steps=2)
    CheckpointManager(directory, ctx=ctx).save(2, sdp.state_dict())
    continued = train_more(ctx, sdp)
    # fewer ranks: the first size - 1 ranks (or all at one rank) restore and continue
    sub = ctx.split(0 if ctx.rank < max(ctx.size - 1, 1) else None)
    ok, message = True, ""
    if sub is not None:
        restored = CheckpointManager(directory, ctx=sub).restore()
        model = make_model(seed=99)
        other_stage = STAGES[(stage) % 3]
        again = ShardedDataParallel(model, Adam(model.parameters(), lr=0.01, weight_decay=1e-3),
                                    stage=other_stage, ctx=sub)
        again.load_state_dict(restored)
        state = train_more(sub, again)
        for name, value in continued.items():
            if not np.allclose(state[name], value, rtol=0, atol=1e-12):
                ok, message = False, f"restored at {sub.size} ranks: {name} differs"
    one = ctx.split(0 if ctx.rank == 0 else None)
    if one is not None:
        restored = CheckpointManager(directory, ctx=one).restore()
        model = make_model(seed=99)
        optimizer = Adam(model.parameters(), lr=0.01, weight_decay=1e-3)
        model.load_state_dict(restored["module"])
        optimizer.load_state_dict(restored["optimizer"])
        plain = train_more(None, (model, optimizer))
        for name, value in continued.items():
            if not np.allclose(plain[name], value, rtol=0, atol=1e-12):
                ok, message = False, f"plain model: {name} differs"
    assert_on_all_ranks(ok, message)


def train_more(ctx, wrapped, steps=2):
    """Two more steps after the first two (batches 2 and 3); the whole model's state."""
    X, y = make_data(4)
    criterion = nn.CrossEntropyLoss()
    if isinstance(wrapped, tuple):  # a plain model and optimizer on the whole batch
        model, optimizer = wrapped
        for step in range(2, 2 + steps):
            rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
            optimizer.zero_grad()
            criterion(model(X[rows]), y[rows])
            model.backward(criterion.backward())
            optimizer.step()
        return model.state_dict()
    for step in range(2, 2 + steps):
        rows = local_rows(step, ctx.rank, ctx.size)
        wrapped.zero_grad()
        criterion(wrapped(X[rows]), y[rows])
        wrapped.backward(criterion.backward())
        wrapped.step()
    return wrapped.full_state_dict()


test_checkpoint_restores_at_fewer_ranks_and_into_a_plain_model_mpi = mpi_twin(
    test_checkpoint_restores_at_fewer_ranks_and_into_a_plain_model)


# -- bad input ----------------------------------------------------------------------------------
def _wrap(ctx, **options):
    model = make_model()
    optimizer = options.pop("optimizer", None) or Adam(model.parameters())
    return ShardedDataParallel(model, optimizer, ctx=ctx, **options)


@pytest.mark.parametrize("stage, error, match", [
    (4, InvalidArgumentError, r"stage=4 should be 1 .*, 2 .* or 3"),
    (0, InvalidArgumentError, "stage=0"),
    ("2", InvalidArgumentTypeError, "stage='2' should be the integer 1"),
    (True, InvalidArgumentTypeError, "stage=True"),
])
def test_bad_stage(ctx, stage, error, match):
    expect_error(error, _wrap, ctx, stage=stage, match=match)


test_bad_stage_mpi = mpi_twin(test_bad_stage)


def test_optimizer_of_another_model(ctx):
    other = make_model()
    expect_error(InvalidArgumentError, _wrap, ctx, optimizer=Adam(other.parameters()),
                 match="holds .* not the module's")
    expect_error(InvalidArgumentTypeError, _wrap, ctx, optimizer="adam",
                 match="optimizer is a str")
    expect_error(InvalidArgumentTypeError, ShardedDataParallel, [1], None, ctx=ctx,
                 match="module is a list")


test_optimizer_of_another_model_mpi = mpi_twin(test_optimizer_of_another_model)


@pytest.mark.parametrize("stage", STAGES)
def test_parameter_reshaped_after_wrapping(ctx, stage):
    sdp = _wrap(ctx, stage=stage)
    sdp.module[0].weight.data = np.zeros((3, 3))
    expect_error(InvalidArgumentError, sdp, np.ones((2, N_FEATURES)),
                 match=r"'0.weight' has shape \(3, 3\), but \(7, 5\) when it was wrapped")


test_parameter_reshaped_after_wrapping_mpi = mpi_twin(test_parameter_reshaped_after_wrapping)


@pytest.mark.mpi(min_size=2)
def test_stage_differing_across_ranks(ctx):
    expect_error(ConfigMismatchError, _wrap, ctx, stage=1 + ctx.rank % 3,
                 match="stage differs across ranks")


@pytest.mark.mpi(min_size=2)
def test_model_differing_across_ranks(ctx):
    def build():
        hidden = N_HIDDEN + (ctx.rank == 1)
        model = nn.Sequential(nn.Linear(N_FEATURES, hidden, dtype=np.float64))
        return ShardedDataParallel(model, Adam(model.parameters()), ctx=ctx)
    expect_error(ConfigMismatchError, build, match="parameter 0.weight")
    expect_error(ConfigMismatchError, _wrap, ctx, bucket_size_mb=1 + ctx.rank,
                 match="bucket_size_mb")


def test_load_state_of_another_shape(ctx):
    sdp = _wrap(ctx, stage=2)
    state = sdp.state_dict()
    state["module"]["0.weight"] = np.zeros((2, 2))
    expect_error(InvalidArgumentError, sdp.load_state_dict, state,
                 match=r"'0.weight' has shape \(2, 2\); expected the whole \(7, 5\)")
    expect_error(hpcdist.exceptions.StateDictKeyError, sdp.load_state_dict, {"x": 1},
                 match="expected a dict with a 'module' entry")


test_load_state_of_another_shape_mpi = mpi_twin(test_load_state_of_another_shape)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.parametrize("stage", STAGES)
def test_loss_scaling_steps_float32_shards_like_ddp(ctx, stage):
    """float32 parameters (the master shards), float16 activations, a dynamic loss scale
    agreed over the ranks; the first step overflows and is skipped everywhere."""
    X, y = make_data(3)

    def run(sharded):
        model = nn.Sequential(nn.Linear(N_FEATURES, N_HIDDEN, random_state=0), nn.Tanh(),
                              nn.Linear(N_HIDDEN, N_CLASSES, random_state=1))
        optimizer = Adam(model.parameters(), lr=0.01)
        wrapped = (ShardedDataParallel(model, optimizer, stage=stage, ctx=ctx) if sharded
                   else hpcdist.DDP(model, ctx=ctx))
        scaler = DynamicLossScaler(init_scale=2.0 ** 40, ctx=ctx)
        criterion = nn.CrossEntropyLoss()
        stepped = []
        for step in range(3):
            rows = local_rows(step, ctx.rank, ctx.size)
            wrapped.zero_grad() if sharded else optimizer.zero_grad()
            criterion(wrapped(X[rows].astype(np.float16)), y[rows])
            wrapped.backward(criterion.backward(scaler.scale))
            stepped.append(scaler.step(wrapped if sharded else optimizer))
        state = wrapped.full_state_dict() if sharded else model.state_dict()
        return stepped, state, scaler.scale
    stepped, state, scale = run(True)
    expected_stepped, expected, expected_scale = run(False)
    with all_ranks(f"stage {stage} with loss scaling"):
        assert stepped == expected_stepped and not stepped[0] and scale == expected_scale
        for name, value in expected.items():
            assert state[name].dtype == np.float32
            np.testing.assert_allclose(state[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


test_loss_scaling_steps_float32_shards_like_ddp_mpi = mpi_twin(
    test_loss_scaling_steps_float32_shards_like_ddp)
