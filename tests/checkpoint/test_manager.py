"""CheckpointManager behaviour: listing, retention, replacing a step, async saves, arguments,
and failures during save (an exception on one rank, a full disk) that must commit nothing."""
import errno
import os

import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import CheckpointError, CheckpointManager, Sharded
from hpcdist.checkpoint.commit import wait_for_deletions
from tests.checkpoint.conftest import BACKENDS, PARALLEL_H5PY, balanced_block, same_bits
from tests.helpers import all_ranks, expect_error, mpi_twin


def _state(ctx, value):
    full = np.full((2 * ctx.size + 1, 2), float(value))
    start, stop = hpcdist.data.DataPartitioner(len(full), ctx.size).get_partition(ctx.rank)
    return {"X": Sharded(full[start:stop]), "v": value, "w": np.arange(3) * value}


def _entries(directory):
    """The names in ``directory`` but old steps that rank 0 is deleting in the background."""
    wait_for_deletions()  # on rank 0; other ranks may still see them being deleted
    names = sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    return [name for name in names if not name.startswith(".trash-step_")]


def test_listing_retention_and_replacing_a_step(ctx, shared_dir):
    mgr = CheckpointManager(shared_dir, max_to_keep=2, ctx=ctx)
    with all_ranks("empty directory"):
        assert mgr.steps() == [] and mgr.latest_step() is None
    expect_error(CheckpointError, mgr.restore, match=r"no committed checkpoint in .*ckpt")
    for step in (10, 20, 30):
        mgr.save(step, _state(ctx, step))
    with all_ranks("max_to_keep=2"):
        assert mgr.steps() == [20, 30] and mgr.latest_step() == 30
        assert _entries(shared_dir) == ["step_000000020", "step_000000030"]
    for older in (5, 20):  # restore() would return 30, and retention would delete a step
        expect_error(ValueError, mgr.save, older, _state(ctx, older),
                     match=rf"save\(step={older}\): .*ckpt already holds the later step\(s\) "
                           rf"\[{'20, ' if older == 5 else ''}30\], and restore\(\) returns the "
                           r"newest; steps only go forward in a directory: save under a step "
                           r">= 30, or use a new directory for a new run")
    with all_ranks("nothing written, nothing deleted"):
        assert _entries(shared_dir) == ["step_000000020", "step_000000030"]
    mgr.save(30, _state(ctx, 31))  # replaces step 30
    state = mgr.restore()
    with all_ranks("replaced step"):
        assert mgr.steps() == [20, 30] and mgr.restored_step == 30 and state["v"] == 31
        assert _entries(shared_dir) == ["step_000000020", "step_000000030"]
    old = mgr.restore(step=20)
    expect_error(CheckpointError, mgr.restore, step=6, match=r"no committed step 6 .* \[20, 30\]")
    keep_all = CheckpointManager(shared_dir, max_to_keep=None, ctx=ctx)
    for step in (40, 50, 60):
        keep_all.save(step, _state(ctx, step))
    with all_ranks("restore(step=20), max_to_keep=None"):
        assert old["v"] == 20 and keep_all.restored_step is None
        same_bits(old["X"], balanced_block(np.full((2 * ctx.size + 1, 2), 20.0), ctx.rank,
                                           ctx.size), "X")
        assert keep_all.steps() == [20, 30, 40, 50, 60]


test_listing_retention_and_replacing_a_step_mpi = mpi_twin(
    test_listing_retention_and_replacing_a_step)


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_save_copies_overlaps_and_commits_at_wait(ctx, shared_dir, backend):
    with CheckpointManager(shared_dir, async_save=True, backend=backend, ctx=ctx) as mgr:
        state = _state(ctx, 1)
        mgr.save(1, state)
        state["X"].array[...] = -1.0  # the save copied it already
        state["w"][...] = -1
        with all_ranks("not visible before wait"):
            assert mgr.steps() == []
        mgr.save(2, _state(ctx, 2))  # waits for and commits step 1 first
        with all_ranks("step 1 committed by the next save"):
            assert mgr.steps() == [1]
        mgr.wait()
        with all_ranks("step 2 committed by wait"):
            assert mgr.steps() == [1, 2]
        first = mgr.restore(step=1)
        mgr.save(3, _state(ctx, 3))
    with all_ranks("async round trip"):
        assert mgr.steps() == [1, 2, 3]  # committed on leaving the with block
        same_bits(first["w"], np.arange(3) * 1, "w")
        full = np.full((2 * ctx.size + 1, 2), 1.0)
        same_bits(first["X"], balanced_block(full, ctx.rank, ctx.size), "X")


test_async_save_copies_overlaps_and_commits_at_wait_mpi = mpi_twin(
    test_async_save_copies_overlaps_and_commits_at_wait)


