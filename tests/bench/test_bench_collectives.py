"""The collective benchmark harness (not a speed test) and its summary.

The harness tests are serial: they run ``hpcdist.bench.collectives`` under
``mpiexec -n 2`` on two sizes in a child process, then check the JSON, the
table and the plot. The summary tests feed made-up records to
:func:`summarize`.
"""
import importlib.util
import json

import pytest

import hpcdist
from hpcdist.bench import collectives as collectives_bench
from hpcdist.bench.collectives import (
    CALLS,
    OPERATIONS,
    _row,
    _summary_text,
    summarize,
)
from tests.helpers import run_mpi_script

KIB, MIB = 1024, 1024 * 1024
SIZES = (8, MIB)  # one size in each band; pkl5 joins broadcast_none at 1 MiB
REPETITIONS = 2
PINGPONGS = {"pingpong", "pingpong_known"}

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
    rc, _, output = run_mpi_script(code, tmp, n=2, timeout=180)
    assert rc == 0, output
    return tmp / "results", output


def _report(out):
    return json.loads((out / "collectives.json").read_text())


@pytest.mark.slow
def test_json_has_every_operation_and_size(bench_run):
    out, _ = bench_run
    report = _report(out)
    assert report["machine"]["ranks"] == 2
    assert report["machine"]["scikit-learn"] and report["machine"]["h5py"]  # the versions
    assert set(report["operations"]) == set(OPERATIONS)
    assert set(report["summary"]) == set(OPERATIONS)
    for operation, entry in report["operations"].items():
        assert [r["size_bytes"] for r in entry["results"]] == list(SIZES), operation
        assert {"hpcdist", "mpi4py"} <= set(entry["implementations"]), operation
        for record in entry["results"]:
            where = f"{operation} at {record['size_bytes']} B"
            measured = set(record["median_us"])
            assert measured <= set(entry["implementations"]), where
            assert set(record["verified"]) == measured - {"gloo"}, where
            assert all(record["verified"].values()), where
            for name in measured:
                assert record["median_us"][name] > 0, where
                times = record["times_us"][name]
                assert len(times) == REPETITIONS and min(times) > 0, where
            baselines = measured - {"hpcdist"}
            assert set(record["ratio"]) == {f"hpcdist/{name}" for name in baselines}, where
            assert all(ratio > 0 for ratio in record["ratio"].values()), where


@pytest.mark.slow
def test_new_operations_and_their_baselines(bench_run):
    out, _ = bench_run
    operations = _report(out)["operations"]
    none = operations["broadcast_none"]
    assert none["implementations"] == ["hpcdist", "mpi4py", "pkl5"]
    assert "comm.bcast" in none["calls"]["mpi4py"] and "pkl5" in none["calls"]["pkl5"]
    # the pkl5 baseline runs from 1 MiB up only
    assert [set(r["median_us"]) for r in none["results"]] == [
        {"hpcdist", "mpi4py"}, {"hpcdist", "mpi4py", "pkl5"}]
    for name in PINGPONGS:
        assert operations[name]["implementations"] == ["hpcdist", "mpi4py", "floor"], name
        assert "comm.Send(x, 1); comm.Recv(buf, 1)" in operations[name]["calls"]["mpi4py"]
    assert "shape_known=True" in operations["pingpong_known"]["calls"]["hpcdist"]


@pytest.mark.slow
def test_floor_beside_every_mpi4py_baseline_it_bounds(bench_run):
    out, _ = bench_run
    report = _report(out)
    floored = {operation for operation, calls in CALLS.items() if "floor" in calls}
    assert floored == set(OPERATIONS) - {"broadcast_none"}
    for operation, entry in report["operations"].items():
        has_floor = "floor" in entry["implementations"]
        assert has_floor == (operation in floored), operation
        if has_floor:
            assert "_begin" in entry["calls"]["floor"], operation
    summarized = {(operation, entry["baseline"])
                  for operation, entries in report["summary"].items() for entry in entries}
    assert {(operation, "floor") for operation in floored} <= summarized


def test_floor_does_the_bookkeeping_of_each_call():
    ctx = hpcdist.init()
    ctx.reset_stats()
    calls = []
    for per_round in (1, 2):
        floor = collectives_bench._with_bookkeeping(ctx, lambda: calls.append(1) or "done",
                                                    per_round)
        assert floor() == "done"
    assert len(calls) == 2 and ctx.stats()["floor"]["calls"] == 3
    with pytest.raises(ValueError, match="calls=3"):
        collectives_bench._with_bookkeeping(ctx, lambda: None, 3)


