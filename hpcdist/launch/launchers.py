"""Which launcher starts the ranks (mpiexec or srun), and where its program is."""

import os
import shutil
import sys

from ..exceptions import InvalidArgumentError, LauncherNotFoundError

__all__ = ["LAUNCHERS", "choose_launcher", "find_mpiexec"]

LAUNCHERS = ("auto", "mpiexec", "srun")


def choose_launcher(launcher="auto", environ=None):
    """``"srun"`` inside a SLURM allocation (when srun exists), else ``"mpiexec"``."""
    if launcher not in LAUNCHERS:
        raise InvalidArgumentError(f"launcher={launcher!r} should be one of {', '.join(LAUNCHERS)}")
    if launcher != "auto":
        return launcher
    environ = os.environ if environ is None else environ
    if environ.get("SLURM_JOB_ID") and shutil.which("srun"):
        return "srun"
    return "mpiexec"


def find_mpiexec():
    """The mpiexec next to this Python (a venv's MPI wheel) or else on PATH.

    Raises
    ------
    FileNotFoundError
        With the ways to get one.
    """
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec") or shutil.which("mpirun")
    if found:
        return found
    raise LauncherNotFoundError("no mpiexec found next to this Python or on PATH; install an MPI "
                            "(pip install 'hpcdist[mpich]', or load your cluster's MPI module)")
