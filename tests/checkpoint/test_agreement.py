"""CheckpointManager compares its settings across ranks (the directory named on every
rank) and restore(step=...) compares the step: before, another step on one rank was
reported as a corrupted checkpoint file, and another directory as one rank 0 made that
another rank could not see."""
import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import CheckpointManager
from tests.helpers import all_ranks, expect_error


def _last_rank():
    return hpcdist.get_rank() == hpcdist.get_world_size() - 1


@pytest.mark.mpi(min_size=2)
def test_restore_step_differs_on_one_rank(ctx, shared_dir):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    for step in (1, 2):
        mgr.save(step, {"w": np.full(3, float(step))})
    error = expect_error(ValueError, mgr.restore, step=1 if _last_rank() else 2,
                         match=[r"CheckpointManager.restore: step differs across ranks",
                                rf"rank {hpcdist.get_world_size() - 1} has 1",
                                r"same step on every rank"])
    assert isinstance(error, hpcdist.ConfigMismatchError)
    state = mgr.restore(step=1)  # the manager still works
    with all_ranks("restored step 1"):
        np.testing.assert_array_equal(state["w"], np.full(3, 1.0))


@pytest.mark.mpi(min_size=2)
def test_directory_differs_on_one_rank(ctx, shared_dir):
    directory = shared_dir.parent / ("other" if _last_rank() else "ckpt")
    error = expect_error(ValueError, CheckpointManager, directory, ctx=ctx,
                         match=[r"CheckpointManager: directory differs across ranks",
                                rf"ha(s|ve) '{shared_dir}'",
                                rf"has '{shared_dir.parent / 'other'}'"])
    assert isinstance(error, hpcdist.ConfigMismatchError)


@pytest.mark.mpi(min_size=2)
def test_max_to_keep_differs_on_one_rank(ctx, shared_dir):
    expect_error(ValueError, CheckpointManager, shared_dir, max_to_keep=2 if _last_rank() else 3,
                 ctx=ctx, match=r"max_to_keep differs across ranks")


def test_restore_of_the_same_step(ctx, shared_dir):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    mgr.save(5, {"w": np.arange(4.0)})
    with all_ranks("restore(step=5)"):
        np.testing.assert_array_equal(mgr.restore(step=5)["w"], np.arange(4.0))