@pytest.mark.slow
def test_overhead_per_call_beside_each_ratio(bench_run):
    out, _ = bench_run
    for operation, entry in _report(out)["operations"].items():
        calls = 2 if operation in PINGPONGS else 1  # a round trip is 2 calls on each rank
        for record in entry["results"]:
            median = record["median_us"]
            baselines = set(median) - {"hpcdist"}
            assert set(record["overhead_us"]) == baselines, operation
            for name in baselines:
                expected = (median["hpcdist"] - median[name]) / calls
                assert record["overhead_us"][name] == pytest.approx(expected), operation


@pytest.mark.slow
def test_summary_gives_figures_and_no_verdict(bench_run):
    out, output = bench_run
    report = _report(out)
    assert report["summary"] == json.loads(json.dumps(summarize(report["operations"])))
    assert "targets" not in report["settings"]
    entries = [entry for entries in report["summary"].values() for entry in entries]
    assert entries and all(set(entry) == {"baseline", "sizes", "measure", "worst",
                                          "at_size_bytes"} for entry in entries)
    assert report["command"].startswith("mpiexec -n 2 hpcdist bench collectives")
    for word in ("PASS", "MISS", "target", "!"):
        assert word not in output, word


@pytest.mark.slow
def test_gloo_column_when_torch_is_importable(bench_run):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    out, _ = bench_run
    with_gloo = {operation for operation, entry in _report(out)["operations"].items()
                 if "gloo" in entry["implementations"]}
    assert with_gloo == set(OPERATIONS) - {"allgather_uneven", "broadcast_none"} - PINGPONGS


@pytest.mark.slow
def test_plot_written_when_matplotlib_is_importable(bench_run):
    out, _ = bench_run
    png = out / "collectives.png"
    if importlib.util.find_spec("matplotlib") is None:
        assert not png.exists()
    else:
        assert png.stat().st_size > 0


@pytest.mark.slow
def test_table_and_summary_printed(bench_run):
    _, output = bench_run
    assert "Summary" in output
    assert "+us/call" in output
    for operation in OPERATIONS:
        assert f"\n{operation}:" in output, operation


# -- the summary of made-up records ----------------------------------------------------------

def _record(size, *, ratio=None, overhead=None, baseline="mpi4py"):
    """A benchmark record with one baseline's ratio and overhead per call."""
    return {"size_bytes": size,
            "ratio": {} if ratio is None else {f"hpcdist/{baseline}": ratio},
            "overhead_us": {} if overhead is None else {baseline: overhead}}


def _summarized(operation, records, baseline="mpi4py"):
    """The summary entries of ``operation`` against ``baseline``, by measure."""
    return {entry["measure"]: entry for entry in summarize({operation: {"results": records}})[
        operation] if entry["baseline"] == baseline}


def test_overhead_below_64_kib_and_ratio_from_64_kib():
    records = [_record(8, ratio=3.0, overhead=0.1), _record(KIB, ratio=1.5, overhead=0.5),
               _record(4 * KIB, ratio=1.1, overhead=0.3),
               _record(64 * KIB, ratio=1.02, overhead=40.0),
               _record(MIB, ratio=1.04, overhead=90.0)]
    entries = _summarized("allreduce", records)
    overhead, ratio = entries["overhead_us"], entries["ratio"]
    assert (overhead["worst"], overhead["at_size_bytes"], overhead["sizes"]) == (
        0.5, KIB, [0, 64 * KIB])  # the worst row below 64 KiB; 40 and 90 us are above it
    assert (ratio["worst"], ratio["at_size_bytes"], ratio["sizes"]) == (1.04, MIB, [64 * KIB, None])


def test_a_band_without_rows_is_left_out():
    entries = _summarized("broadcast", [_record(8, ratio=1.2, overhead=0.2)])
    assert set(entries) == {"overhead_us"}
    assert _summarized("broadcast_none", [_record(MIB, ratio=0.9, baseline="pkl5")], "pkl5")[
        "ratio"]["worst"] == 0.9
    assert summarize({"allgather": {"results": []}}) == {"allgather": []}


def test_table_row_has_figures_only():
    record = {"size_bytes": 8, "median_us": {"hpcdist": 2.5, "mpi4py": 2.0},
              "ratio": {"hpcdist/mpi4py": 1.25}, "overhead_us": {"mpi4py": 0.5},
              "verified": {"hpcdist": True, "mpi4py": True}}
    row = _row("allreduce", record, ["mpi4py"])
    assert "+0.50" in row and "1.250" in row and "!" not in row


def test_summary_text_lists_each_band_with_its_worst_row():
    operations = {"allreduce": {"results": [_record(8, overhead=0.9), _record(MIB, ratio=1.2)]}}
    text = _summary_text(summarize(operations), ranks=2)
    assert "Summary at 2 ranks" in text
    assert "allreduce          mpi4py  < 64 KiB    +us/call      +0.90 @ 8 B" in text
    assert "allreduce          mpi4py  >= 64 KiB   ratio         1.200 @ 1 MiB" in text
    for word in ("PASS", "MISS", "target", "!"):
        assert word not in text, word
