"""Smoke test of the pipeline benchmark harness (not a speed test): one quick run at 1
and 2 ranks, merged into one report."""
import json
import sys

import pytest

from hpcdist.bench.pipeline import MICRO_BATCHES, SCHEDULES
from tests.helpers import run_ok

pytestmark = pytest.mark.slow


def test_quick_run_reports_bubbles_and_stash_peaks(tmp_path):
    run_ok([sys.executable, "-m", "hpcdist.bench.pipeline", "--quick", "--ranks", "1,2",
            "--output-dir", str(tmp_path)], tmp_path)
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
        expected = [m, m] if row["schedule"] == "gpipe" else [min(2, m), 1]
        assert row["stashed_peak"] == expected
    assert report["summary"]["2"]["stash_ratio_1f1b_over_gpipe"]["16"] == 2 / 16
