"""Smoke test of the RPC round-trip benchmark harness (not a speed test): ``hpcdist.bench.ps
--quick`` on two sizes at 2 ranks in a child process, and its summary."""
import json

import pytest

from hpcdist.bench.ps import FUTURES_UP_TO, LARGE_FROM, summarize
from tests.helpers import run_mpi_script

SIZES = (8, LARGE_FROM)  # one size on each side of the summary's band

_JOB = """
import sys
from hpcdist.bench.ps import main
sys.exit(main(["--quick", "--sizes", "{sizes}", "--repetitions", "1", "--batch-ms", "1",
               "--output-dir", "{output_dir}"]))
"""


@pytest.mark.slow
def test_quick_run_reports_every_size_and_the_ratios(tmp_path):
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
    assert report["summary"] == summarize(records)
    assert "\nSummary: rpc round trip / mpi4py ping-pong from 1 MiB up: worst" in output
    assert report["command"].startswith("mpiexec -n 2 hpcdist bench ps --quick --sizes ")
    for word in ("PASS", "MISS", "target"):
        assert word not in output, word


def _records(ratios):
    return [{"size_bytes": size, "ratio": {"rpc/mpi4py": ratio}} for size, ratio in ratios]


def test_summary_takes_the_worst_row_from_1_mib():
    summary = summarize(_records([(8, 90.0), (LARGE_FROM, 2.0), (64 * LARGE_FROM, 2.9)]))
    assert (summary["worst"], summary["at_size_bytes"]) == (2.9, 64 * LARGE_FROM)
    assert summary["below"] == {"8": 90.0}  # each smaller size as measured
    assert summarize(_records([(8, 1.0)]))["worst"] is None
    assert "status" not in summary
