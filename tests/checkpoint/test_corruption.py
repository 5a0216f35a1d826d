"""Damaged steps: a flipped bit, a truncated, deleted or extended file, a bad manifest are
each detected, reported by name, and restore falls back to the previous valid step."""
import json
import os
import warnings

import numpy as np
import pytest

import hpcdist
from hpcdist.checkpoint import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointManager,
    CheckpointWarning,
    Sharded,
)
from hpcdist.checkpoint.manifest import commit_bytes
from tests.checkpoint.conftest import BACKENDS, balanced_block, same_bits
from tests.helpers import all_ranks, expect_error, mpi_twin


def _full(step):
    return np.arange(40, dtype=np.float64).reshape(20, 2) + 1000 * step


def _save_steps(ctx, directory, backend, steps=(1, 2, 3)):
    mgr = CheckpointManager(directory, backend=backend, max_to_keep=None, ctx=ctx)
    for step in steps:
        mgr.save(step, {"X": Sharded(balanced_block(_full(step), ctx.rank, ctx.size)),
                        "step": step})
    return mgr


def _damage(path, how):
    if how == "bit flip":
        with open(path, "r+b") as handle:
            handle.seek(os.path.getsize(path) // 2)
            byte = handle.read(1)
            handle.seek(-1, os.SEEK_CUR)
            handle.write(bytes([byte[0] ^ 0x10]))
    elif how == "truncation":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how == "deletion":
        os.remove(path)
    elif how == "extension":
        with open(path, "ab") as handle:
            handle.write(b"junk")


EXPECTED = {"bit flip": "is corrupted (CRC-32", "truncation": "is truncated",
            "deletion": "is missing", "extension": "has"}


def _victim(ctx, backend):
    """The file holding data of the last rank: the mpio file, or that rank's own."""
    return "index.h5" if backend == "mpio" else f"rank_{ctx.size - 1:05d}.h5"


def _restore_recording(mgr, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = mgr.restore(**kwargs)
    return state, [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", list(EXPECTED))
def test_damaged_file_is_named_and_restore_falls_back(ctx, shared_dir, backend, how):
    mgr = _save_steps(ctx, shared_dir, backend)
    victim = _victim(ctx, backend)
    if ctx.rank == 0:
        _damage(shared_dir / "step_000000003" / victim, how)
    hpcdist.barrier(ctx=ctx)
    state, messages = _restore_recording(mgr)
    with all_ranks("fell back to step 2 with a warning naming the file"):
        assert mgr.restored_step == 2 and state["step"] == 2
        same_bits(state["X"], balanced_block(_full(2), ctx.rank, ctx.size), "X")
        assert len(messages) == 1, messages
        assert "step 3" in messages[0] and f"{victim} {EXPECTED[how]}" in messages[0], messages
        assert mgr.latest_step() == 3  # still committed; restore skips it
    expect_error(CheckpointCorruptError, mgr.restore, step=3,
                 match=rf"restore\(step=3\): .*step_000000003 is unusable: {victim}")
    mgr.save(3, {"X": Sharded(balanced_block(_full(3), ctx.rank, ctx.size)), "step": 3})
    state, messages = _restore_recording(mgr)
    with all_ranks("a new save of step 3 replaces the damaged one"):
        assert mgr.restored_step == 3 and state["step"] == 3 and messages == []


test_damaged_file_is_named_and_restore_falls_back_mpi = mpi_twin(
    test_damaged_file_is_named_and_restore_falls_back)


@pytest.mark.parametrize("how,match", [
    ("garbage manifest", r"manifest.json does not match the SHA-256 in COMMIT"),
    ("no manifest", r"manifest.json is missing"),
    ("no commit data", r"COMMIT is not a valid commit marker"),
    ("inconsistent manifest", r"manifest.json: entry 'X' pieces"),
])
def test_bad_manifest_is_reported_and_skipped(ctx, shared_dir, how, match):
    mgr = _save_steps(ctx, shared_dir, "sharded", steps=(1, 2))
    step_dir = shared_dir / "step_000000002"
    if ctx.rank == 0:
        manifest = step_dir / "manifest.json"
        if how == "garbage manifest":
            manifest.write_bytes(manifest.read_bytes()[:-10] + b"xxxxxxxxxx")
        elif how == "no manifest":
            manifest.unlink()
        elif how == "no commit data":
            (step_dir / "COMMIT").write_bytes(b"")
        else:  # a consistent COMMIT over a manifest whose pieces do not cover X
            content = json.loads(manifest.read_text())
            content["entries"]["X"]["pieces"] = content["entries"]["X"]["pieces"][:1]
            content["entries"]["X"]["pieces"][0]["stop"] -= 1
            raw = json.dumps(content).encode()
            manifest.write_bytes(raw)
            (step_dir / "COMMIT").write_bytes(commit_bytes(2, raw))
    hpcdist.barrier(ctx=ctx)
    state, messages = _restore_recording(mgr)
    with all_ranks("bad manifest skipped"):
        assert mgr.restored_step == 1 and state["step"] == 1
        assert len(messages) == 1 and "step 2" in messages[0], messages
        import re
        assert re.search(match, messages[0]), messages


test_bad_manifest_is_reported_and_skipped_mpi = mpi_twin(test_bad_manifest_is_reported_and_skipped)


def test_no_valid_step_left_is_a_clear_error(ctx, shared_dir):
    mgr = _save_steps(ctx, shared_dir, "sharded", steps=(1, 2))
    if ctx.rank == 0:
        _damage(shared_dir / "step_000000001" / "index.h5", "truncation")
        _damage(shared_dir / "step_000000002" / "rank_00000.h5", "deletion")
    hpcdist.barrier(ctx=ctx)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)
        expect_error(CheckpointCorruptError, mgr.restore,
                     match=[r"no valid checkpoint in .*ckpt", r"step 2: rank_00000.h5 is missing",
                            r"step 1: index.h5 is truncated"])


test_no_valid_step_left_is_a_clear_error_mpi = mpi_twin(test_no_valid_step_left_is_a_clear_error)


def test_unknown_format_version_is_a_clear_error(ctx, shared_dir):
    mgr = _save_steps(ctx, shared_dir, "sharded", steps=(1,))
    step_dir = shared_dir / "step_000000001"
    if ctx.rank == 0:
        content = json.loads((step_dir / "manifest.json").read_text())
        content["format_version"] = 99
        raw = json.dumps(content).encode()
        (step_dir / "manifest.json").write_bytes(raw)
        (step_dir / "COMMIT").write_bytes(commit_bytes(1, raw))
    hpcdist.barrier(ctx=ctx)
    error = expect_error(CheckpointError, mgr.restore,
                         match=r"format_version 99, but this hpcdist .* reads version 1")
    with all_ranks("not a corruption"):
        assert not isinstance(error, CheckpointCorruptError)


test_unknown_format_version_is_a_clear_error_mpi = mpi_twin(
    test_unknown_format_version_is_a_clear_error)
