"""Smoke test of the MLP training benchmark harness (not a speed test).

Serial tests in child processes: ``hpcdist bench mlp -n 2 --quick`` (the
command line launching one job at 1 rank and one at 2 ranks, merged into one
report), and one job started directly under ``mpiexec`` without torch.
"""
import importlib.util
import json
import os
import sys

import pytest

from hpcdist.bench.mlp import DEFAULT_SWEEP, LAYER_SIZES
from tests.helpers import mpiexec_path, run_ok

pytestmark = pytest.mark.slow

HPCDIST = os.path.join(os.path.dirname(sys.executable), "hpcdist")
HAVE_TORCH = importlib.util.find_spec("torch") is not None
N_PARAMETERS = 2 * (len(LAYER_SIZES) - 1)  # a weight and a bias per Linear
SUMMARY = ("samples_per_second_vs_torch_at_1_ranks", "samples_per_second_vs_torch_at_2_ranks",
           "torch_adapter_vs_torch_ddp_at_2_ranks", "exposed_communication_at_2_ranks")


def _run(command, cwd, timeout=180):
    return run_ok(command, cwd, timeout)


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """``hpcdist bench mlp -n 2 --quick`` once; returns (report, output directory, output)."""
    tmp = tmp_path_factory.mktemp("bench_mlp")
    output = _run([HPCDIST, "bench", "mlp", "-n", "2", "--quick", "--output-dir",
                   str(tmp / "results")], tmp)
    return json.loads((tmp / "results" / "mlp.json").read_text()), tmp / "results", output


def test_cli_measures_one_and_two_ranks_into_one_report(cli_run):
    report, _, _ = cli_run
    assert report["benchmark"] == "mlp"
    assert report["settings"]["layers"] == list(LAYER_SIZES)
    assert report["settings"]["rank_counts"] == [1, 2]
    assert list(report["runs"]) == ["1", "2"]
    assert report["command"].startswith("hpcdist bench mlp --ranks 1,2 --quick --output-dir ")
    assert report["machine"]["ranks"] == 2
    for key, run in report["runs"].items():
        assert run["ranks"] == int(key) == run["machine"]["ranks"]
        assert run["global_batch"] == report["settings"]["global_batch"]
        assert run["local_batch"] * run["ranks"] == run["global_batch"]
        assert run["blas_threads_per_rank"] >= 1
        for name, record in run["cases"].items():
            where = f"{name} at {key} ranks"
            assert record["step_ms"] > 0 and record["samples_per_second"] > 0, where
            assert len(record["block_seconds"]) == run["repetitions"], where
            assert min(record["block_seconds"]) > 0, where
            assert record["samples_per_second"] == pytest.approx(
                run["global_batch"] * 1e3 / record["step_ms"]), where


def test_two_ranks_report_overlap_and_bucket_sweep(cli_run):
    report, _, _ = cli_run
    one, two = report["runs"]["1"], report["runs"]["2"]
    assert "bucket_sweep" not in one and "communication_share" not in one
    assert {"hpcdist", "hpcdist no_sync"} <= set(two["cases"])
    share = two["cases"]["hpcdist"]["exposed_communication_share"]
    assert 0 <= share <= two["cases"]["hpcdist"]["exposed_communication_share_max_rank"] <= 1
    assert all(len(shares) == 2 for shares in
               two["cases"]["hpcdist"]["exposed_communication_shares_per_rank"])
    assert two["communication_share"]["hpcdist"] < 1
    sweep = {row["bucket_size_mb"]: row for row in two["bucket_sweep"]}
    assert list(sweep) == ["0", "1", "4", "25", "inf"] == [
        "inf" if size == float("inf") else f"{size:g}" for size in DEFAULT_SWEEP]
    assert sweep["0"]["buckets"] == N_PARAMETERS  # one bucket per parameter
    assert sweep["inf"]["buckets"] == sweep["25"]["buckets"] == 1  # 7 MiB of gradients
    assert sweep["25"]["step_ms"] == two["cases"]["hpcdist"]["step_ms"]  # the main case
    for row in sweep.values():
        assert row["samples_per_second"] > 0 and 0 <= row["exposed_communication_share"] <= 1


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_ddp_baseline_and_ratios(cli_run):
    report, _, _ = cli_run
    for key, run in report["runs"].items():
        assert run["torch"]["available"] and run["torch"]["backend"] == "gloo"
        assert run["torch"]["threads"] == run["blas_threads_per_rank"], key
        assert "torch" in run["cases"], key
        ratio = run["ratio"]["hpcdist/torch samples_per_second"]
        assert ratio == pytest.approx(run["cases"]["hpcdist"]["samples_per_second"]
                                      / run["cases"]["torch"]["samples_per_second"])
    assert "torch no_sync" in report["runs"]["2"]["cases"]
    adapter = report["runs"]["2"]["cases"]["torch+hpcdist"]  # hpcdist.torch's optimizer
    assert report["runs"]["2"]["ratio"]["adapter/torch samples_per_second"] == pytest.approx(
        adapter["samples_per_second"] / report["runs"]["2"]["cases"]["torch"]["samples_per_second"])
    assert set(report["runs"]["2"]["communication_share"]) == {"hpcdist", "torch"}
    summary = report["summary"]
    assert set(summary) == set(SUMMARY)
    assert all(set(entry) == {"ratio", "value"} and entry["value"] > 0
               for entry in summary.values())


def test_table_summary_and_plot(cli_run):
    _, out, output = cli_run
    assert "1 rank(s): global batch" in output and "2 rank(s): global batch" in output
    assert "bucket sweep (hpcdist)" in output
    assert "\nSummary:" in output
    for word in ("PASS", "MISS", "target"):
        assert word not in output, word
    assert "torch+hpcdist/torch samples/s" in output or not HAVE_TORCH
    png = out / "mlp.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert not png.exists()
    else:
        assert png.stat().st_size > 0


def test_one_job_under_mpiexec_without_torch(tmp_path):
    """Started by mpiexec itself, it measures that rank count only; --no-torch is noted."""
    output = _run([mpiexec_path(), "-n", "1", sys.executable, "-m", "hpcdist.bench.mlp",
                   "--quick", "--no-torch", "--no-plot", "--output-dir", str(tmp_path)], tmp_path)
    report = json.loads((tmp_path / "mlp.json").read_text())
    assert list(report["runs"]) == ["1"]
    run = report["runs"]["1"]
    assert run["torch"] == {"available": False, "note": "left out (--no-torch)"}
    assert list(run["cases"]) == ["hpcdist"] and "ratio" not in run
    assert {entry["value"] for entry in report["summary"].values()} == {None}
    assert not (tmp_path / "mlp.png").exists()
    assert "torch: left out (--no-torch)" in output
