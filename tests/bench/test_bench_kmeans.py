"""Smoke test of the K-means benchmark harness (not a speed test).

Serial tests in child processes: ``python -m hpcdist.bench.kmeans --quick``
outside mpiexec (one job at 1 rank, one at 2 ranks, each with the
baselines, merged into one report), and one job started directly under
``mpiexec``.
"""
import importlib.util
import json
import subprocess
import sys

import pytest

from hpcdist.bench.kmeans import QUICK
from tests.helpers import mpiexec_path, run_ok, subprocess_env

pytestmark = pytest.mark.slow

SUMMARY = ("speedup_vs_sklearn_at_2_ranks", "sgemm_peak_fraction_at_2_ranks")


def _run(command, cwd, timeout=240):
    return run_ok(command, cwd, timeout)


@pytest.fixture(scope="module")
def launched(tmp_path_factory):
    """``python -m hpcdist.bench.kmeans --quick`` once: (report, output directory, output)."""
    tmp = tmp_path_factory.mktemp("bench_kmeans")
    output = _run([sys.executable, "-m", "hpcdist.bench.kmeans", "--quick", "--output-dir",
                   str(tmp / "results")], tmp)
    return json.loads((tmp / "results" / "kmeans.json").read_text()), tmp / "results", output


def test_jobs_at_one_and_two_ranks_in_one_report(launched):
    report, _, _ = launched
    assert report["benchmark"] == "kmeans"
    settings = report["settings"]
    assert settings["rank_counts"] == [1, 2] and settings["quick"]
    assert (settings["samples"], settings["clusters"]) == (QUICK["samples"], QUICK["clusters"])
    assert settings["flops_per_iteration"] == 2.0 * QUICK["samples"] * QUICK["clusters"] * \
        QUICK["features"]
    assert list(report["runs"]) == ["1", "2"]
    for key, run in report["runs"].items():
        assert run["ranks"] == int(key) == run["machine"]["ranks"]
        assert run["sgemm_peak_gflops"] > 0
        case = run["cases"]["hpcdist"]
        assert case["n_iter"] == QUICK["iterations"]
        assert len(case["fit_seconds"]) == QUICK["repetitions"]
        assert case["seconds_per_iteration"] > 0
        assert case["gflops"] == pytest.approx(settings["flops_per_iteration"]
                                               / case["seconds_per_iteration"] / 1e9)
        assert case["sgemm_peak_fraction"] == pytest.approx(case["gflops"]
                                                            / run["sgemm_peak_gflops"])


def test_baselines_timed_in_the_one_rank_job_and_results_agree(launched):
    report, out, _ = launched
    one, two = report["runs"]["1"], report["runs"]["2"]
    has_sklearnex = importlib.util.find_spec("sklearnex") is not None
    for run in (one, two):  # every job times the baselines, under the same load
        assert "scikit-learn" in run["cases"]
        assert ("sklearnex" in run["cases"]) == has_sklearnex
        assert run["cases"]["scikit-learn"]["n_iter"] == QUICK["iterations"]
        assert run["cases"]["scikit-learn"]["inertia"] == pytest.approx(
            one["cases"]["scikit-learn"]["inertia"], rel=1e-12)
    reference = two["cases"]["scikit-learn"]
    for key, entry in report["agreement_with_sklearn"].items():
        assert entry["same_n_iter"], key
        assert entry["inertia_relative_difference"] < 1e-5, key
    summary = report["summary"]
    assert set(summary) == set(SUMMARY)
    for entry in summary.values():
        assert set(entry) == {"ratio", "value"} and entry["value"] > 0
    assert report["command"] == f"hpcdist bench kmeans --quick --output-dir {out}"
    speedup = summary["speedup_vs_sklearn_at_2_ranks"]["value"]
    assert speedup == pytest.approx(reference["seconds_per_iteration"]
                                    / two["cases"]["hpcdist"]["seconds_per_iteration"])


def test_table_summary_and_plot(launched):
    _, out, output = launched
    assert "1 rank(s):" in output and "2 rank(s):" in output
    assert "\nSummary:" in output
    for word in ("PASS", "MISS", "target"):
        assert word not in output, word
    png = out / "kmeans.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert not png.exists()
    else:
        assert png.stat().st_size > 0


def test_one_job_under_mpiexec_without_baselines(tmp_path):
    output = _run([mpiexec_path(), "-n", "1", sys.executable, "-m", "hpcdist.bench.kmeans",
                   "--quick", "--no-baselines", "--no-plot", "--output-dir", str(tmp_path)],
                  tmp_path)
    report = json.loads((tmp_path / "kmeans.json").read_text())
    assert list(report["runs"]) == ["1"]
    assert list(report["runs"]["1"]["cases"]) == ["hpcdist"]
    assert report["runs"]["1"]["sklearnex"] == "left out (--no-baselines)"
    assert {entry["value"] for entry in report["summary"].values()} == {None}
    assert not (tmp_path / "kmeans.png").exists()
    assert "\nSummary:" in output and "not measured" in output


def test_bad_options_are_refused(tmp_path):
    completed = subprocess.run([sys.executable, "-m", "hpcdist.bench.kmeans", "--samples", "10",
                                "--clusters", "64"], capture_output=True, text=True,
                               env=subprocess_env(), cwd=str(tmp_path), timeout=60)
    assert completed.returncode == 2
    assert "--samples=10 should be at least --clusters x ranks" in completed.stderr
