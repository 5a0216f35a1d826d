"""The team's target checker, ``benchmarks/check_targets.py``, on made-up reports and on the
committed results (the targets live outside the package, which reports figures only)."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("check_targets",
                                              REPO / "benchmarks" / "check_targets.py")
check_targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_targets)

KIB = 1024
TOML = """
[[target]]
benchmark = "kmeans"
name = "speedup"
value = "summary.speedup.value"
at_least = 1.5

[[target]]
benchmark = "collectives"
name = "overhead below 64 KiB"
ranks = 2
rows = "operations.allreduce.results"
value = "overhead_us.mpi4py"
sizes = [0, 65536]
at_most = 0.4

[[target]]
benchmark = "collectives"
name = "faster than gloo"
rows = "operations.allreduce.results"
value = "ratio.hpcdist/gloo"
below = 1.0

[[target]]
benchmark = "compression"
name = "top-k speedup"
rows = "kernels"
value = "speedup"
where = { kernel = ["topk", "topk_threshold"] }
at_least = 5.0
"""


@pytest.fixture
def targets(tmp_path):
    path = tmp_path / "targets.toml"
    path.write_text(TOML)
    return check_targets.load_targets(path)


def _collectives(ranks, rows):
    return {"benchmark": "collectives", "command": f"mpiexec -n {ranks} hpcdist bench "
            "collectives", "machine": {"ranks": ranks},
            "operations": {"allreduce": {"results": [
                {"size_bytes": size, "overhead_us": {"mpi4py": overhead},
                 "ratio": {"hpcdist/gloo": gloo}} for size, overhead, gloo in rows]}}}


def _statuses(reports, targets, tmp_path):
    paths = []
    for number, report in enumerate(reports):
        paths.append(tmp_path / f"report{number}.json")
        paths[-1].write_text(json.dumps(report))
    return [(r["name"], r["status"], r["value"], r["where"])
            for r in check_targets.check(paths, targets)]


def test_a_figure_at_a_path_is_met_missed_or_not_measured(targets, tmp_path):
    reports = [{"benchmark": "kmeans", "summary": {"speedup": {"value": value}}}
               for value in (1.5, 1.49, None)] + [{"benchmark": "kmeans", "summary": {}}]
    assert _statuses(reports, targets, tmp_path) == [
        ("speedup", "met", 1.5, ""), ("speedup", "missed", 1.49, ""),
        ("speedup", "not measured", None, ""), ("speedup", "not measured", None, "")]


def test_rows_are_judged_on_the_worst_one_in_the_band(targets, tmp_path):
    report = _collectives(2, [(8, 0.1, 0.5), (KIB, 0.45, 0.9), (64 * KIB, 30.0, 0.99)])
    assert _statuses([report], targets, tmp_path) == [
        ("overhead below 64 KiB", "missed", 0.45, "1024 B"),  # 30 us is above the band
        ("faster than gloo", "met", 0.99, "65536 B")]
    report = _collectives(2, [(8, 0.4, 1.0)])
    assert _statuses([report], targets, tmp_path) == [  # "at most" includes, "below" does not
        ("overhead below 64 KiB", "met", 0.4, "8 B"), ("faster than gloo", "missed", 1.0, "8 B")]


def test_a_target_set_for_other_ranks_is_not_judged(targets, tmp_path):
    statuses = _statuses([_collectives(4, [(8, 9.0, 0.5)])], targets, tmp_path)
    assert statuses[0] == ("overhead below 64 KiB", "not judged", None, "set for 2 ranks")
    assert statuses[1][1] == "met"  # no ranks given: judged at any


def test_where_selects_rows_and_at_least_takes_the_smallest(targets, tmp_path):
    report = {"benchmark": "compression", "kernels": [
        {"kernel": "topk", "speedup": 7.0}, {"kernel": "topk_threshold", "speedup": 5.5},
        {"kernel": "scatter_add", "speedup": 0.5}]}
    assert _statuses([report], targets, tmp_path) == [
        ("top-k speedup", "met", 5.5, "topk_threshold")]


def test_a_target_without_one_bound_is_refused(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[[target]]\nbenchmark = "x"\nname = "y"\nvalue = "z"\n'
                    'at_least = 1\nat_most = 2\n')
    with pytest.raises(ValueError, match="one of at_least, at_most, below"):
        check_targets.load_targets(path)


def test_text_names_the_file_its_command_and_counts(targets, tmp_path):
    report = _collectives(2, [(8, 0.5, 0.5)])
    text = check_targets.report_text(check_targets.check(
        [_write(tmp_path, report)], targets))
    assert "(mpiexec -n 2 hpcdist bench collectives)" in text
    assert "missed" in text and text.rstrip().endswith("1 met, 1 missed")


def _write(tmp_path, report):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(report))
    return path


def test_every_target_of_the_team_is_judged_on_a_committed_result():
    targets = check_targets.load_targets(REPO / "benchmarks" / "targets.toml")
    paths = sorted((REPO / "benchmarks" / "results").glob("*.json"))
    results = check_targets.check(paths, targets)
    judged = {r["name"] for r in results if r["status"] in ("met", "missed")}
    assert {target["name"] for target in targets} - judged == set()


def test_command_line_exit_status(tmp_path):
    path = _write(tmp_path, {"benchmark": "kmeans", "summary": {"speedup": {"value": 1.0}}})
    toml = tmp_path / "targets.toml"
    toml.write_text(TOML)
    script = str(REPO / "benchmarks" / "check_targets.py")
    plain = subprocess.run([sys.executable, script, "--targets", str(toml), str(path)],
                           capture_output=True, text=True, timeout=60)
    assert plain.returncode == 0 and "missed" in plain.stdout
    strict = subprocess.run([sys.executable, script, "--targets", str(toml), "--fail-on-miss",
                             str(path)], capture_output=True, text=True, timeout=60)
    assert strict.returncode == 1
