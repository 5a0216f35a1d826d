"""The templates that outlive a signal under a real Slurm: preemptible.sbatch
(checkpoint, ``scontrol requeue``, resume under the same job id),
chain.sbatch (checkpoint, the next link with ``--dependency=afterany``) and
sweep_array.sbatch (a task requeued by Slurm resumes).

The signal is what ``--signal=B:USR1@120`` sends at the time limit:
``scancel --signal=USR1 --batch``, to the batch shell alone. A resumed run
shows it in its progress bar, which starts at the checkpoint's epoch.
"""

import re
import time
from pathlib import Path

import numpy as np
import pytest

from tests.slurm_real.cluster import (
    SLURM_DIR,
    Job,
    checkpoint_contents,
    checkpoint_steps,
    record_measurement,
)
from tests.slurm_real.training import EPOCHS, TRAIN, first_epoch_shown, wait_for_checkpoint

pytestmark = pytest.mark.slurm_cluster

SMALL = ["--ntasks-per-node=2"]


def _checkpoints(job, name="hpcdist-preemptible"):
    return job.directory / "checkpoints" / f"{name}-{job.id}"


def _signal_after_first_checkpoint(job, directory):
    """USR1 to the batch shell once training has checkpointed; the time sent."""
    wait_for_checkpoint(job, directory)
    job.signal_batch_shell("USR1")
    return time.monotonic()


def _requeued_at(job, directory, restarts=1):
    """Wait until the job is back in the queue after a requeue; the newest step
    then (where the next run must resume)."""
    def waiting_again(job):
        info = job.info()  # PENDING: the earlier run has ended (and saved)
        return int(info["Restarts"]) >= restarts and info["JobState"] == "PENDING"
    job.wait_until(waiting_again, "a requeue")
    return checkpoint_steps(directory)[-1]


def _assert_same_checkpoints(resumed, uninterrupted):
    a, b = checkpoint_contents(resumed), checkpoint_contents(uninterrupted)
    assert sorted(a) == sorted(b)
    different = [key for key in a if a[key].dtype != b[key].dtype or a[key].shape !=
                 b[key].shape or a[key].tobytes() != b[key].tobytes()]
    assert not different, f"differ between {resumed} and {uninterrupted}: {different}"
    assert any(value.dtype.kind == "f" and value.size > 100 for value in a.values())


def test_preemptible_job_resumes_after_a_signal_and_ends_like_an_uninterrupted_one(submitter):
    signalled = submitter.submit("preemptible.sbatch", *TRAIN, options=SMALL)
    reference = submitter.submit("preemptible.sbatch", *TRAIN, options=SMALL)
    directory = _checkpoints(signalled)
    sent = _signal_after_first_checkpoint(signalled, directory)
    step = _requeued_at(signalled, directory)
    assert 0 < step < EPOCHS
    # the same job id runs again (after cred_expire, 10 s here) and resumes at the step
    signalled.wait_for_output(rf"\b{step}/{EPOCHS} \[", after="run 2 of job")
    resumed = time.monotonic() - sent
    record_measurement(f"preemptible.sbatch: USR1 to the batch shell to the resumed "
                       f"training of the requeued job: {resumed:.1f} s (cred_expire=10)")
    info = signalled.wait_finished(restarts=1)
    output = signalled.output()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "1", signalled.describe()
    assert "batch shell received SIGUSR1; forwarding it" in output
    assert f"checkpoint written; requeueing job {signalled.id} to resume" in output
    assert first_epoch_shown(output.split("run 2 of job", 1)[1]) == step
    info = reference.wait_finished()
    assert info["JobState"] == "COMPLETED" and info["Restarts"] == "0", reference.describe()
    # bit for bit: the last checkpoints (the final model and optimizer state)
    last = f"step_{EPOCHS:09d}"
    _assert_same_checkpoints(directory / last, _checkpoints(reference) / last)


def test_preemptible_job_stops_requeueing_at_hpcdist_max_requeues(submitter):
    job = submitter.submit("preemptible.sbatch", *TRAIN, options=SMALL, HPCDIST_MAX_REQUEUES=1)
    directory = _checkpoints(job)
    _signal_after_first_checkpoint(job, directory)
    step = _requeued_at(job, directory)
    # the second run: signalled again once it has trained past the first checkpoint
    wait_for_checkpoint(job, directory, after=step)
    job.signal_batch_shell("USR1")
    info = job.wait_finished(restarts=1)
    output = job.output()
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0", job.describe()
    assert info["Restarts"] == "1", job.describe()
    assert "the job was requeued 1 times already (HPCDIST_MAX_REQUEUES)" in output
    assert output.count("requeueing job") == 1


