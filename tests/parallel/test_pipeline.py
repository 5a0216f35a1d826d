"""Pipeline trains exactly like the same layers on one rank with the whole batch (float64).

Layouts at N ranks: N stages; one stage and N replicas; 2 stages x N/2 replicas
(even N >= 4). Batches of uneven sizes, one of which changes the shapes.
"""
import functools
from pathlib import Path

import numpy as np
import pytest

from hpcdist import allgather_object, broadcast_object, nn
from hpcdist._partition import balanced_counts
from hpcdist.checkpoint import CheckpointManager
from hpcdist.exceptions import InvalidArgumentError, InvalidArgumentTypeError
from hpcdist.nn.amp import MixedPrecision
from hpcdist.parallel import Pipeline
from hpcdist.parallel.pipeline_schedules import ideal_bubble, replay_bubble, schedule_actions
from tests.helpers import all_ranks, check_array, expect_error, mpi_twin

WIDTHS = (5, 7, 6, 4, 3)
ROWS = (23, 23, 19, 23, 23)  # the third batch changes the shapes
STEPS = len(ROWS)
MICRO_BATCHES = 4


def blocks():
    """Four (Linear, activation) blocks; the last one ends with a Linear."""
    made = []
    for index, (n_in, n_out) in enumerate(zip(WIDTHS, WIDTHS[1:])):
        layer = nn.Linear(n_in, n_out, dtype=np.float64, random_state=index + 1)
        made.append([layer] if index == len(WIDTHS) - 2 else [layer, nn.Tanh()])
    return made


def split_model(stages):
    """The four blocks split into ``stages`` consecutive stages."""
    parts, start = [], 0
    all_blocks = blocks()
    for count in balanced_counts(len(all_blocks), stages):
        parts.append(nn.Sequential(*[m for b in all_blocks[start:start + count] for m in b]))
        start += count
    return parts


def batch(step):
    rng = np.random.default_rng(100 + step)
    return rng.normal(size=(ROWS[step], WIDTHS[0])), rng.integers(0, WIDTHS[-1], ROWS[step])


def one_rank_training():
    """Parameters (per block) and losses of plain SGD on the whole batch."""
    model = nn.Sequential(*[m for b in blocks() for m in b])
    optimizer = nn.optim.SGD(list(model.parameters()), lr=0.2)
    loss_fn, losses = nn.CrossEntropyLoss(), []
    for step in range(STEPS):
        x, y = batch(step)
        model.zero_grad()
        losses.append(loss_fn.forward(model.forward(x), y))
        model.backward(loss_fn.backward())
        optimizer.step()
    return [p.data for p in model.parameters()], losses


