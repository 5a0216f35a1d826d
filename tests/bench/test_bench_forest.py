"""Smoke test of the random forest benchmark harness (not a speed test).

Serial tests in child processes: the benchmark script launching one job at 1
rank and one at 2 ranks (merged into one report), and one job started
directly under ``mpiexec`` without the baselines.
"""
import json
import sys

import pytest

from hpcdist.bench.forest import QUICK, main
from tests.helpers import REPO_ROOT, mpiexec_path, run_ok

pytestmark = pytest.mark.slow

SUMMARY = ("fit_speedup_vs_sklearn_at_2_ranks", "accuracy_vs_sklearn_at_2_ranks",
           "fit_speedup_vs_sklearnex_at_2_ranks", "accuracy_vs_sklearnex_at_2_ranks",
           "fit_speedup_vs_sklearnex_at_1_ranks", "accuracy_vs_sklearnex_at_1_ranks",
           "fit_memory_vs_sklearnex_at_1_ranks", "fit_memory_vs_sklearnex_at_2_ranks")


def _run(command, cwd, timeout=240):
    return run_ok(command, cwd, timeout)


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """``benchmarks/bench_forest.py --quick`` once: (report, output)."""
    tmp = tmp_path_factory.mktemp("bench_forest")
    output = _run([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_forest.py"), "--quick",
                   "--output-dir", str(tmp / "results")], tmp)
    return json.loads((tmp / "results" / "forest.json").read_text()), output


def test_one_and_two_ranks_in_one_report(script_run):
    report, _ = script_run
    assert report["benchmark"] == "forest"
    assert report["settings"]["rank_counts"] == [1, 2]
    assert report["settings"]["forest"]["n_estimators"] == QUICK["trees"]
    assert list(report["runs"]) == ["1", "2"]
    for key, run in report["runs"].items():
        assert run["ranks"] == int(key) == run["machine"]["ranks"]
        ours = run["cases"]["hpcdist"]
        assert len(ours["fit_seconds"]) == QUICK["repetitions"]
        assert ours["median_fit_seconds"] > 0 and 0.5 < ours["accuracy"] <= 1
        assert ours["nodes"] > QUICK["trees"] and ours["numba_threads_per_rank"] >= 1
        for case in run["cases"].values():
            assert case["fit_peak_resident_mib"] > case["fit_added_resident_mib"] >= 0
            assert case["predict_proba_rows_per_second"] == pytest.approx(
                QUICK["test"] / case["predict_proba_seconds"])
    assert report["runs"]["2"]["cases"]["hpcdist"]["communication"]["allreduce"]["calls"] > 0


def test_forest_is_identical_at_both_rank_counts(script_run):
    report, _ = script_run
    runs = report["runs"]
    assert report["forest_identical_across_rank_counts"] is True
    assert (runs["1"]["cases"]["hpcdist"]["accuracy"]
            == runs["2"]["cases"]["hpcdist"]["accuracy"])


def test_scikit_learn_baseline_and_summary(script_run):
    report, output = script_run
    baseline = report["runs"]["1"]["cases"]["scikit-learn"]
    assert baseline["median_fit_seconds"] > 0 and baseline["n_jobs"] >= 1
    assert "scikit-learn" not in report["runs"]["2"]["cases"]
    comparison = report["comparisons"]["2"]
    assert comparison["speedup_vs_scikit-learn"] == pytest.approx(
        baseline["median_fit_seconds"]
        / report["runs"]["2"]["cases"]["hpcdist"]["median_fit_seconds"])
    summary = report["summary"]
    assert set(summary) == set(SUMMARY)
    intelex = "scikit-learn-intelex" in report["runs"]["1"]["cases"]
    for name, entry in summary.items():  # measured where its baseline ran, else None
        assert (entry["value"] is not None) == ("sklearn_" in name or intelex), name
        assert set(entry) == {"ratio", "value"}, name
    assert summary["fit_speedup_vs_sklearn_at_2_ranks"]["value"] == pytest.approx(
        comparison["speedup_vs_scikit-learn"])
    assert comparison["predict_speedup_vs_scikit-learn"] == pytest.approx(
        report["runs"]["2"]["cases"]["hpcdist"]["predict_proba_rows_per_second"]
        / baseline["predict_proba_rows_per_second"])
    assert "\nSummary:" in output and "1 rank(s):" in output
    for word in ("PASS", "MISS", "target"):
        assert word not in output, word


def test_one_job_under_mpiexec_without_baseline(tmp_path):
    output = _run([mpiexec_path(), "-n", "2", sys.executable, "-m", "hpcdist.bench.forest",
                   "--quick", "--no-baseline", "--output-dir", str(tmp_path)], tmp_path)
    report = json.loads((tmp_path / "forest.json").read_text())
    assert list(report["runs"]) == ["2"]
    assert list(report["runs"]["2"]["cases"]) == ["hpcdist"]
    assert {entry["value"] for entry in report["summary"].values()} == {None}
    assert "not measured" in output
    assert "2 rank(s):" in output


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        main(["--trees", "0"])
    with pytest.raises(SystemExit):
        main(["--ranks", "0,2"])
