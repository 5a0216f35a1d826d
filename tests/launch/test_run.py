"""hpcdist run: restarts, exit code 75, rank variables, bad options; stop signals."""
import signal
import subprocess
import sys
import time

import pytest

from hpcdist import InvalidArgumentError, LauncherNotFoundError, _preemption
from hpcdist.launch import EXIT_RESUME, Preempted, PreemptionHandler, build_command, run_job
from hpcdist.launch.rank_wrapper import describe_status
from tests.helpers import subprocess_env

HPCDIST = [sys.executable, "-m", "hpcdist.cli.main"]


def _run(args, tmp_path, timeout=120, **env):
    return subprocess.run([*HPCDIST, "run", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=subprocess_env(**env))


def _script(tmp_path, code, name="job.py"):
    path = tmp_path / name
    path.write_text(code)
    return str(path)


FLAKY = """
import os, sys
import hpcdist
ctx = hpcdist.init()
restart = int(os.environ["HPCDIST_RESTART_COUNT"])
print(f"rank={os.environ['RANK']} world={os.environ['WORLD_SIZE']} "
      f"local={os.environ['LOCAL_RANK']} restart={restart}", flush=True)
hpcdist.barrier()
if restart < int(sys.argv[1]) and ctx.rank == ctx.size - 1:
    os.kill(os.getpid(), 9)
hpcdist.barrier()
"""


def test_restarts_after_a_killed_rank_until_success(tmp_path):
    job = _script(tmp_path, FLAKY)
    done = _run(["-n", "2", "--max-restarts", "2", "--backoff", "0.1", "--", sys.executable,
                 job, "2"], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rank 1: signal SIGKILL" in done.stderr
    assert "3 attempt(s), 2 restart(s)" in done.stderr
    for rank in (0, 1):
        assert f"rank={rank} world=2 local={rank} restart=2" in done.stdout


def test_no_restarts_left_is_a_clear_failure(tmp_path):
    job = _script(tmp_path, FLAKY)
    done = _run(["-n", "2", "--max-restarts", "1", "--backoff", "0.1", "--", sys.executable,
                 job, "5"], tmp_path)
    assert done.returncode != 0
    assert "no restarts left (--max-restarts 1)" in done.stderr
    assert "2 attempt(s)" in done.stderr


def test_exit_75_is_resumed_not_counted_as_failure(tmp_path):
    job = _script(tmp_path, """
import os, sys
import hpcdist
hpcdist.init()
sys.exit(75 if os.environ["HPCDIST_RESTART_COUNT"] == "0" else 0)
""")
    done = _run(["-n", "2", "--", sys.executable, job], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "asked to be resumed (exit 75)" in done.stderr
    assert "0 restart(s) after failures" in done.stderr


STOPPABLE = """
import sys, time
import hpcdist
from hpcdist.launch import PreemptionHandler, Preempted
ctx = hpcdist.init()
print("started", flush=True)
with PreemptionHandler(ctx) as handler:
    for step in range(600):
        time.sleep(0.05)
        if handler.should_stop():
            print(f"rank {ctx.rank} stops at step {step}", flush=True)
            raise Preempted(step)
"""


def test_signal_to_hpcdist_run_checkpoints_and_exits_75(tmp_path):
    job = _script(tmp_path, STOPPABLE)
    process = subprocess.Popen([*HPCDIST, "run", "-n", "2", "--", sys.executable, job],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               cwd=tmp_path, env=subprocess_env())
    assert "started" in process.stdout.readline()
    time.sleep(1.0)
    process.send_signal(signal.SIGUSR1)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 75, out + err
    steps = {line.split()[-1] for line in out.splitlines() if "stops at step" in line}
    assert len(steps) == 1, out          # every rank stopped at the same step
    assert "SIGUSR1 received" in err


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "--", "true"], "-n 0 should be >= 1"),
    (["-n", "2"], "no command given"),
    (["-n", "2", "--max-restarts", "-1", "--", "true"], "--max-restarts -1"),
    (["-n", "2", "--launcher", "pbs", "--", "true"], "invalid choice: 'pbs'"),
    (["--backoff", "-5", "--", "true"], "--backoff: '-5' should be a finite number of seconds"),
    (["--backoff", "nan", "--", "true"], "--backoff: 'nan' should be a finite number"),
    (["--backoff", "inf", "--", "true"], "--backoff: 'inf' should be a finite number"),
])
def test_bad_options_give_usage(tmp_path, args, message):
    done = _run(args, tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "usage: hpcdist" in done.stderr


@pytest.mark.parametrize("backoff", [-1.0, float("nan"), float("inf")])
def test_run_job_refuses_a_backoff_it_could_not_sleep_before_starting(backoff):
    with pytest.raises(InvalidArgumentError, match=f"--backoff {backoff}"):
        run_job(["true"], 1, backoff=backoff)


def test_missing_program_is_reported_per_rank(tmp_path):
    done = _run(["-n", "1", "--", "no-such-program-hpcdist"], tmp_path)
    assert done.returncode != 0
    assert "cannot start 'no-such-program-hpcdist'" in done.stderr


def test_build_command_wraps_every_rank():
    command = build_command(["python", "x.py"], 3, "mpiexec", launcher_args=["--foo"])
    assert command[1:] == ["--foo", "-n", "3", sys.executable, "-m",
                           "hpcdist.launch.rank_wrapper", "python", "x.py"]
    with pytest.raises(ValueError, match="launcher='pbs'"):
        build_command(["x"], 1, "pbs")


def test_build_command_has_srun_end_the_step_when_a_rank_fails(tmp_path, monkeypatch):
    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    command = build_command(["python", "x.py"], 2, "srun", launcher_args=["--mpi=pmix"])
    assert command[:5] == [str(srun), "--kill-on-bad-exit=1", "--mpi=pmix", "-n", "2"]
    monkeypatch.setenv("PATH", "")
    with pytest.raises(LauncherNotFoundError, match="srun not found"):
        build_command(["x"], 1, "srun")


def test_describe_status():
    assert describe_status(0) == "exit 0"
    assert describe_status(3) == "exit 3"
    assert describe_status(-9) == "signal SIGKILL"


@pytest.mark.parametrize("mode, code", [(None, 128 + 9), ("shrink", -9)])
def test_rank_wrapper_ends_by_its_command_s_signal_in_a_fault_tolerant_job(tmp_path, mode,
                                                                          code):
    # under fault tolerance a killed command ends the wrapper by the same signal (Open MPI's
    # runtime counts a rank on another node that exits with an error twice); otherwise
    # the wrapper exits with 128 + the signal's number, as a shell does
    command = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    env = subprocess_env(HPCDIST_RUN_DIR=str(tmp_path), PMI_RANK="0")
    env.pop("HPCDIST_FAULT_TOLERANCE", None)
    if mode is not None:
        env["HPCDIST_FAULT_TOLERANCE"] = mode
    done = subprocess.run([sys.executable, "-m", "hpcdist.launch.rank_wrapper", sys.executable,
                           "-c", command], env=env, capture_output=True, timeout=60)
    assert done.returncode == code, done.stderr
    assert (tmp_path / "rank-0.status").read_text() == "signal SIGKILL\n"


def test_launch_reexports_the_preemption_pieces():
    assert EXIT_RESUME == 75
    assert PreemptionHandler is _preemption.PreemptionHandler
    assert Preempted is _preemption.Preempted
