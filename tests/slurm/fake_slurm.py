"""A faked SLURM allocation in which the batch templates run on this machine.

:class:`FakeSlurm` copies a template where slurmd would (a spool directory,
so the template cannot find ``common.sh`` next to itself), sets the
``SLURM_*`` variables of a batch job, and puts shims first on ``PATH``:

* ``srun``: records its arguments and runs the command on ``-n N`` ranks with
  this environment's ``mpiexec`` (other Slurm options are ignored); it execs
  mpiexec, so signals reach the ranks as they would through srun;
* ``scontrol`` and ``sbatch``: record their arguments (and, for sbatch, the
  ``HPCDIST_*`` variables the next job would inherit); ``scontrol show job``
  answers ``JobState=$FAKE_JOB_STATE`` (default RUNNING);
* ``nvidia-smi``: lists ``FAKE_GPUS`` GPUs (only with ``gpus=``).

Calls are recorded as JSON lines, see :meth:`FakeSlurm.calls`.
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import REPO_ROOT, mpiexec_path, subprocess_env

__all__ = ["FakeSlurm", "FAKE_TRAINING", "JOB_ID", "TEMPLATES_DIR"]

TEMPLATES_DIR = REPO_ROOT / "slurm"
FAKE_TRAINING = Path(__file__).with_name("fake_training.py")
JOB_ID = "4242"
VENV = Path(sys.executable).parent.parent

_RECORD = '''
def record(name, argv, **extra):
    with open(os.environ["FAKE_SLURM_LOG"], "a") as log:
        log.write(json.dumps({"command": name, "argv": argv, **extra}) + "\\n")
'''

SHIMS = {
    "srun": '''
# options of srun that take a value as the next word (as far as these tests go)
WITH_VALUE = {"-N", "-c", "-G", "-p", "-A", "-t", "-J", "-w", "--nodes", "--cpus-per-task",
              "--mpi", "--partition", "--account", "--time", "--gpus-per-task", "--nodelist"}
argv = sys.argv[1:]
record("srun", argv)
ranks, i = os.environ.get("SLURM_NTASKS", "1"), 0
while i < len(argv) and argv[i].startswith("-"):
    option = argv[i]
    if option in ("-n", "--ntasks"):
        ranks, i = argv[i + 1], i + 2
    elif option.startswith("--ntasks="):
        ranks, i = option.split("=", 1)[1], i + 1
    elif option.startswith("-n") and not option.startswith("--"):
        ranks, i = option[2:], i + 1
    elif option == "--":
        i += 1
        break
    else:
        i += 2 if option in WITH_VALUE else 1
mpiexec = os.environ["FAKE_MPIEXEC"]
os.execv(mpiexec, [mpiexec, "-n", ranks, *argv[i:]])
''',
    "scontrol": '''
record("scontrol", sys.argv[1:])
if sys.argv[1:3] == ["show", "job"]:
    state = os.environ.get("FAKE_JOB_STATE", "RUNNING")
    print(f"JobId={sys.argv[3]} JobName=hpcdist-test\\n   JobState={state} Reason=None")
''',
    "sbatch": '''
record("sbatch", sys.argv[1:],
       env={k: v for k, v in os.environ.items() if k.startswith("HPCDIST_CHAIN_")
            or k == "HPCDIST_CHECKPOINT_DIR"})
print("Submitted batch job 4343")
''',
    "nvidia-smi": '''
record("nvidia-smi", sys.argv[1:])
for index in range(int(os.environ.get("FAKE_GPUS", "0"))):
    print(f"GPU {index}: Fake GPU (UUID: GPU-fake-{index})")
''',
}


@dataclass
class Completed:
    returncode: int
    output: str  # standard output and standard error together

    def __str__(self):
        return f"exit code {self.returncode}\n--- output ---\n{self.output}"


class FakeSlurm:
    """A batch job's environment under ``tmp_path``.

    Parameters
    ----------
    tmp_path : Path
        Working directory of the job (its ``$PWD``); shims, the spool copy,
        the call log and ``TMPDIR`` go under it too.
    ntasks, cpus_per_task, nodes : int
        ``SLURM_NTASKS``, ``SLURM_CPUS_PER_TASK``, ``SLURM_NNODES``.
    gpus : int, optional
        Put an ``nvidia-smi`` shim listing this many GPUs on PATH.
    **variables
        More variables for the job (``SLURM_ARRAY_TASK_ID="1"``...).
    """

    def __init__(self, tmp_path, *, ntasks=2, cpus_per_task=1, nodes=1, gpus=None, **variables):
        self.cwd = Path(tmp_path)
        self.bin = self.cwd / "fake-bin"
        self.log = self.cwd / "slurm-calls.jsonl"
        self.ready = self.cwd / "ready"
        self.spool = self.cwd / "spool" / f"job{JOB_ID}"
        self.ntasks = ntasks
        for path in (self.bin, self.ready, self.spool):
            path.mkdir(parents=True, exist_ok=True)
        for name, body in SHIMS.items():
            if name == "nvidia-smi" and gpus is None:
                continue
            shim = self.bin / name
            shim.write_text(f"#!{sys.executable}\nimport json, os, sys\n{_RECORD}{body}")
            shim.chmod(0o755)
        self.variables = dict(
            SLURM_JOB_ID=JOB_ID, SLURM_JOB_NAME="hpcdist-test", SLURM_NTASKS=ntasks,
            SLURM_CPUS_PER_TASK=cpus_per_task, SLURM_NNODES=nodes, SLURM_JOB_NUM_NODES=nodes,
            SLURM_SUBMIT_DIR=REPO_ROOT, HPCDIST_VENV=VENV, TMPDIR=self.cwd,
            FAKE_SLURM_LOG=self.log, FAKE_MPIEXEC=mpiexec_path(), FAKE_READY_DIR=self.ready)
        if gpus is not None:
            self.variables["FAKE_GPUS"] = gpus
        self.variables.update(variables)

    def environment(self, **variables):
        env = subprocess_env(**{**self.variables, **variables})
        env["PATH"] = f"{self.bin}{os.pathsep}{env.get('PATH', os.defpath)}"
        return env

    def script(self, template):
        """The template copied to where slurmd puts a batch script."""
        script = self.spool / "slurm_script"
        script.write_text((TEMPLATES_DIR / template).read_text())
        return script

    def run(self, template, *args, send=None, timeout=90, **variables):
        """Run ``template`` with ``args`` as a batch job.

        ``send``: a signal sent to the batch shell alone (as ``--signal=B:...``
        does) once every rank of the fake training job is ready.
        """
        proc = subprocess.Popen(["bash", str(self.script(template)), *map(str, args)],
                                cwd=self.cwd, env=self.environment(**variables),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        try:
            if send is not None:
                self._wait_until_ready(proc, time.monotonic() + timeout)
                proc.send_signal(send)
            output, _ = proc.communicate(timeout=timeout)
        except (subprocess.TimeoutExpired, AssertionError) as error:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
            raise AssertionError(f"{template}: {error}\n--- output ---\n{output}") from None
        return Completed(proc.returncode, output)

    def _wait_until_ready(self, proc, deadline):
        while len(list(self.ready.glob("rank-*"))) < self.ntasks:
            if proc.poll() is not None:
                raise AssertionError(f"ended with {proc.returncode} before every rank was ready")
            if time.monotonic() > deadline:
                raise AssertionError("the ranks never became ready")
            time.sleep(0.05)

    def calls(self, command):
        """Every call of ``command``: dicts with ``argv`` (sbatch: and ``env``)."""
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [entry for entry in entries if entry["command"] == command]