def _fail_on(rank, error):
    """A write_sharded replacement that raises ``error`` on ``rank`` (others write)."""
    from hpcdist.checkpoint import sharded

    real = sharded.write_sharded

    def write(directory, plan, writes, this_rank, threads):
        if this_rank == rank:
            raise error
        return real(directory, plan, writes, this_rank, threads)

    return write


def test_exception_on_one_rank_makes_every_rank_raise(ctx, shared_dir, monkeypatch):
    from hpcdist.checkpoint import sharded

    mgr = CheckpointManager(shared_dir, backend="sharded", ctx=ctx)
    mgr.save(1, _state(ctx, 1))
    bad = ctx.size - 1
    monkeypatch.setattr(sharded, "write_sharded", _fail_on(bad, RuntimeError("disk on fire")))
    error = expect_error(CheckpointError, mgr.save, 2, _state(ctx, 2),
                         match=rf"save\(step=2\) failed on rank {bad}: RuntimeError: disk on "
                               r"fire; nothing was committed")
    with all_ranks("nothing committed, temporaries removed"):
        assert mgr.steps() == [1]
        assert _entries(shared_dir) == ["step_000000001"]
        if ctx.rank == bad:
            assert isinstance(error.__cause__, RuntimeError)
    monkeypatch.undo()
    state = mgr.restore()
    with all_ranks("previous step intact"):
        assert mgr.restored_step == 1 and state["v"] == 1


test_exception_on_one_rank_makes_every_rank_raise_mpi = mpi_twin(
    test_exception_on_one_rank_makes_every_rank_raise)


@pytest.mark.parametrize("where", ["data", "flush", "manifest"])
def test_full_disk_leaves_the_previous_checkpoint_intact(ctx, shared_dir, monkeypatch, where):
    from hpcdist import _hdf5_blocks
    from hpcdist.checkpoint import commit, sharded

    mgr = CheckpointManager(shared_dir, backend="sharded", ctx=ctx)
    mgr.save(1, _state(ctx, 1))

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "data":  # every rank's HDF5 writes fail
        monkeypatch.setattr(sharded, "write_block", no_space)
        match = r"failed on rank.*No space left on device; nothing was committed"
    elif where == "flush":  # the write-behind flush during the writing fails
        monkeypatch.setattr(commit, "flush_data", no_space)
        match = r"failed on rank.*No space left on device; nothing was committed"
    else:  # rank 0 cannot write manifest.json
        monkeypatch.setattr(commit, "write_file_durably", no_space)
        match = r"committing on rank 0 failed: OSError: \[Errno 28\] No space left"
    assert _hdf5_blocks.write_block is not no_space
    expect_error(CheckpointError, mgr.save, 2, _state(ctx, 2), match=match)
    monkeypatch.undo()
    state = mgr.restore()
    with all_ranks("previous checkpoint intact"):
        assert mgr.steps() == [1] and _entries(shared_dir) == ["step_000000001"]
        assert mgr.restored_step == 1 and state["v"] == 1


test_full_disk_leaves_the_previous_checkpoint_intact_mpi = mpi_twin(
    test_full_disk_leaves_the_previous_checkpoint_intact)


def test_async_failure_surfaces_at_the_next_save_and_at_wait(ctx, shared_dir, monkeypatch):
    from hpcdist.checkpoint import sharded

    mgr = CheckpointManager(shared_dir, async_save=True, ctx=ctx)
    monkeypatch.setattr(sharded, "write_sharded", _fail_on(0, OSError(errno.EIO, "I/O error")))
    mgr.save(1, _state(ctx, 1))  # fails in the background
    monkeypatch.undo()
    expect_error(CheckpointError, mgr.save, 2, _state(ctx, 2),
                 match=r"save\(step=1\) failed on rank 0: OSError: \[Errno 5\] I/O error")
    monkeypatch.setattr(sharded, "write_sharded", _fail_on(0, RuntimeError("again")))
    mgr.save(3, _state(ctx, 3))
    monkeypatch.undo()
    expect_error(CheckpointError, mgr.wait, match=r"save\(step=3\) failed on rank 0")
    mgr.wait()  # nothing in flight any more
    mgr.save(4, _state(ctx, 4))
    mgr.wait()
    with all_ranks("only the good step is committed"):
        assert mgr.steps() == [4] and _entries(shared_dir) == ["step_000000004"]


test_async_failure_surfaces_at_the_next_save_and_at_wait_mpi = mpi_twin(
    test_async_failure_surfaces_at_the_next_save_and_at_wait)


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"max_to_keep": 0}, ValueError, r"max_to_keep=0 should be >= 1"),
    ({"max_to_keep": 1.5}, TypeError, r"max_to_keep=1.5 should be an int"),
    ({"backend": "nfs"}, ValueError, r"backend='nfs' should be one of"),
    ({"async_save": "yes"}, TypeError, r"async_save='yes' should be a bool"),
])
def test_bad_arguments(ctx, shared_dir, kwargs, exc, match):
    expect_error(exc, CheckpointManager, shared_dir, ctx=ctx, match=match, **kwargs)


