"""Whole MPI jobs in subprocesses (serial tests): a rank killed in the middle of a save, and a
checkpoint written at 4 ranks restored at 1, 2 and 3."""
import os

import numpy as np
import pytest

from hpcdist.checkpoint import CheckpointManager
from hpcdist.checkpoint.commit import list_steps
from tests.helpers import run_mpi_script

pytestmark = pytest.mark.slow

_PRELUDE = """
import os, sys
import numpy as np
import hpcdist
from hpcdist.checkpoint import CheckpointManager, Sharded
from hpcdist.data import DataPartitioner
ctx = hpcdist.init()
directory = {directory!r}
FULL = np.arange(2 * 401, dtype=np.float64).reshape(401, 2)
COUNTS = [(3 * r + 1) % 4 * 50 for r in range(ctx.size)]
COUNTS[-1] += 401 - sum(COUNTS)
def state(step):
    start = sum(COUNTS[:ctx.rank])
    return {{"X": Sharded(FULL[start:start + COUNTS[ctx.rank]] + step), "step": step,
             "big": np.arange(300_000, dtype=np.float32) + step, "meta": {{"name": "run"}}}}
"""

_KILL = _PRELUDE + """
from hpcdist.checkpoint import manager, sharded
mgr = CheckpointManager(directory, backend="sharded")
mgr.save(1, state(1))
print(f"rank {{ctx.rank}} saved step 1", flush=True)
if {where!r} == "write" and ctx.rank == 1:
    real = sharded.write_block
    def dying(*args, **kwargs):
        real(*args, **kwargs)  # some of the file is written, then the rank dies
        os._exit(3)
    sharded.write_block = dying
elif {where!r} == "commit" and ctx.rank == 0:
    def dying_commit(directory, temp, step, manifest_raw):
        from hpcdist.checkpoint.commit import write_file_durably
        write_file_durably(os.path.join(directory, temp, "manifest.json"), manifest_raw)
        os._exit(3)  # manifest written; no COMMIT, no rename
    manager.commit_step = dying_commit
mgr.save(2, state(2))
print(f"rank {{ctx.rank}} saved step 2", flush=True)
"""


@pytest.mark.parametrize("where", ["write", "commit"])
def test_rank_killed_during_save_leaves_previous_step_and_no_partial_one(tmp_path, where):
    directory = tmp_path / "ckpt"
    rc, _, output = run_mpi_script(_KILL.format(directory=str(directory), where=where),
                                   tmp_path, n=2, timeout=120)
    assert rc != 0, f"the job should have died\n{output}"
    assert "saved step 1" in output and "saved step 2" not in output, output
    names = sorted(os.listdir(directory))
    assert len(names) == 2 and names[1] == "step_000000001", names
    assert names[0].startswith(".tmp-step_000000002-"), names
    assert list_steps(str(directory)) == [1]
    mgr = CheckpointManager(directory)  # this test's world: one rank
    assert sorted(os.listdir(directory)) == ["step_000000001"], "temporary not cleaned up"
    state = mgr.restore()
    assert mgr.restored_step == 1 and state["step"] == 1
    np.testing.assert_array_equal(state["X"], np.arange(802.0).reshape(401, 2) + 1)
    np.testing.assert_array_equal(state["big"], np.arange(300_000, dtype=np.float32) + 1)


_SAVE = _PRELUDE + """
CheckpointManager(directory, backend="sharded").save(5, state(5), metadata={{"saved_at": ctx.size}})
print(f"rank {{ctx.rank}} saved", flush=True)
"""

_RESTORE = _PRELUDE + """
mgr = CheckpointManager(directory)
restored = mgr.restore()
start, stop = DataPartitioner(401, ctx.size).get_partition(ctx.rank)
assert mgr.restored_step == 5 and mgr.restored_metadata == {{"saved_at": 4}}
assert np.array_equal(restored["X"], FULL[start:stop] + 5), (restored["X"].shape, start, stop)
assert np.array_equal(restored["big"], np.arange(300_000, dtype=np.float32) + 5)
assert restored["step"] == 5 and restored["meta"] == {{"name": "run"}}
print(f"rank {{ctx.rank}} of {{ctx.size}} restored rows {{start}}:{{stop}}", flush=True)
"""


def test_save_at_four_ranks_restore_at_one_two_three(tmp_path):
    directory = str(tmp_path / "ckpt")
    rc, _, output = run_mpi_script(_SAVE.format(directory=directory), tmp_path, n=4,
                                   timeout=120, name="save.py")
    assert rc == 0, output
    assert sorted(os.listdir(directory + "/step_000000005")) == [
        "COMMIT", "index.h5", "manifest.json", "rank_00000.h5", "rank_00001.h5",
        "rank_00002.h5", "rank_00003.h5"]
    for n in (1, 2, 3):
        rc, _, output = run_mpi_script(_RESTORE.format(directory=directory), tmp_path, n=n,
                                       timeout=120, name=f"restore{n}.py")
        assert rc == 0, f"restore at {n} ranks failed:\n{output}"
        for rank in range(n):
            assert f"rank {rank} of {n} restored" in output, output
