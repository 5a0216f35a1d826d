"""Smoke test of the parameter-server modes benchmark (not a speed test): ``hpcdist bench
ps-modes -n 2 --quick``, one job at 1 rank and one at 2 ranks merged into one report, and
its comparison of the modes with sync."""
import json
import os
import sys

import pytest

from hpcdist.bench.ps_modes import MODES, SCENARIOS, compare_modes
from tests.helpers import run_ok

pytestmark = pytest.mark.slow

HPCDIST = os.path.join(os.path.dirname(sys.executable), "hpcdist")


def test_quick_run_reports_every_scenario_and_mode(tmp_path):
    run_ok([HPCDIST, "bench", "ps-modes", "-n", "2", "--quick", "--seconds", "0.5",
            "--output-dir", str(tmp_path)], tmp_path)
    report = json.loads((tmp_path / "ps-modes.json").read_text())
    assert report["benchmark"] == "ps-modes" and list(report["runs"]) == ["1", "2"]
    for ranks, run in report["runs"].items():
        rows = run["rows"]
        assert [(r["scenario"], r["mode"]) for r in rows] == [
            (s, m) for s in SCENARIOS for m in MODES]
        for row in rows:
            assert row["steps_per_second"] > 0 and 0 <= row["accuracy"] <= 1
            assert len(row["steps_per_rank"]) == int(ranks) and min(row["steps_per_rank"]) > 0
            if row["mode"] == "sync":  # every round waits for every worker; a rank past the
                # common deadline while another starts one more round lets that round go on
                # alone (CI once saw [71, 69] when each rank timed itself from the barrier)
                assert row["max_staleness"] == 0
                assert max(row["steps_per_rank"]) - min(row["steps_per_rank"]) <= 1
    assert set(report["summary"]) == {"1 ranks, constant", "1 ranks, intermittent",
                                      "2 ranks, constant", "2 ranks, intermittent"}
    assert all(set(s) == {"mode", "ratio_to_sync", "accuracy_points_below_sync"}
               for s in report["summary"].values())


def _rows(sync, fast, mode, scenario, accuracy_gap=0.0):
    return [{"scenario": scenario, "mode": "sync", "steps_per_second": sync, "accuracy": 0.9},
            {"scenario": scenario, "mode": mode, "steps_per_second": fast,
             "accuracy": 0.9 - accuracy_gap}]


@pytest.mark.parametrize("fast, gap", [(151, 0.0), (149, 0.02), (200, -0.05)])
def test_modes_compared_with_sync_at_every_rank_count(fast, gap):
    rows = _rows(100, fast, "async", "constant", gap) + _rows(100, 131, "bounded",
                                                              "intermittent")
    summary = compare_modes({4: {"rows": rows}, 2: {"rows": rows}})
    assert set(summary) == {f"{p} ranks, {s}" for p in (2, 4) for s in ("constant",
                                                                         "intermittent")}
    assert summary["4 ranks, constant"]["ratio_to_sync"] == pytest.approx(fast / 100)
    assert summary["4 ranks, constant"]["accuracy_points_below_sync"] == pytest.approx(100 * gap)
    assert summary["2 ranks, intermittent"] == {"mode": "bounded", "ratio_to_sync": 1.31,
                                                "accuracy_points_below_sync": 0.0}
