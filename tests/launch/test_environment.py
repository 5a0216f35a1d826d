"""Reading the launchers' variables: is this a rank, and which one."""
import pytest

from hpcdist.launch.environment import clean_environment, rank_layout, under_mpi_launcher


@pytest.mark.parametrize("environ, expected", [
    ({}, False),
    ({"PMI_RANK": "0", "PMI_SIZE": "2"}, True),                       # Hydra (MPICH)
    ({"OMPI_COMM_WORLD_SIZE": "2"}, True),                            # Open MPI
    ({"PMIX_RANK": "1"}, True),                                       # PMIx
    ({"MPI_LOCALRANKID": "0"}, True),                                 # Intel MPI
    ({"SLURM_STEP_ID": "0", "SLURM_PROCID": "1"}, True),              # a task of srun
    ({"SLURM_PROCID": "0", "SLURM_JOB_ID": "7"}, False),              # a batch script
    ({"HYDRA_LAUNCHER": "fork", "OMPI_MCA_pml": "ob1"}, False),       # user settings
])
def test_under_mpi_launcher(environ, expected):
    assert under_mpi_launcher(environ) is expected


def test_rank_layout_prefers_the_mpi_launcher_over_slurm():
    environ = {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "SLURM_PROCID": "0",
               "SLURM_NTASKS": "1", "SLURM_LOCALID": "0"}
    assert rank_layout(environ) == (3, 4, 1)
    assert rank_layout({}) == (None, None, None)


def test_clean_environment_drops_launcher_variables():
    environ = {"PMI_RANK": "3", "OMPI_COMM_WORLD_SIZE": "2", "PATH": "/bin",
               "SLURM_JOB_ID": "7"}
    assert clean_environment(environ) == {"PATH": "/bin", "SLURM_JOB_ID": "7"}
