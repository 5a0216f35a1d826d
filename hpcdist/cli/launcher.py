"""Finding and calling the MPI launcher."""

import os
import shutil
import sys

__all__ = ["find_mpiexec", "under_mpi_launcher"]

# variables that MPI launchers (Hydra, Open MPI/PRRTE, PMIx, Slurm) set in every rank
_LAUNCHER_VARIABLES = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALRANKID")


def under_mpi_launcher():
    """Whether this process was started by mpiexec/mpirun/srun as an MPI rank."""
    return any(name in os.environ for name in _LAUNCHER_VARIABLES) or (
        "SLURM_STEP_ID" in os.environ and "SLURM_PROCID" in os.environ)


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
    raise FileNotFoundError("no mpiexec found next to this Python or on PATH; install an MPI "
                            "(pip install 'hpcdist[mpich]', or load your cluster's MPI module)")
