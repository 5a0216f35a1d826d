"""Smoke test of the pipeline benchmark harness (not a speed test): ``hpcdist bench
pipeline -n 2 --quick``, one job at 1 rank and one at 2 ranks merged into one report."""
import json
import os
import sys

import pytest

from hpcdist.bench.pipeline import MICRO_BATCHES, SCHEDULES
from tests.helpers import run_ok

pytestmark = pytest.mark.slow

HPCDIST = os.path.join(os.path.dirname(sys.executable), "hpcdist")


def test_quick_run_reports_bubbles_and_stash_peaks(tmp_path):
    run_ok([HPCDIST, "bench", "pipeline", "-n", "2", "--quick", "--output-dir", str(tmp_path)],
           tmp_path)
    report = json.loads((tmp_path / "pipeline.json").read_text())
    assert report["benchmark"] == "pipeline" and list(report["runs"]) == ["1", "2"]
    assert report["runs"]["1"]["one_rank_samples_per_second"] > 0
    rows = report["runs"]["2"]["pipeline"]
    assert [(r["schedule"], r["micro_batches"]) for r in rows] == [
        (s, m) for s in SCHEDULES for m in MICRO_BATCHES]
    for row in rows:
        m = row["micro_batches"]
        assert row["samples_per_second"] > 0 and 0 <= row["bubble_measured"] < 1
        assert row["bubble_ideal"] == pytest.approx(1 / (m + 1))
        assert 0 <= row["bubble_alone"] < 1 and 0 <= row["bubble_replayed"] < 1
        assert len(row["forward_seconds_alone"]) == 2 and min(row["backward_seconds_alone"]) > 0
        expected = [m, m] if row["schedule"] == "gpipe" else [min(2, m), 1]
        assert row["stashed_peak"] == expected
    summary = report["summary"]["2"]
    assert summary["stash_ratio_1f1b_over_gpipe"]["16"] == 2 / 16
    assert 0 <= summary["largest_gap_alone"] < 1