test_bad_arguments_mpi = mpi_twin(test_bad_arguments)


def test_a_raw_communicator_gets_one_owned_context(ctx, shared_dir):
    from mpi4py import MPI

    first = CheckpointManager(shared_dir, ctx=MPI.COMM_WORLD)
    first.save(1, {"rank_count": ctx.size})
    second = CheckpointManager(shared_dir, ctx=MPI.COMM_WORLD)
    state = second.restore()
    with all_ranks("one Dup'd context for COMM_WORLD, used by both managers"):
        assert first.ctx is second.ctx and first.ctx is not ctx
        assert first.ctx.comm != MPI.COMM_WORLD and first.ctx.size == ctx.size
        assert state == {"rank_count": ctx.size}


test_a_raw_communicator_gets_one_owned_context_mpi = mpi_twin(
    test_a_raw_communicator_gets_one_owned_context)


@pytest.mark.skipif(PARALLEL_H5PY, reason="h5py is parallel here: backend='mpio' works")
def test_mpio_without_parallel_h5py_is_a_clear_error(ctx, shared_dir):
    expect_error(CheckpointError, CheckpointManager, shared_dir, backend="mpio", ctx=ctx,
                 match=r"backend='mpio' needs h5py built against parallel HDF5.*"
                       r"get_config\(\).mpi is False")
    with all_ranks("auto falls back to sharded"):
        assert CheckpointManager(shared_dir, ctx=ctx).backend == "sharded"


test_mpio_without_parallel_h5py_is_a_clear_error_mpi = mpi_twin(
    test_mpio_without_parallel_h5py_is_a_clear_error)


def test_auto_backend(ctx, shared_dir):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    background = CheckpointManager(shared_dir, async_save=True, ctx=ctx)
    with all_ranks("auto"):
        assert mgr.backend == ("mpio" if PARALLEL_H5PY and ctx.size > 1 else "sharded")
        assert background.backend == "sharded"


test_auto_backend_mpi = mpi_twin(test_auto_backend)


def test_bad_state_on_one_rank_raises_on_every_rank(ctx, shared_dir):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    last = ctx.size - 1
    bad_key = {"ok": 1, "a/b" if ctx.rank == last else "ab": 2}
    expect_error(ValueError, mgr.save, 1, bad_key, match=r"key 'a/b' at the top level contains '/'")
    expect_error(TypeError, mgr.save, 1, {"o": np.array([None]) if ctx.rank == last else 1},
                 match=r"never pickle")
    expect_error(TypeError, mgr.save, 1, {"x": 1}, metadata={"f": {1, 2}},
                 match=r"metadata should be JSON-serialisable")
    expect_error(ValueError, mgr.save, -1, {"x": 1},
                 match=r"step=-1 should be in \[0, 9223372036854775807\]")
    expect_error(ValueError, mgr.save, 2**63, {"x": 1}, match=r"step=9223372036854775808 should")
    expect_error(ValueError, CheckpointManager, "", ctx=ctx, match=r"directory='' names no")
    with all_ranks("nothing written"):
        assert _entries(shared_dir) == []


test_bad_state_on_one_rank_raises_on_every_rank_mpi = mpi_twin(
    test_bad_state_on_one_rank_raises_on_every_rank)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case,match", [
    ("step", r"ranks passed different steps: step=1 on rank 0, step=2 on rank"),
    ("missing", r"entry 'extra' is missing on rank 0"),
    ("kind", r"entry 'X' differs between ranks: it is Sharded on rank 0, a replicated array"),
    ("dtype", r"entry 'X' differs between ranks: dtype float64 on rank 0, float32 on rank"),
    ("shape", r"'w' is replicated .* shape \(3,\) on rank 0, \(4,\) on rank"),
    ("value", r"'w' is replicated .* its value differs between ranks: CRC-32 [0-9a-f]{8} on "
              r"rank 0, [0-9a-f]{8} on rank"),
])
def test_states_that_differ_between_ranks_raise_on_every_rank(ctx, shared_dir, case, match):
    mgr = CheckpointManager(shared_dir, ctx=ctx)
    other = ctx.rank > 0
    step = 2 if case == "step" and other else 1
    X = np.zeros(2, np.float32 if case == "dtype" and other else np.float64)
    state = {"X": X if case == "kind" and other else Sharded(X),
             "w": np.full(4 if case == "shape" and other else 3,
                          float(ctx.rank) if case == "value" else 0.0)}
    if case == "missing" and other:
        state["extra"] = 1
    expect_error(hpcdist.ConfigMismatchError, mgr.save, step, state, match=match)
    with all_ranks("nothing written"):
        assert _entries(shared_dir) == []