def test_cancelled_preemptible_job_checkpoints_and_is_not_requeued(submitter):
    job = submitter.submit("preemptible.sbatch", *TRAIN, options=SMALL)
    directory = _checkpoints(job)
    first = wait_for_checkpoint(job, directory)
    job.cancel()  # SIGTERM to the batch shell and the step, SIGKILL after KillWait
    info = job.wait_finished()
    output = job.output()
    assert info["JobState"] == "CANCELLED" and info["Restarts"] == "0", job.describe()
    assert f"job {job.id} was cancelled, so it is not requeued" in output, job.describe()
    assert "SIGTERM received: the job wrote a checkpoint" in output
    assert checkpoint_steps(directory)[-1] > first  # written at the signal
    time.sleep(2)
    assert job.info()["JobState"] == "CANCELLED" and job.restarts() == 0


def test_chain_submits_the_next_link_which_resumes_until_hpcdist_chain_max(submitter):
    first = submitter.submit("chain.sbatch", *TRAIN, options=SMALL, HPCDIST_CHAIN_MAX=2)
    directory = first.directory / "checkpoints" / f"chain-{first.id}"
    _signal_after_first_checkpoint(first, directory)
    info = first.wait_finished()
    output = first.output()
    assert info["JobState"] == "COMPLETED", first.describe()
    assert "checkpoint written; submitting job 2 of the chain" in output
    step = checkpoint_steps(directory)[-1]
    second = Job(re.search(r"Submitted batch job (\d+)", output).group(1), first.directory)
    submitter.jobs.append(second)
    # afterany: the next link starts only when this one has ended; same checkpoints
    second.wait_for_output(rf"\b{step}/{EPOCHS} \[", after="chain")
    assert f"chain {first.id}: job 2 of at most 2; checkpoints in {directory}" in second.output()
    assert second.info()["StartTime"] >= info["EndTime"]
    # the second link, signalled too, is the last one: HPCDIST_CHAIN_MAX=2
    wait_for_checkpoint(second, directory, after=step)
    second.signal_batch_shell("USR1")
    info = second.wait_finished()
    output = second.output()
    assert info["JobState"] == "FAILED" and info["ExitCode"] == "75:0", second.describe()
    assert "the chain has reached HPCDIST_CHAIN_MAX=2 jobs" in output
    assert "Submitted batch job" not in output


def _parameter_sets():
    text = (SLURM_DIR / "sweep_array.sbatch").read_text()
    block = text.split("PARAMETER_SETS=(", 1)[1].split(")", 1)[0]
    return re.findall(r'"([^"]*)"', block)


def test_sweep_array_tasks_have_their_own_directory_and_a_requeued_task_resumes(submitter):
    sets = _parameter_sets()
    # one rank per task (the template asks for 2) keeps 4 tasks light on 2 cores
    command = ("hpcdist", "train", "mlp", "--dataset", "digits", "--max-iter", "100")
    array = submitter.submit("sweep_array.sbatch", *command, options=["--ntasks-per-node=1"])
    task0 = Job(f"{array.id}_0", array.directory)
    sweep = array.directory / "sweeps" / array.id
    # Slurm requeues task 0 mid-training (as after a node failure); it resumes
    first = wait_for_checkpoint(task0, sweep / "task-0" / "checkpoint")
    task0.requeue()
    step = _requeued_at(task0, sweep / "task-0" / "checkpoint")
    assert step >= first
    tasks = [Job(f"{array.id}_{index}", array.directory) for index in range(len(sets))]
    for index, task in enumerate(tasks):
        info = task.wait_finished(restarts=1 if index == 0 else None)
        assert info["JobState"] == "COMPLETED", task.describe()
        assert info["Restarts"] == ("1" if index == 0 else "0"), task.describe()
        directory = sweep / f"task-{index}"
        recorded = (directory / "parameters.txt").read_text()
        assert f"array task {index}: " in recorded and sets[index] in recorded
        assert f"--checkpoint-dir {directory}/checkpoint" in recorded
        assert (directory / "metrics.json").exists()
        assert checkpoint_steps(directory / "checkpoint")
    # the requeued run (its output file starts anew) resumed at the step it had saved
    assert first_epoch_shown(tasks[0].output(), 100) == step, tasks[0].describe()
    assert Path(tasks[0].info()["StdOut"]).name == f"hpcdist-sweep-{array.id}_0.out"
    assert np.unique([(sweep / f"task-{i}" / "parameters.txt").read_text()
                      for i in range(len(sets))]).size == len(sets)
