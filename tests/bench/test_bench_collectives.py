"""The collective benchmark harness (not a speed test) and its judging of the targets.

The harness tests are serial: they run ``hpcdist.bench.collectives`` under
``mpiexec -n 2`` on two sizes in a child process, then check the JSON, the
table and the plot. The judging tests feed made-up records to
:func:`judge_targets`.
"""
import importlib.util
import json

import pytest

import hpcdist
from hpcdist.bench import collectives as collectives_bench
from hpcdist.bench.collectives import (
    OPERATIONS,
    TARGETS,
    _row,
    _summary_text,
    judge_targets,
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
    floored = {target.operation for target in TARGETS if target.baseline == "floor"}
    for operation, entry in report["operations"].items():
        has_floor = "floor" in entry["implementations"]
        assert has_floor == (operation in floored), operation
        if has_floor:
            assert "_begin" in entry["calls"]["floor"], operation
    judged = {(operation, judged["baseline"]) for operation, targets in report["summary"].items()
              for judged in targets if judged["status"] != "n/a"}
    assert {(operation, "floor") for operation in floored} <= judged


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
def test_summary_judges_every_target(bench_run):
    out, output = bench_run
    report = _report(out)
    assert report["summary"] == json.loads(json.dumps(judge_targets(report["operations"])))
    judged = [entry for entries in report["summary"].values() for entry in entries]
    assert len(judged) == len(TARGETS)
    assert len(report["settings"]["targets"]) == len(TARGETS)
    assert report["settings"]["targets_ranks"] == 2
    misses = sum(entry["status"] == "MISS" for entry in judged)
    last = output.rstrip().splitlines()
    ending = "All targets met." if not misses else f"{misses} target(s) missed"
    assert any(line.startswith(ending) for line in last[-4:]), output


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


# -- judging the targets on made-up records -------------------------------------------------

def _record(size, *, ratio=None, overhead=None, baseline="mpi4py"):
    """A benchmark record with one baseline's ratio and overhead per call."""
    return {"size_bytes": size,
            "ratio": {} if ratio is None else {f"hpcdist/{baseline}": ratio},
            "overhead_us": {} if overhead is None else {baseline: overhead}}


def _judged(operation, records, baseline="mpi4py", measure=None):
    """The judgement of the one target of ``operation`` on ``baseline`` (and ``measure``)."""
    entries = [entry for entry in judge_targets({operation: {"results": records}})[operation]
               if entry["baseline"] == baseline and measure in (None, entry["measure"])]
    assert len(entries) == 1, entries
    return entries[0]


@pytest.mark.parametrize("operation, limit", [
    ("allreduce", 0.4), ("allreduce_out", 0.4), ("broadcast_known", 0.4), ("allgather", 0.4),
    ("pingpong_known", 0.4), ("broadcast", 1.0), ("allgather_uneven", 1.0), ("pingpong", 2.0),
])
@pytest.mark.parametrize("size", [8, 64 * KIB - 4])
def test_overhead_target_below_64_kib(operation, limit, size):
    judged = _judged(operation, [_record(size, overhead=limit - 0.01)], measure="overhead_us")
    assert (judged["status"], judged["at_size_bytes"]) == ("PASS", size)
    assert _judged(operation, [_record(size, overhead=limit)],
                   measure="overhead_us")["status"] == "PASS"  # "at most"
    assert _judged(operation, [_record(size, overhead=limit + 0.01)],
                   measure="overhead_us")["status"] == "MISS"
    # the ratio target starts at 64 KiB: a small message's ratio is not judged
    assert _judged(operation, [_record(size, ratio=9.0)], measure="ratio")["status"] == "n/a"


@pytest.mark.parametrize("operation, limit", [
    ("allreduce", 1.05), ("allreduce_out", 1.05), ("broadcast", 1.05),
    ("broadcast_known", 1.05), ("allgather", 1.05), ("allgather_uneven", 1.05),
    ("pingpong_known", 1.05), ("pingpong", 1.10),
])
@pytest.mark.parametrize("size", [64 * KIB, 64 * MIB])
def test_ratio_target_from_64_kib(operation, limit, size):
    assert _judged(operation, [_record(size, ratio=limit - 0.001)],
                   measure="ratio")["status"] == "PASS"
    assert _judged(operation, [_record(size, ratio=limit + 0.001)],
                   measure="ratio")["status"] == "MISS"
    # from 64 KiB up the overhead per call is not judged (it grows with the message)
    assert _judged(operation, [_record(size, overhead=500.0)],
                   measure="overhead_us")["status"] == "n/a"


@pytest.mark.parametrize("size", [8, 64 * KIB, 64 * MIB])
def test_broadcast_none_against_comm_bcast_at_every_size(size):
    assert _judged("broadcast_none", [_record(size, ratio=0.99)])["status"] == "PASS"
    assert _judged("broadcast_none", [_record(size, ratio=1.0)])["status"] == "PASS"
    assert _judged("broadcast_none", [_record(size, ratio=1.01)])["status"] == "MISS"


def test_broadcast_none_against_pkl5_from_1_mib():
    def judged(size, ratio):
        return _judged("broadcast_none", [_record(size, ratio=ratio, baseline="pkl5")],
                       baseline="pkl5")["status"]

    assert judged(MIB, 1.04) == "PASS"
    assert judged(MIB, 1.06) == "MISS"
    assert judged(64 * MIB, 1.06) == "MISS"
    assert judged(MIB - 4, 2.0) == "n/a"  # below 1 MiB pkl5 is not a baseline


@pytest.mark.parametrize("operation", ["allreduce", "allreduce_out", "broadcast",
                                       "broadcast_known", "allgather"])
def test_gloo_target_is_strictly_below_one(operation):
    def judged(ratio):
        return _judged(operation, [_record(8, ratio=ratio, baseline="gloo")],
                       baseline="gloo")["status"]

    assert judged(0.99) == "PASS"
    assert judged(1.0) == "MISS"


def test_every_target_is_judged_on_the_worst_row_of_its_band():
    records = [_record(8, overhead=0.1), _record(KIB, overhead=0.5), _record(4 * KIB,
                                                                             overhead=0.3)]
    judged = _judged("allreduce", records, measure="overhead_us")
    assert (judged["worst"], judged["at_size_bytes"], judged["status"]) == (0.5, KIB, "MISS")
    assert judged["limit"] == 0.4 and list(judged["sizes"]) == [0, 64 * KIB]


def test_every_operation_has_targets_and_no_target_is_orphaned():
    assert {target.operation for target in TARGETS} == set(OPERATIONS)
    for operation in OPERATIONS:
        assert judge_targets({operation: {"results": []}})[operation], operation
        assert all(entry["status"] == "n/a"
                   for entry in judge_targets({operation: {"results": []}})[operation])


def test_table_row_marks_the_missed_measure():
    record = {"size_bytes": 8, "median_us": {"hpcdist": 2.5, "mpi4py": 2.0},
              "ratio": {"hpcdist/mpi4py": 1.25}, "overhead_us": {"mpi4py": 0.5},
              "verified": {"hpcdist": True, "mpi4py": True}}
    row = _row("allreduce", record, ["mpi4py"])
    assert "+0.50!" in row and "1.250 " in row  # below 64 KiB the overhead is judged
    assert "!" not in _row("broadcast", record, ["mpi4py"])  # 0.5 us <= 1.0 us
    record = dict(record, size_bytes=MIB)
    row = _row("allreduce", record, ["mpi4py"])
    assert "1.250!" in row and "+0.50 " in row  # from 64 KiB up the ratio is


def test_summary_text_lists_the_targets_and_ends_with_the_verdict():
    passing = {"allreduce": {"results": [_record(8, overhead=0.1),
                                         _record(MIB, ratio=1.01)]}}
    text = _summary_text(judge_targets(passing), ranks=2)
    assert text.rstrip().endswith("All targets met.")
    assert "<= 0.4" in text and "<= 1.05" in text and "allreduce vs gloo" in text
    missing = {"allreduce": {"results": [_record(8, overhead=0.9), _record(MIB, ratio=1.2)]}}
    assert _summary_text(judge_targets(missing), ranks=2).rstrip().endswith(
        "2 target(s) missed ('!' marks the rows above).")
