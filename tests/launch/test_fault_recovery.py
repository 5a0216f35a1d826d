"""End-to-end recovery: a rank killed mid-training, or the job stopped by SIGUSR1, resumes
from its checkpoint under ``hpcdist run`` and ends with the uninterrupted run's model."""
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import subprocess_env

pytestmark = pytest.mark.timeout(240)

TRAIN = """
import os, signal, sys, time
import numpy as np
import hpcdist
from hpcdist.checkpoint import CheckpointManager
from hpcdist.data import make_classification
from hpcdist.ml import MLPClassifier

out, kill_epoch, slow = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
ctx = hpcdist.init()
restart = int(os.environ.get("HPCDIST_RESTART_COUNT", "0"))
X, y = make_classification(480, 6, 3, random_state=3)
original = MLPClassifier._epoch

def epoch(self, *args):
    if self.n_iter_ == kill_epoch and restart == 0 and ctx.rank == ctx.size - 1:
        with open(os.path.join(out, "killed_at"), "w") as f:
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(slow)
    return original(self, *args)

MLPClassifier._epoch = epoch
clf = MLPClassifier((8,), batch_size=16, max_iter=8, random_state=0, tol=0)
checkpoint = None
if kill_epoch >= -1:
    checkpoint = CheckpointManager(os.path.join(out, "ckpt"))
    if checkpoint.latest_step() is not None and ctx.rank == 0:
        with open(os.path.join(out, "resumed_at"), "w") as f:
            f.write(repr(time.time()))
if ctx.rank == 0:
    print("training", flush=True)
clf.fit(X, y, checkpoint=checkpoint, checkpoint_every=1 if checkpoint else None)
if ctx.rank == 0:
    np.save(os.path.join(out, "parameters.npy"), clf.get_parameters())
"""


def _hpcdist_run(args, tmp_path, **popen):
    return subprocess.Popen([sys.executable, "-m", "hpcdist.cli.main", "run", *args],
                            cwd=tmp_path, env=subprocess_env(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen)


def _reference(tmp_path):
    out = tmp_path / "reference"
    out.mkdir()
    (tmp_path / "train.py").write_text(TRAIN)
    done = _hpcdist_run(["-n", "2", "--", sys.executable, str(tmp_path / "train.py"),
                         str(out), "-2", "0"], tmp_path)
    stdout, stderr = done.communicate(timeout=180)
    assert done.returncode == 0, stdout + stderr
    return np.load(out / "parameters.npy")


def test_rank_killed_at_a_random_step_resumes_to_the_same_model(tmp_path):
    expected = _reference(tmp_path)
    out = tmp_path / "faulty"
    out.mkdir()
    kill_epoch = random.randint(1, 6)
    job = _hpcdist_run(["-n", "2", "--max-restarts", "2", "--backoff", "0.1", "--",
                        sys.executable, str(tmp_path / "train.py"), str(out), str(kill_epoch),
                        "0"], tmp_path)
    stdout, stderr = job.communicate(timeout=180)
    assert job.returncode == 0, stdout + stderr
    assert "rank 1: signal SIGKILL" in stderr and "1 restart(s)" in stderr
    np.testing.assert_array_equal(np.load(out / "parameters.npy"), expected)
    recovery = float((out / "resumed_at").read_text()) - float((out / "killed_at").read_text())
    print(f"killed at epoch {kill_epoch}; training resumed {recovery:.2f} s after the kill")
    assert recovery < 60


def test_sigusr1_checkpoints_exits_75_and_the_next_run_resumes(tmp_path):
    expected = _reference(tmp_path)
    out = tmp_path / "stopped"
    out.mkdir()
    args = ["-n", "2", "--", sys.executable, str(tmp_path / "train.py"), str(out), "-1", "0.3"]
    job = _hpcdist_run(args, tmp_path)
    assert "training" in job.stdout.readline()
    time.sleep(1.0)
    job.send_signal(signal.SIGUSR1)
    stdout, stderr = job.communicate(timeout=120)
    assert job.returncode == 75, stdout + stderr
    assert not (out / "parameters.npy").exists()
    again = _hpcdist_run(args[:2] + ["--"] + args[3:-1] + ["0"], tmp_path)
    stdout, stderr = again.communicate(timeout=180)
    assert again.returncode == 0, stdout + stderr
    assert (out / "resumed_at").exists()
    np.testing.assert_array_equal(np.load(out / "parameters.npy"), expected)
