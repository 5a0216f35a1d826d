"""Smoke test of the collective benchmark harness (not a speed test).

A serial test: it runs ``hpcdist.bench.collectives`` under ``mpiexec -n 2``
on two tiny sizes in a child process, then checks the JSON and the plot.
"""
import importlib.util
import json

import pytest

from hpcdist.bench.collectives import OPERATIONS
from tests.helpers import run_mpi_script

pytestmark = pytest.mark.slow

SIZES = (8, 1024)
REPETITIONS = 2

_JOB = """
import sys
from hpcdist.bench.collectives import main
sys.exit(main(["--quick", "--sizes", "{sizes}", "--repetitions", "{repetitions}",
               "--output-dir", "{output_dir}"]))
"""


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """Run the benchmark once at 2 ranks; returns (output directory, output text)."""
    tmp = tmp_path_factory.mktemp("bench_collectives")
    code = _JOB.format(sizes=",".join(map(str, SIZES)), repetitions=REPETITIONS,
                       output_dir=tmp / "results")
    rc, _, output = run_mpi_script(code, tmp, n=2, timeout=120)
    assert rc == 0, output
    return tmp / "results", output


def _report(out):
    return json.loads((out / "collectives.json").read_text())


def test_json_has_every_operation_and_size(bench_run):
    out, _ = bench_run
    report = _report(out)
    assert report["machine"]["ranks"] == 2
    assert set(report["operations"]) == set(OPERATIONS)
    assert set(report["summary"]) == set(OPERATIONS)
    for operation, entry in report["operations"].items():
        assert [r["size_bytes"] for r in entry["results"]] == list(SIZES), operation
        assert {"hpcdist", "mpi4py"} <= set(entry["implementations"]), operation
        baselines = {f"hpcdist/{name}" for name in entry["implementations"] if name != "hpcdist"}
        for record in entry["results"]:
            where = f"{operation} at {record['size_bytes']} B"
            assert all(record["verified"].values()), where
            for name in entry["implementations"]:
                assert record["median_us"][name] > 0, where
                times = record["times_us"][name]
                assert len(times) == REPETITIONS and min(times) > 0, where
            assert set(record["ratio"]) == baselines, where
            assert all(ratio > 0 for ratio in record["ratio"].values()), where


def test_gloo_column_when_torch_is_importable(bench_run):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    out, _ = bench_run
    with_gloo = {operation for operation, entry in _report(out)["operations"].items()
                 if "gloo" in entry["implementations"]}
    assert with_gloo == set(OPERATIONS) - {"allgather_uneven"}


def test_plot_written_when_matplotlib_is_importable(bench_run):
    out, _ = bench_run
    png = out / "collectives.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert not png.exists()
    else:
        assert png.stat().st_size > 0


def test_table_and_summary_printed(bench_run):
    _, output = bench_run
    assert "Summary" in output
    for operation in OPERATIONS:
        assert f"\n{operation}:" in output, operation
