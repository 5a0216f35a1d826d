"""hpcdist train: end to end on built-in data, JSON output, bad options."""
import json
import subprocess
import sys

import h5py
import numpy as np
import pytest

from hpcdist.cli import summary
from hpcdist.cli.summary import main as summary_main
from hpcdist.data import make_classification
from tests.helpers import mpiexec_path, subprocess_env

HPCDIST = [sys.executable, "-m", "hpcdist.cli.main"]


def _train(args, tmp_path, n=None, timeout=240):
    prefix = [mpiexec_path(), "-n", str(n)] if n else []
    return subprocess.run([*prefix, *HPCDIST, "train", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path, env=subprocess_env())


def test_mlp_on_digits_at_two_ranks_writes_global_metrics(tmp_path):
    output = tmp_path / "metrics.json"
    done = _train(["mlp", "--quiet", "--output", str(output)], tmp_path, n=2)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "results (global over 2 ranks)" in done.stdout
    report = json.loads(output.read_text())
    assert report["ranks"] == 2 and report["rows"] == 1347 and report["test_rows"] == 450
    assert report["test_accuracy"] >= 0.95


def test_mlp_regression_on_generated_data_with_sklearn_comparison(tmp_path):
    output = tmp_path / "metrics.json"
    done = _train(["mlp", "--quiet", "--dataset", "classification", "--n-samples", "2000",
                   "--n-features", "8", "--max-iter", "5", "--task", "regression",
                   "--compare-sklearn", "--output", str(output)], tmp_path, n=2)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(output.read_text())
    assert report["estimator"] == "MLPRegressor"
    assert report["rows"] + report["test_rows"] == 2000 and report["test_rows"] == 400
    assert "test_r2" in report and "test_r2" in report["sklearn"]


@pytest.mark.parametrize("args, message", [
    (["svm"], "invalid choice: 'svm'"),
    (["mlp", "--dataset", "imagenet"], "invalid choice: 'imagenet'"),
    (["mlp", "--hidden-layer-sizes", "64,x"], "comma-separated integers"),
    (["mlp", "-n", "0"], "-n 0 should be >= 1"),
    (["kmeans", "--n-init", "abc"], "argument --n-init: 'abc' should be an integer >= 1 or 'auto'"),
    (["forest", "--max-depth", "abc"],
     "argument --max-depth: 'abc' should be an integer >= 1 or 'none'"),
    (["forest", "--max-features", "1.5"],
     "argument --max-features: '1.5' should be sqrt, log2, an integer >= 1 or a fraction"),
    (["forest", "--max-features", "0"], "argument --max-features: '0' should be"),
    (["kmeans", "--random-state", "-1"], "--random-state -1 should be in [0, 2**32 - 1]"),
    (["mlp", "--dataset", "blobs", "--n-classes", "1"],
     "--n-classes 1 should be >= 2 for --dataset blobs (or pass --task regression)"),
    (["mlp", "--dataset", "classification", "--n-features", "1"],
     "--n-features 1 is too few for --dataset classification with --n-classes 4: raise "
     "--n-features to 2 or more"),
    (["kmeans", "--x", "X"], "--x names a dataset of --data FILE.h5; pass --data too"),
    (["kmeans", "--y", "y"], "--y names a dataset of --data FILE.h5; pass --data too"),
    (["kmeans", "--checkpoint-dir", "a_file"], "a_file is a file, not a directory"),
    (["kmeans", "--checkpoint-dir", "a_file/ck"], "a_file is a file, not a directory"),
])
def test_bad_options_are_clear(tmp_path, args, message):
    (tmp_path / "a_file").write_text("")
    done = _train(args, tmp_path)
    assert done.returncode == 2
    assert message in done.stderr and "usage: hpcdist" in done.stderr


def test_hdf5_data_each_rank_reads_its_rows_and_missing_names_are_clear(tmp_path, ctx):
    X, y = make_classification(500, 6, 3, random_state=0, ctx=ctx)  # one rank: all rows
    path = tmp_path / "data.h5"
    with h5py.File(path, "w") as handle:
        handle["X"], handle["y"] = X, y
    output = tmp_path / "forest.json"
    done = _train(["forest", "--quiet", "--data", str(path), "--x", "X", "--y", "y",
                   "--n-estimators", "5", "--output", str(output)], tmp_path, n=2)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(output.read_text())
    assert report["rows"] == 400 and report["test_rows"] == 100 and report["features"] == 6
    missing_file = _train(["mlp", "--data", str(tmp_path / "nope.h5"), "--x", "X", "--y", "y"],
                          tmp_path, n=2)
    assert missing_file.returncode == 2 and "no file" in missing_file.stderr
    missing_dataset = _train(["mlp", "--data", str(path), "--x", "Z", "--y", "y"], tmp_path,
                             n=2)
    assert missing_dataset.returncode == 2
    assert "no such dataset at 'Z'" in missing_dataset.stderr
    assert "'X', 'y'" in missing_dataset.stderr


@pytest.mark.parametrize("args, message", [
    (["forest", "--data", "data.h5", "--x", "X", "--y", "y_short", "--n-estimators", "2"],
     "--y y_short has 20 row(s) but --x X has 40 in data.h5; pass datasets with one target"),
    (["forest", "--data", "data.h5", "--x", "X", "--y", "names", "--n-estimators", "2"],
     "--y names: the targets in data.h5 have dtype |S1, not numbers; store class labels"),
    (["mlp", "--data", "data.h5", "--x", "X", "--y", "y", "--batch-size", "1000"],
     "--batch-size 1000 is more than the 32 training row(s) of all ranks; lower --batch-size"),
    (["forest", "--data", "data.h5", "--x", "X", "--y", "y", "--max-features", "9",
      "--n-estimators", "2"],
     "max_features=9 should be in [1, n_features=3]"),
], ids=["rows", "dtype", "batch-size", "estimator"])
def test_data_mistakes_are_one_line_without_traceback(tmp_path, args, message):
    # one process: an estimator's own error is a usage error too (a one-rank job raises it
    # on every rank); the 2-rank cases are in test_usage_errors.py
    with h5py.File(tmp_path / "data.h5", "w") as handle:
        handle["X"], handle["y"] = np.zeros((40, 3)), np.arange(40) % 2
        handle["y_short"], handle["names"] = np.zeros(20), np.array([b"a", b"b"] * 20)
    done = _train([*args, "--quiet"], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hpcdist train {args[0]}: "), done.stderr
    assert message in lines[0]


def test_help_documents_every_option_with_its_default(tmp_path):
    done = subprocess.run([*HPCDIST, "train", "mlp", "--help"], capture_output=True, text=True,
                          env=subprocess_env())
    assert done.returncode == 0
    for option in ("--dataset", "--data", "--checkpoint-dir", "--checkpoint-every", "--output",
                   "--hidden-layer-sizes", "--batch-size"):
        assert option in done.stdout
    assert "(default:" in done.stdout and "digits)" in done.stdout


def test_summary_table_puts_hpcdist_next_to_sklearn(tmp_path, capsys):
    reports = [
        {"model": "mlp", "estimator": "MLPClassifier", "ranks": 2, "rows": 1347, "seconds": 0.5,
         "test_accuracy": 0.9777, "sklearn": {"seconds": 0.25, "test_accuracy": 0.9733}},
        {"model": "kmeans", "estimator": "KMeans", "ranks": 2, "rows": 160000, "seconds": 1.0,
         "inertia": 123.0, "test_inertia": 3199862.97},
    ]
    paths = []
    for index, report in enumerate(reports):
        path = tmp_path / f"{index}.json"
        path.write_text(json.dumps(report))
        paths.append(str(path))
    assert summary_main(paths) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert [cell.strip() for cell in lines[0].split("  ") if cell.strip()] == [
        "model", "train rows", "held-out metric", "hpcdist", "scikit-learn", "fit s hpcdist",
        "fit s scikit-learn", "hpcdist speed"]
    assert lines[2].split() == ["mlp", "1,347", "accuracy", "(higher", "is", "better)",
                                "0.9777", "0.9733", "0.50", "0.25", "0.50x"]
    assert lines[3].split() == ["kmeans", "160,000", "inertia", "(lower", "is", "better)",
                                "3,199,863", "-", "1.00", "-", "-"]
    assert "2 MPI rank(s) on a machine with" in out and "n_jobs=-1" in out
    for word in ("PASS", "MISS", "target", "!"):
        assert word not in out, word


def test_summary_says_when_other_work_shared_the_cores(monkeypatch):
    reports = [{"model": "mlp", "ranks": 2, "rows": 10, "seconds": 1.0, "test_accuracy": 0.5}]
    monkeypatch.setattr(summary.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(summary.os, "getloadavg", lambda: (7.5, 7.0, 6.0))
    assert "load average 7.5 on 2 cores" in summary.setting_notes(reports)[-1]
    monkeypatch.setattr(summary.os, "getloadavg", lambda: (1.5, 1.0, 1.0))
    assert not any("load average" in line for line in summary.setting_notes(reports))
