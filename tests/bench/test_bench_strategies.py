"""Smoke test of the training strategies benchmark harness (not a speed test).

The benchmark script in a child process, launching one job at 1 rank and one at 2 ranks
(merged into one report), on a small data set with a low accuracy target.
"""
import json
import sys

import pytest

from hpcdist.bench.strategies import MODEL_RANKS, STRATEGIES, _compute_per_step, main
from tests.helpers import REPO_ROOT, run_ok

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def script_run(tmp_path_factory):
    """``benchmarks/bench_strategies.py --quick`` once, small: (report, output)."""
    tmp = tmp_path_factory.mktemp("bench_strategies")
    output = run_ok([sys.executable, str(REPO_ROOT / "benchmarks" / "bench_strategies.py"),
                     "--quick", "--ranks", "1,2", "--rows", "6000", "--eval-every", "20",
                     "--target", "0.6", "--torch-steps", "8", "--repetitions", "1",
                     "--output-dir", str(tmp / "results")], tmp, 400)
    return json.loads((tmp / "results" / "strategies.json").read_text()), output


def test_every_strategy_at_one_and_two_ranks(script_run):
    report, output = script_run
    assert report["benchmark"] == "strategies" and list(report["runs"]) == ["1", "2"]
    for key, run in report["runs"].items():
        assert run["ranks"] == int(key) == run["machine"]["ranks"]
        assert list(run["strategies"]) == list(STRATEGIES)
        for record in run["strategies"].values():
            assert 0.5 < record["final_accuracy"] <= 1 and record["reached"] is not None
            assert record["reached"]["steps"] <= record["steps"]
    two = report["runs"]["2"]["strategies"]
    assert two["local_sgd"]["bytes_sent"] < two["data_parallel"]["bytes_sent"] / 4
    assert "2 rank(s): strategy" in output and "projection from 2 rank(s)" in output


def test_projection_and_comparisons_in_the_summary(script_run):
    report, _ = script_run
    summary = report["summary"]
    assert summary["compute_seconds_per_step"] > 0
    for name in STRATEGIES:
        assert list(summary["projection"][name]) == [str(p) for p in MODEL_RANKS]
    assert set(summary["local_sgd"]) == {"accuracy_gap", "bytes_share_to_target"}
    if "torch_row" in report["runs"]["2"]:
        row = report["runs"]["2"]["torch_row"]
        assert set(row["steps_per_second"]) == {"hpcdist LocalSGD", "torch PostLocalSGD",
                                                "hpcdist LocalSGD, torch model"}
        assert summary["torch"]["ratio"] == pytest.approx(row["ratio"]["hpcdist/torch"])


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        main(["--target", "1.5"])
    with pytest.raises(SystemExit):
        main(["--rows", "0"])


def test_compute_per_step_leaves_out_overlapped_collectives():
    # DDP's communication thread counts collectives that overlap the computing: more time
    # in them than outside; such a value is left out, never a negative compute time
    records = {"data_parallel": {"seconds": 1.0, "communication_seconds": 1.2, "steps": 10},
               "local_sgd": {"seconds": 1.5, "communication_seconds": 0.5, "steps": 10}}
    assert _compute_per_step(records) == pytest.approx(0.1)
    records.pop("local_sgd")
    assert _compute_per_step(records) == pytest.approx(0.1)  # then the whole time per step
