"""Smoke test of the checkpoint benchmark harness (not a speed test).

Serial tests in child processes: ``python -m hpcdist.bench.checkpoint --quick``
launching one job at 1 rank and one at 2 ranks (merged into one report), and
one job started directly under ``mpiexec``.
"""
import argparse
import importlib.util
import json
import sys

import h5py
import pytest

from hpcdist.bench.checkpoint import parse_size
from tests.helpers import mpiexec_path, run_ok

pytestmark = pytest.mark.slow

PARALLEL = bool(h5py.get_config().mpi)
BACKENDS = ["sharded", "mpio"] if PARALLEL else ["sharded"]


def _run(command, cwd, timeout=240):
    return run_ok(command, cwd, timeout)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``python -m hpcdist.bench.checkpoint --quick`` (1 and 2 ranks) once."""
    tmp = tmp_path_factory.mktemp("bench_checkpoint")
    output = _run([sys.executable, "-m", "hpcdist.bench.checkpoint", "--quick", "--ranks", "1,2",
                   "--dir", str(tmp / "work"), "--output-dir", str(tmp / "results")], tmp)
    return json.loads((tmp / "results" / "checkpoint.json").read_text()), tmp, output


def test_report_has_every_case_at_one_and_two_ranks(launched):
    report, tmp, _ = launched
    assert report["benchmark"] == "checkpoint"
    assert report["settings"]["rank_counts"] == [1, 2]
    assert report["settings"]["state_bytes"] == 16 << 20
    assert list(report["runs"]) == ["1", "2"]
    for key, run in report["runs"].items():
        assert run["ranks"] == int(key) == run["machine"]["ranks"]
        assert run["backends"] == BACKENDS and run["h5py_parallel"] == PARALLEL
        expected = {"h5py save", "h5py+fsync save", "h5py restore"}
        for backend in BACKENDS:
            expected |= {f"hpcdist {backend} save", f"hpcdist {backend} restore"}
        assert set(run["cases"]) == expected
        for name, record in run["cases"].items():
            assert len(record["seconds"]) == run["repetitions"] == 2, name
            assert record["gib_per_second"] == pytest.approx(
                (16 << 20) / 2**30 / record["median_seconds"])
        for backend in BACKENDS:
            ratio = run["ratios"][f"hpcdist {backend} save / h5py save"]
            assert ratio == pytest.approx(run["cases"][f"hpcdist {backend} save"]["gib_per_second"]
                                          / run["cases"]["h5py save"]["gib_per_second"])
        if not PARALLEL:
            assert "not parallel" in run["left_out"]["mpio"]
    assert list((tmp / "work").iterdir()) == [], "the benchmark's checkpoints were not removed"


def test_summary_table_and_plot(launched):
    report, tmp, output = launched
    summary = report["summary"]
    assert set(summary) == {f"save_{backend}_vs_h5py_at_{n}_ranks"
                            for backend in ("sharded", "mpio") for n in (1, 2)}
    for name, entry in summary.items():
        if "mpio" in name and not PARALLEL:
            assert entry["value"] is None
        else:
            assert entry["value"] > 0
        assert set(entry) == {"ratio", "value"}
    assert "1 rank(s): 16 MiB of state" in output and "2 rank(s): 16 MiB of state" in output
    assert "\nSummary:" in output
    for word in ("PASS", "MISS", "target"):
        assert word not in output, word
    png = tmp / "results" / "checkpoint.png"
    assert png.exists() == (importlib.util.find_spec("matplotlib") is not None)


def test_one_job_under_mpiexec(tmp_path):
    output = _run([mpiexec_path(), "-n", "1", sys.executable, "-m", "hpcdist.bench.checkpoint",
                   "--quick", "--size", "8M", "--backends", "sharded", "--repetitions", "1",
                   "--no-plot", "--output-dir", str(tmp_path)], tmp_path)
    report = json.loads((tmp_path / "checkpoint.json").read_text())
    assert list(report["runs"]) == ["1"] and report["settings"]["state_bytes"] == 8 << 20
    assert report["runs"]["1"]["backends"] == ["sharded"]
    assert set(report["summary"]) == {"save_sharded_vs_h5py_at_1_ranks",
                                      "save_sharded_vs_h5py_at_2_ranks"}
    assert report["summary"]["save_sharded_vs_h5py_at_2_ranks"]["value"] is None
    assert report["command"] == ("mpiexec -n 1 hpcdist bench checkpoint --quick --size 8M "
                                 f"--backends sharded --repetitions 1 --no-plot --output-dir "
                                 f"{tmp_path}")
    assert not (tmp_path / "checkpoint.png").exists()
    assert "hpcdist sharded save" in output


@pytest.mark.parametrize("text,size", [("1G", 2**30), ("256MiB", 256 << 20), ("64m", 64 << 20),
                                       ("8388608", 8 << 20), ("1.5G", 3 << 29)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "1X", "-5M", "1K"])
def test_parse_size_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)