def layouts(size):
    found = [(size, 1), (1, size)]
    if size >= 4 and size % 2 == 0:
        found.append((2, size // 2))
    return found


def train(pipe, loss_fn=None):
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    optimizer = nn.optim.SGD(pipe.parameters(), lr=0.2)
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        losses.append(pipe.train_step(x if pipe.is_first_stage else None,
                                      y if pipe.is_last_stage else None, loss_fn))
        optimizer.step()
    return losses


def stage_offset(stages, stage):
    return sum(len(list(s.parameters())) for s in split_model(stages)[:stage])


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_equals_one_rank(ctx, schedule):
    expected, expected_losses = one_rank_training()
    for stages, replicas in layouts(ctx.size):
        pipe = Pipeline(split_model(stages), micro_batches=MICRO_BATCHES, schedule=schedule,
                        data_parallel_size=replicas, ctx=ctx)
        losses = train(pipe)
        what = f"{schedule}, {stages} stages x {replicas} replicas"
        offset = stage_offset(stages, pipe.stage_index)
        stats = pipe.stats()
        with all_ranks(what):
            np.testing.assert_allclose(losses, expected_losses, rtol=1e-12, err_msg=what)
            for k, p in enumerate(pipe.parameters()):
                reference = expected[offset + k]
                scale = np.abs(reference).max()
                check_array(p.data / scale, reference / scale, rtol=0, atol=1e-9,
                            what=f"{what}: parameter {offset + k}")
            assert stats["steps"] == STEPS
            held = (MICRO_BATCHES if schedule == "gpipe"
                    else min(stages - pipe.stage_index, MICRO_BATCHES))
            assert stats["stashed_peak"] == held, (stats["stashed_peak"], held)
            assert stats["stashed_peak_bytes"] > 0
            assert stats["busy_seconds"] > 0 and 0 <= stats["bubble"] < 1


test_pipeline_equals_one_rank_mpi = mpi_twin(test_pipeline_equals_one_rank)


def test_gradients_of_the_global_mean(ctx):
    stages = ctx.size
    pipe = Pipeline(split_model(stages), micro_batches=3, ctx=ctx)
    x, y = batch(0)
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(2):  # gradients are zeroed by every step, not accumulated
        loss = pipe.train_step(x if pipe.is_first_stage else None,
                               y if pipe.is_last_stage else None, loss_fn)
    model = nn.Sequential(*[m for b in blocks() for m in b])
    expected_loss = loss_fn.forward(model.forward(x), y)
    model.backward(loss_fn.backward())
    expected = [p.grad for p in model.parameters()]
    offset = stage_offset(stages, pipe.stage_index)
    with all_ranks("gradients"):
        assert abs(loss - expected_loss) < 1e-12
        for k, p in enumerate(pipe.parameters()):
            check_array(p.grad, expected[offset + k], rtol=1e-12, atol=1e-14)


test_gradients_of_the_global_mean_mpi = mpi_twin(test_gradients_of_the_global_mean)


def test_schedules():
    assert schedule_actions("gpipe", 0, 2, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    assert schedule_actions("1f1b", 0, 3, 4) == [("F", 0), ("F", 1), ("F", 2), ("B", 0),
                                                  ("F", 3), ("B", 1), ("B", 2), ("B", 3)]
    assert schedule_actions("1f1b", 2, 3, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    for schedule in ("gpipe", "1f1b"):
        for p, m in ((2, 4), (4, 8), (4, 1)):
            bubble = replay_bubble(schedule, [1.0] * p, [2.0] * p, m)
            assert bubble == pytest.approx(ideal_bubble(p, m))


# -- errors ------------------------------------------------------------------------------
def test_stage_count_must_divide_the_ranks(ctx):
    expect_error(InvalidArgumentError, Pipeline, split_model(1) * (ctx.size + 1), ctx=ctx,
                 match=rf"{ctx.size + 1} stages do not divide the {ctx.size} ranks")
    expect_error(InvalidArgumentError, Pipeline, split_model(1), data_parallel_size=ctx.size + 1,
                 ctx=ctx, match="data_parallel_size")


test_stage_count_must_divide_the_ranks_mpi = mpi_twin(test_stage_count_must_divide_the_ranks)


def test_bad_options(ctx):
    expect_error(InvalidArgumentError, Pipeline, split_model(ctx.size), schedule="zigzag",
                 ctx=ctx, match="schedule='zigzag'")
    expect_error(InvalidArgumentError, Pipeline, split_model(ctx.size), micro_batches=0,
                 ctx=ctx, match="micro_batches=0")
    expect_error(InvalidArgumentTypeError, Pipeline, [nn.Linear(2, 2), "layer"], ctx=ctx,
                 match="stage 1 is a str")


test_bad_options_mpi = mpi_twin(test_bad_options)


def test_stage_without_parameters(ctx):
    stages = split_model(ctx.size)
    stages[-1] = nn.Tanh()
    expect_error(InvalidArgumentError, Pipeline, stages, ctx=ctx,
                 match=rf"stage {ctx.size - 1} \(Tanh\) has no trainable parameters")


test_stage_without_parameters_mpi = mpi_twin(test_stage_without_parameters)


def run_step(pipe, x, y):
    return pipe.train_step(x if pipe.is_first_stage else None,
                           y if pipe.is_last_stage else None, nn.CrossEntropyLoss())


def test_output_shape_mismatch(ctx):
    stages = split_model(ctx.size)
    stages[-1] = nn.Linear(9, WIDTHS[-1], dtype=np.float64)
    last = ctx.size - 1
    source = f"the output of stage {last - 1}" if ctx.size > 1 else "the input x"
    pipe = Pipeline(stages, ctx=ctx)
    expect_error(InvalidArgumentError, run_step, pipe, *batch(0),
                 match=rf"stage {last} cannot take {source}")


test_output_shape_mismatch_mpi = mpi_twin(test_output_shape_mismatch)


def test_micro_batches_larger_than_the_batch(ctx):
    pipe = Pipeline(split_model(ctx.size), micro_batches=8, ctx=ctx)
    x, y = batch(0)
    expect_error(InvalidArgumentError, run_step, pipe, x[:5], y[:5],
                 match="micro_batches=8 is larger than the batch of 5 rows")
    loss = run_step(pipe, x, y)  # the next, large enough batch works
    with all_ranks("loss after an error"):
        assert np.isfinite(loss)


test_micro_batches_larger_than_the_batch_mpi = mpi_twin(test_micro_batches_larger_than_the_batch)


def test_missing_batch_and_bad_loss(ctx):
    pipe = Pipeline(split_model(ctx.size), ctx=ctx)
    x, y = batch(0)
    expect_error(InvalidArgumentTypeError, run_step, pipe, None, y, match="got x=NoneType")
    expect_error(InvalidArgumentError, pipe.train_step, x, y, nn.CrossEntropyLoss("sum"),
                 match="reduction='sum'")


test_missing_batch_and_bad_loss_mpi = mpi_twin(test_missing_batch_and_bad_loss)


# -- mixed precision and checkpoints -------------------------------------------------------
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_mixed_precision(ctx):
    """float16 stages with float32 masters train close to float32 training, and every
    rank skips the same steps."""
    _, expected_losses = one_rank_training()
    pipe = Pipeline(split_model(ctx.size), micro_batches=MICRO_BATCHES, ctx=ctx)
    amp = MixedPrecision(pipe.module, functools.partial(nn.optim.SGD, lr=0.2),
                         init_scale=2.0 ** 20, ctx=pipe.stage_ctx)
    amp.scaler.ctx = pipe.ctx
    losses = []
    for step in range(STEPS):
        x, y = batch(step)
        losses.append(pipe.train_step(x.astype(np.float16) if pipe.is_first_stage else None,
                                      y if pipe.is_last_stage else None, nn.CrossEntropyLoss(),
                                      loss_scale=amp.scale))
        amp.step()
    skipped = allgather_object(amp.skipped_steps, ctx=ctx)
    with all_ranks("mixed precision"):
        assert len(set(skipped)) == 1 and 0 < skipped[0] < STEPS, skipped
        assert all(p.data.dtype == np.float16 for p in pipe.parameters())
        np.testing.assert_allclose(losses[0], expected_losses[0], rtol=1e-2)


test_mixed_precision_mpi = mpi_twin(test_mixed_precision)


def train_steps(pipe, optimizer, steps):
    loss_fn = nn.CrossEntropyLoss()
    for step in steps:
        x, y = batch(step)
        pipe.train_step(x if pipe.is_first_stage else None, y if pipe.is_last_stage else None,
                        loss_fn)
        optimizer.step()


def test_checkpoint_round_trip(ctx, tmp_path):
    """Each stage saves on its sub-context; a new pipeline restored from it continues
    exactly like the one that went on."""
    directory = Path(broadcast_object(str(tmp_path), ctx=ctx))
    stages, replicas = layouts(ctx.size)[-1]
    made = []
    for _ in range(2):
        pipe = Pipeline(split_model(stages), data_parallel_size=replicas, ctx=ctx)
        made.append((pipe, nn.optim.SGD(pipe.parameters(), lr=0.2)))
    (pipe, optimizer), (restored, restored_optimizer) = made
    train_steps(pipe, optimizer, range(2))
    manager = CheckpointManager(directory / f"stage{pipe.stage_index}", ctx=pipe.stage_ctx)
    manager.save(2, {"model": pipe.module.state_dict()})
    manager.wait()
    train_steps(pipe, optimizer, range(2, STEPS))
    again = CheckpointManager(directory / f"stage{restored.stage_index}", ctx=restored.stage_ctx)
    restored.module.load_state_dict(again.restore()["model"])
    train_steps(restored, restored_optimizer, range(2, STEPS))
    with all_ranks("restored pipeline"):
        assert again.latest_step() == 2
        for a, b in zip(pipe.parameters(), restored.parameters()):
            np.testing.assert_array_equal(a.data, b.data)


test_checkpoint_round_trip_mpi = mpi_twin(test_checkpoint_round_trip)


def test_shape_probe_keeps_modes_and_running_statistics(ctx):
    """The shape exchange runs the stages in evaluation mode on zeros: BatchNorm's running
    statistics are those of the training micro-batches only, and modes come back."""
    stages = split_model(ctx.size)
    norm, dropout = nn.BatchNorm1d(WIDTHS[0], dtype=np.float64), nn.Dropout(0.5)
    stages[0] = nn.Sequential(norm, dropout.eval(), stages[0])
    pipe = Pipeline(stages, micro_batches=1, ctx=ctx)
    x, y = batch(0)
    run_step(pipe, x, y)
    with all_ranks("modes and statistics"):
        assert stages[0].training and not dropout.training and norm.training
        if pipe.is_first_stage:
            check_array(norm.running_mean, 0.1 * x.mean(axis=0), rtol=1e-12, atol=1e-15)


test_shape_probe_keeps_modes_and_running_statistics_mpi = mpi_twin(
    test_shape_probe_keeps_modes_and_running_statistics)
