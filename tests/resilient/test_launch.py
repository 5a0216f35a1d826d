"""``hpcdist run --fault-tolerant`` and ``hpcdist info``'s fault_tolerance line."""
import os
import subprocess
import sys

import pytest

import hpcdist
from hpcdist.launch.runner import fault_tolerant_launch
from tests.helpers import run_command, subprocess_env
from tests.resilient.ulfm import (
    LOSES_RANK_2,
    MPIRUN,
    VENV,
    lines_with,
    messages_from,
    needs_ulfm,
    run_ulfm_job,
    venv_env,
)


@needs_ulfm
def test_run_fault_tolerant_survives_a_lost_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(LOSES_RANK_2)
    cmd = [str(VENV / "bin" / "python"), "-m", "hpcdist.cli.main", "run", "-n", "3",
           "--fault-tolerant", "--launcher-args=--oversubscribe", "--",
           str(VENV / "bin" / "python"), str(script)]
    rc, seconds, output = run_command(cmd, venv_env(), tmp_path, 120)
    done = lines_with(output, "DONE ")
    assert len(done) == 2, output
    # 5 steps at 3 ranks, then 15 at 2 ranks
    assert all("size 2 mode shrink total 45.0 lost [2]" in line for line in done), output
    assert "--with-ft ulfm" in output, output
    assert rc == 0, output


@needs_ulfm
def test_run_fault_tolerant_respawn_ends_at_the_original_size(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(LOSES_RANK_2.replace("if world_rank == 2", "if not REPLACEMENT and "
                                           "world_rank == 2").replace(
        "from hpcdist.resilient import State, run", "from hpcdist.resilient import State, run\n"
        "from mpi4py import MPI\nREPLACEMENT = MPI.Comm.Get_parent() != MPI.COMM_NULL"))
    # no --launcher-args=--oversubscribe: hpcdist run gives the replacement a slot itself
    cmd = [str(VENV / "bin" / "python"), "-m", "hpcdist.cli.main", "run", "-n", "3",
           "--fault-tolerant", "respawn", "--", str(VENV / "bin" / "python"), str(script)]
    rc, seconds, output = run_command(cmd, venv_env(), tmp_path, 200)
    done = messages_from(output, "DONE ")
    assert len(done) == 3, output
    # 20 steps at 3 ranks (the replacement, rank 2, joined at step 5's commit)
    assert sorted(line.split()[4] for line in done) == ["0", "1", "2"], output
    assert all("size 3 mode respawn total 60.0 lost [2]" in line for line in done), output
    assert "--with-ft ulfm" in output and "--oversubscribe" in output, output
    assert rc == 0, output


def test_respawn_launch_oversubscribes():
    pytest.importorskip("mpi4py")
    try:
        options, env = fault_tolerant_launch("respawn")
    except hpcdist.InvalidArgumentError as error:  # this environment's MPI is not Open MPI 5
        pytest.skip(str(error))
    assert "--oversubscribe" in options and env == {"HPCDIST_FAULT_TOLERANCE": "respawn"}


@needs_ulfm
@pytest.mark.parametrize("with_ft, expected", [
    (True, "available (ULFM)"),
    (False, "not available: Open MPI v5"),
])
def test_info_says_whether_fault_tolerance_is_available(tmp_path, with_ft, expected):
    code = ("from hpcdist.cli.main import main\nmain(['info'])\n")
    rc, seconds, output = run_ulfm_job(code, tmp_path, n=1, with_ft=with_ft)
    line = lines_with(output, "fault_tolerance")
    assert len(line) == 1 and expected in line[0], output
    if not with_ft:
        assert "--with-ft ulfm" in line[0], output


def test_fault_tolerant_launch_refuses_srun():
    with pytest.raises(hpcdist.InvalidArgumentError, match="cannot use --launcher srun"):
        fault_tolerant_launch("shrink", "srun")
    with pytest.raises(hpcdist.InvalidArgumentError, match="'grow'"):
        fault_tolerant_launch("grow")


@pytest.mark.skipif(os.path.exists(os.path.join(os.path.dirname(sys.executable), "ompi_info")),
                    reason="this environment's mpiexec is Open MPI's")
def test_fault_tolerant_launch_refuses_another_mpi():
    with pytest.raises(hpcdist.InvalidArgumentError, match="not Open MPI 5's"):
        fault_tolerant_launch("shrink")


def test_run_fault_tolerant_usage_error_is_one_line(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "hpcdist.cli.main", "run", "-n", "2", "--fault-tolerant",
         "grow", "--", "true"], capture_output=True, text=True, env=subprocess_env(),
        timeout=60)
    assert completed.returncode == 2, completed.stderr
    assert "invalid choice: 'grow'" in completed.stderr, completed.stderr


def test_mpirun_path_is_the_venvs():
    assert MPIRUN.parent == VENV / "bin"
