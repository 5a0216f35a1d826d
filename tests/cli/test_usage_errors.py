"""Usage errors of ``hpcdist bench`` and ``hpcdist train`` started under mpiexec: the
message is printed once (by rank 0) and every rank exits with argparse's status 2."""
import re
import subprocess
import sys

import h5py
import numpy as np
import pytest

from tests.helpers import mpiexec_path, subprocess_env

#: run by every rank: the command, then a line with the rank and the command's exit status
_REPORT_STATUS = ('status=0; "$@" || status=$?; '
                  'echo "rank ${PMI_RANK:-$OMPI_COMM_WORLD_RANK} exit $status"; exit $status')


def _at_two_ranks(argv, tmp_path):
    command = [mpiexec_path(), "-n", "2", "sh", "-c", _REPORT_STATUS, "sh", sys.executable,
               "-m", "hpcdist.cli.main", *argv]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=subprocess_env(), stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def _every_reporting_rank_exited_2(output):
    """Every rank whose shell reported exited 2. Open MPI's mpiexec may end the other
    ranks once the first has exited non-zero, before their shell reports, so not every
    rank needs to report; at least one must."""
    statuses = re.findall(r"rank \d exit \d+", output)
    return bool(statuses) and all(status.endswith(" exit 2") for status in statuses)


@pytest.mark.parametrize("argv, message", [
    (["bench", "compression", "--bogus"], "unrecognized arguments: --bogus"),
    (["bench", "compression", "--elements", "10"], "--elements=10 should be >= 1024"),
    (["bench", "kmeans", "--ranks", "x"], "argument --ranks: 'x' should be a comma list"),
    (["bench", "collectives", "-n"], "-n needs a number of ranks"),
    (["train", "mlp", "--hidden-layer-sizes", "64,x"], "'64,x' should be comma-separated"),
    (["train", "forest", "--data", "data.h5", "--x", "X"], "needs targets: pass --y NAME"),
], ids=["bench-unknown", "bench-value", "bench-type", "bench-ranks", "train-type",
        "train-missing"])
def test_printed_once_and_every_rank_exits_2(tmp_path, argv, message):
    returncode, output = _at_two_ranks(argv, tmp_path)
    assert returncode == 2, output
    assert output.count(message) == 1 and output.count("usage: hpcdist") == 1, output
    assert _every_reporting_rank_exited_2(output), output


@pytest.mark.parametrize("argv, message", [
    (["train", "kmeans", "--checkpoint-every", "-1"], "--checkpoint-every -1 should be >= 1"),
    (["train", "kmeans", "--output", "missing/m.json"],
     "--output missing/m.json: no directory"),
    (["train", "kmeans", "--output", "."], "--output .: is a directory"),
], ids=["checkpoint-every", "output-folder", "output-directory"])
def test_train_checks_its_arguments_before_any_work(tmp_path, argv, message):
    returncode, output = _at_two_ranks(argv, tmp_path)
    assert returncode == 2, output
    assert output.count(message) == 1 and "results" not in output, output


@pytest.mark.parametrize("argv, message", [
    (["train", "kmeans", "--n-clusters", "-3"],
     "hpcdist train kmeans: KMeans: n_clusters=-3 should be an integer >= 1"),
    (["train", "kmeans", "--dataset", "blobs", "--n-samples", "20", "--n-clusters", "50"],
     "hpcdist train kmeans: n_samples=16 should be >= n_clusters=50."),
    (["train", "forest", "--data", "text.h5", "--x", "X", "--y", "y"],
     "cannot be read as an HDF5 file"),
    (["train", "forest", "--data", "data.h5", "--x", "X", "--y", "y_short"],
     "hpcdist train forest: --y y_short has 20 row(s) but --x X has 40 in data.h5"),
    (["train", "forest", "--data", "data.h5", "--x", "X", "--y", "names"],
     "hpcdist train forest: --y names: the targets in data.h5 have dtype |S1, not numbers"),
    (["train", "mlp", "--data", "data.h5", "--x", "X", "--y", "y", "--batch-size", "1000"],
     "hpcdist train mlp: --batch-size 1000 is more than the 32 training row(s)"),
    (["train", "forest", "--data", "data.h5", "--x", "X", "--y", "y", "--max-features", "50"],
     "max_features=50 should be in [1, n_features=3]"),
    (["train", "mlp", "--data", "data.h5", "--x", "X", "--y", "one_class", "--batch-size", "16"],
     "MLPClassifier.fit: all ranks together have only one class, [0], in n_samples=32"),
], ids=["hyper-parameter", "too-few-rows", "not-hdf5", "target-rows", "target-dtype",
        "batch-size", "max-features", "one-class"])
def test_train_user_mistakes_are_one_line_without_traceback(tmp_path, argv, message):
    (tmp_path / "text.h5").write_text("not HDF5\n")
    with h5py.File(tmp_path / "data.h5", "w") as handle:
        handle["X"], handle["y"] = np.zeros((40, 3)), np.arange(40) % 2
        handle["y_short"], handle["names"] = np.zeros(20), np.array([b"a", b"b"] * 20)
        handle["one_class"] = np.zeros(40, dtype=np.int64)
    returncode, output = _at_two_ranks(argv, tmp_path)
    assert returncode == 2, output
    assert output.count(message) == 1, output
    assert "Traceback" not in output and "Abort" not in output, output
    assert _every_reporting_rank_exited_2(output), output
