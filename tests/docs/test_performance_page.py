"""The performance pages are generated from the committed benchmark reports."""

import json
import sys

import pytest

from tests.docs.examples import DOCS, REPO_ROOT

sys.path.insert(0, str(DOCS / "_ext"))
import hpcdist_performance as perf  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    out = tmp_path_factory.mktemp("performance")
    names = perf.write_pages(str(RESULTS), str(out))
    return out, names


def test_one_page_per_report(pages):
    out, names = pages
    assert names == sorted(p.stem for p in RESULTS.glob("*.json"))
    index = (out / "index.rst").read_text()
    for name in names:
        assert (out / f"{name}.rst").exists()
        assert f"   {name}" in index


@pytest.mark.parametrize("report", sorted(p.stem for p in RESULTS.glob("*.json")))
def test_page_has_date_machine_versions_command(pages, report):
    out, _ = pages
    data = json.loads((RESULTS / f"{report}.json").read_text())
    text = (out / f"{report}.rst").read_text()
    machine = data["machine"]
    assert machine["date"] in text if "date" in machine else True
    assert "Versions" in text
    assert "$ " + perf.command_of(report, data) in text
    if (RESULTS / f"{report}.png").exists():
        image = next(line for line in text.splitlines() if line.startswith(".. image:: "))
        assert (out / image.split(":: ", 1)[1]).resolve() == (RESULTS / f"{report}.png").resolve()
    assert "PASS" not in text and "MISS" not in text


def test_command_falls_back_to_hpcdist_bench():
    report = {"benchmark": "kmeans", "machine": {"ranks": 4}}
    assert perf.command_of("kmeans", report) == "hpcdist bench kmeans -n 4"
    assert perf.command_of("x", {"command": "hpcdist bench x -n 2 --quick"}) == \
        "hpcdist bench x -n 2 --quick"


def test_summary_tables_drop_bookkeeping():
    text = perf.page_for("demo", {
        "benchmark": "demo", "machine": {"date": "2026-01-01", "numpy": "2.0"},
        "summary": {"speed": {"ratio": "a/b", "value": 1.5, "status": "PASS", "target": ">1"},
                    "ops": [{"operation": "allreduce", "worst": 1.25, "status": "MISS"}]}},
        str(RESULTS), "/tmp/out")
    assert "1.5" in text and "1.25" in text and "allreduce" in text
    assert "PASS" not in text and "MISS" not in text and "target" not in text


def test_bad_report_names_the_file(tmp_path):
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken.json"):
        perf.write_pages(str(tmp_path), str(tmp_path / "out"))


def test_index_says_what_each_benchmark_measures(tmp_path):
    descriptions = perf.benchmark_descriptions()
    assert "mlp" in descriptions and not descriptions["mlp"].startswith("``")
    perf.write_pages(str(RESULTS), str(tmp_path), descriptions)
    index = (tmp_path / "index.rst").read_text()
    for report in RESULTS.glob("*.json"):
        assert f":ref:`{report.stem} <performance-{report.stem}>`" in index
    assert descriptions["kmeans"].split()[0] in index
