"""What MPI launchers put in a rank's environment, and how to read or remove it."""

import os

__all__ = ["LAUNCHER_PREFIXES", "clean_environment", "rank_layout", "under_mpi_launcher"]

#: prefixes of the variables launchers (Hydra, Open MPI/PRRTE, PMIx, Slurm steps)
#: set in every rank; a child job started from inside a rank must not inherit
#: them, or it would try to join the parent's job
LAUNCHER_PREFIXES = (
    "PMI_", "PMIX_", "HYDRA_", "MPI_LOCAL", "OMPI_COMM_WORLD", "OMPI_UNIVERSE",
    "OMPI_APP_CTX", "OMPI_FIRST_RANKS", "OMPI_FILE_LOCATION", "OMPI_NUM_APP_CTX",
    "OMPI_ARGV", "OMPI_COMMAND", "OMPI_MCA_orte_", "OMPI_MCA_ess_", "OMPI_MCA_pmix",
    "OMPI_MCA_initial_wdir", "OMPI_MCA_mpi_oversubscribe", "OMPI_MCA_shmem_RUNTIME")

# (rank, size, local rank) variables, by launcher, in order of preference
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
_LOCAL_RANK_VARIABLES = ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
# those of them that only an MPI launcher sets (Slurm's are in a batch script too)
_MPI_RANK_VARIABLES = tuple(
    name for name in _RANK_VARIABLES + _SIZE_VARIABLES + _LOCAL_RANK_VARIABLES
    if name.startswith(LAUNCHER_PREFIXES))
# both set in a task that srun started (a batch script has no step id)
_SLURM_TASK_VARIABLES = ("SLURM_STEP_ID", "SLURM_PROCID")


def clean_environment(environ=None, *, extra_prefixes=()):
    """A copy of ``environ`` without launcher variables (see :data:`LAUNCHER_PREFIXES`)."""
    environ = os.environ if environ is None else environ
    prefixes = LAUNCHER_PREFIXES + tuple(extra_prefixes)
    return {key: value for key, value in environ.items() if not key.startswith(prefixes)}


def _first(environ, names):
    for name in names:
        value = environ.get(name)
        if value not in (None, ""):
            return int(value)
    return None


def rank_layout(environ=None):
    """``(rank, world_size, local_rank)`` from the launcher's variables (None if unknown)."""
    environ = os.environ if environ is None else environ
    return (_first(environ, _RANK_VARIABLES), _first(environ, _SIZE_VARIABLES),
            _first(environ, _LOCAL_RANK_VARIABLES))


def under_mpi_launcher(environ=None):
    """Whether this process was started by mpiexec/mpirun/srun as an MPI rank."""
    environ = os.environ if environ is None else environ
    return (any(name in environ for name in _MPI_RANK_VARIABLES)
            or all(name in environ for name in _SLURM_TASK_VARIABLES))
