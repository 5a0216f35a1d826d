"""Smoke test of the RPC round-trip benchmark harness (not a speed test): ``hpcdist.bench.ps
--quick`` on two sizes at 2 ranks in a child process, and its judging of the #17 target."""
import json

import pytest

from hpcdist.bench.ps import FUTURES_UP_TO, TARGET_FROM, TARGET_RATIO, judge_target
from tests.helpers import run_mpi_script

SIZES = (8, TARGET_FROM)  # one size on each side of the target's band

_JOB = """
import sys
from hpcdist.bench.ps import main
sys.exit(main(["--quick", "--sizes", "{sizes}", "--repetitions", "1", "--batch-ms", "1",
               "--output-dir", "{output_dir}"]))
"""


@pytest.mark.slow
def test_quick_run_reports_every_size_and_the_target(tmp_path):
    code = _JOB.format(sizes=",".join(map(str, SIZES)), output_dir=tmp_path / "results")
    rc, _, output = run_mpi_script(code, tmp_path, n=2, timeout=180)
    assert rc == 0, output
    report = json.loads((tmp_path / "results" / "ps.json").read_text())
    assert report["benchmark"] == "ps" and report["machine"]["ranks"] == 2
    assert report["implementations"][:2] == ["rpc", "mpi4py"]
    records = report["rpc"]
    assert [r["size_bytes"] for r in records] == list(SIZES)
    for record in records:
        measured = set(record["median_us"])
        expected = set(report["implementations"])
        if record["size_bytes"] > FUTURES_UP_TO:
            expected -= {"futures"}
        assert measured == expected and all(record["verified"].values()), record
        assert set(record["ratio"]) == {f"rpc/{name}" for name in measured - {"rpc"}}
        assert all(value > 0 for value in record["median_us"].values())
    assert report["summary"] == judge_target(records)
    assert "Summary (#17)" in output and report["summary"]["status"] in output


def _records(ratios):
    return [{"size_bytes": size, "ratio": {"rpc/mpi4py": ratio}} for size, ratio in ratios]


def test_target_judged_on_the_worst_row_from_1_mib():
    judged = judge_target(_records([(8, 90.0), (TARGET_FROM, 2.0), (64 * TARGET_FROM, 2.9)]))
    assert (judged["status"], judged["worst"], judged["at_size_bytes"]) == (
        "PASS", 2.9, 64 * TARGET_FROM)
    assert judged["below"] == {"8": 90.0}  # reported as measured, not judged
    assert judge_target(_records([(TARGET_FROM, TARGET_RATIO + 0.01)]))["status"] == "MISS"
    assert judge_target(_records([(8, 1.0)]))["status"] == "n/a"
