"""The templates that outlive a time limit: requeue (preemptible.sbatch) and a
chain of dependent jobs (chain.sbatch), run with a faked allocation.

The signal goes to the batch shell alone, as ``--signal=B:USR1@120`` sends
it; the template must pass it on to the job step, whose fake training ranks
checkpoint and exit with 75.
"""

import signal
import sys

import pytest

from tests.slurm.fake_slurm import FAKE_TRAINING, JOB_ID, FakeSlurm

TRAIN = (sys.executable, FAKE_TRAINING, "--seconds", "60")


def _requeues(slurm):
    return [call["argv"] for call in slurm.calls("scontrol") if call["argv"][0] == "requeue"]


def _assert_every_rank_checkpointed(output, directory, signame="SIGUSR1"):
    for rank in (0, 1):
        assert f"[fake rank {rank}] got {signame}: checkpoint written, exit 75" in output
        assert (directory / f"checkpoint-{rank}").read_text() == signame


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGTERM], ids=lambda s: s.name)
def test_preemptible_template_requeues_after_a_checkpoint_on_a_signal(tmp_path, signum):
    slurm = FakeSlurm(tmp_path, ntasks=2)
    completed = slurm.run("preemptible.sbatch", *TRAIN, send=signum)
    assert completed.returncode == 0, completed
    assert f"batch shell received {signum.name}; forwarding it" in completed.output
    _assert_every_rank_checkpointed(completed.output, tmp_path / "checkpoints"
                                    / f"hpcdist-test-{JOB_ID}", signum.name)
    assert _requeues(slurm) == [["requeue", JOB_ID]]


def test_preemptible_template_fails_a_failed_job_without_requeue(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2)
    completed = slurm.run("preemptible.sbatch", sys.executable, FAKE_TRAINING, "--exit", "1")
    assert completed.returncode == 1, completed
    assert "job step exited with 1" in completed.output
    assert _requeues(slurm) == []


def test_preemptible_template_ends_when_training_finishes(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2)
    completed = slurm.run("preemptible.sbatch", sys.executable, FAKE_TRAINING)
    assert completed.returncode == 0, completed
    assert "job step exited with 0" in completed.output
    assert _requeues(slurm) == []


def test_preemptible_template_stops_requeueing_at_the_cap(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, SLURM_RESTART_COUNT=3, HPCDIST_MAX_REQUEUES=3)
    completed = slurm.run("preemptible.sbatch", *TRAIN, send=signal.SIGUSR1)
    assert completed.returncode == 75, completed
    assert "run 4 of job" in completed.output
    assert "requeued 3 times already" in completed.output
    assert _requeues(slurm) == []


@pytest.mark.parametrize("state", ["CANCELLED", "COMPLETING"])
def test_preemptible_template_does_not_requeue_a_cancelled_job(tmp_path, state):
    # scancel sends SIGTERM: the job checkpoints, but must stay cancelled (a real
    # Slurm shows it as COMPLETING until the batch script has ended)
    slurm = FakeSlurm(tmp_path, ntasks=2, FAKE_JOB_STATE=state)
    completed = slurm.run("preemptible.sbatch", *TRAIN, send=signal.SIGTERM)
    assert completed.returncode == 75, completed
    assert f"job {JOB_ID} was cancelled, so it is not requeued" in completed.output
    assert _requeues(slurm) == []


def test_chain_template_submits_the_next_job_after_a_checkpoint(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, SLURM_JOB_ACCOUNT="proj42",
                      SLURM_JOB_PARTITION="batch")
    completed = slurm.run("chain.sbatch", *TRAIN, send=signal.SIGUSR1)
    assert completed.returncode == 0, completed
    checkpoints = tmp_path / "checkpoints" / f"chain-{JOB_ID}"
    _assert_every_rank_checkpointed(completed.output, checkpoints)
    [sbatch] = slurm.calls("sbatch")
    # the same script (sbatch's spool copy, "$0") with the same arguments
    assert sbatch["argv"] == [f"--dependency=afterany:{JOB_ID}", "--account=proj42",
                              "--partition=batch", str(slurm.script("chain.sbatch")),
                              *map(str, TRAIN)]
    assert sbatch["env"] == {"HPCDIST_CHAIN_ID": JOB_ID, "HPCDIST_CHAIN_INDEX": "1",
                             "HPCDIST_CHAIN_MAX": "10", "HPCDIST_CHECKPOINT_DIR": str(checkpoints)}


def test_chain_template_ends_the_chain_when_training_finishes(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, HPCDIST_CHAIN_ID="4000", HPCDIST_CHAIN_INDEX=1)
    completed = slurm.run("chain.sbatch", sys.executable, FAKE_TRAINING)
    assert completed.returncode == 0, completed
    assert "chain 4000: job 2 of at most 10" in completed.output
    assert f"--checkpoint-dir\", \"{tmp_path}/checkpoints/chain-4000" in completed.output
    assert slurm.calls("sbatch") == []


def test_chain_template_stops_at_the_chain_length_cap(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, HPCDIST_CHAIN_INDEX=2, HPCDIST_CHAIN_MAX=3)
    completed = slurm.run("chain.sbatch", *TRAIN, send=signal.SIGUSR1)
    assert completed.returncode == 75, completed
    assert "reached HPCDIST_CHAIN_MAX=3" in completed.output
    assert slurm.calls("sbatch") == []


def test_chain_template_ends_the_chain_when_the_job_is_cancelled(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2, FAKE_JOB_STATE="CANCELLED")
    completed = slurm.run("chain.sbatch", *TRAIN, send=signal.SIGTERM)
    assert completed.returncode == 75, completed
    assert "was cancelled: the chain ends here" in completed.output
    assert slurm.calls("sbatch") == []


def test_chain_template_fails_a_failed_job_without_resubmission(tmp_path):
    slurm = FakeSlurm(tmp_path, ntasks=2)
    completed = slurm.run("chain.sbatch", sys.executable, FAKE_TRAINING, "--exit", "3")
    assert completed.returncode == 3, completed
    assert slurm.calls("sbatch") == []
