"""Every benchmark takes the same common options (``--quick``, ``--no-plot``,
``--output-dir``, ``--name``), as ``hpcdist bench NAME`` passes them on."""
import importlib
import pathlib

import numpy as np
import pytest

from hpcdist.bench import common
from hpcdist.cli.main import BENCHMARKS

COMMON = ["--quick", "--no-plot", "--output-dir", "elsewhere", "--name", "trial"]


def _parse(module, argv):
    """The benchmark's parsed arguments (its own post-parse checks included)."""
    parse = getattr(module, "_parse_args", None)
    return parse(argv) if parse is not None else module._build_parser().parse_args(argv)


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_every_benchmark_takes_the_common_options(name):
    args = _parse(importlib.import_module(BENCHMARKS[name]), COMMON)
    assert args.quick and args.no_plot
    assert str(args.output_dir) == "elsewhere" and args.name == "trial"


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_the_defaults_name_the_outputs_after_the_benchmark(name):
    args = _parse(importlib.import_module(BENCHMARKS[name]), [])
    assert not args.quick and not args.no_plot
    assert args.name == name and str(args.output_dir) == "benchmarks/results"


def test_cpu_model_names_the_processor():
    # the JSON reports say which CPU measured them: runs on different machines differ
    proc = pathlib.Path("/proc/cpuinfo")
    if not proc.exists():
        assert common.cpu_model() is None
        return
    names = [line.split(":", 1)[1].strip() for line in proc.read_text().splitlines()
             if line.startswith("model name")]
    assert common.cpu_model() == (names[0] if names else None)


def test_resident_peak_sees_memory_touched_inside_the_block():
    with common.resident_peak() as idle:
        pass
    with common.resident_peak() as busy:
        block = np.ones(64 * common.MIB // 8)
        del block
    if busy["peak_mib"] is None:
        pytest.skip("no /proc/self/clear_refs on this system")
    assert busy["added_mib"] >= 60 and busy["peak_mib"] >= busy["added_mib"]
    assert idle["added_mib"] < 16


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
@pytest.mark.parametrize("argv, message", [
    (["--output-dir", "a_file"], "a_file is a file, not a directory"),
    (["--output-dir", "a_file/results"], "a_file is a file, not a directory"),
    (["--name", "sub/trial"], "'sub/trial' should be a plain file name stem"),
    (["--name", ""], "'' should be a plain file name stem"),
], ids=["dir-is-file", "dir-under-file", "name-with-dir", "name-empty"])
def test_an_unusable_report_path_is_refused_before_measuring(name, argv, message, tmp_path,
                                                             monkeypatch, capsys):
    # the report is written after the whole run: a bad path must not cost the results
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit) as exit_info:
        _parse(importlib.import_module(BENCHMARKS[name]), argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_missing_output_dir_is_accepted_and_left_for_the_report(tmp_path):
    args = _parse(importlib.import_module(BENCHMARKS["kmeans"]),
                  ["--output-dir", str(tmp_path / "new" / "results")])
    assert args.output_dir == tmp_path / "new" / "results" and not (tmp_path / "new").exists()


@pytest.mark.parametrize("name", ["collectives", "ps"])
@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5", "abc"])
def test_batch_ms_must_be_a_finite_positive_number(name, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _parse(importlib.import_module(BENCHMARKS[name]), ["--batch-ms", value])
    assert exit_info.value.code == 2
    message = f"argument --batch-ms: '{value}' should be a finite number > 0"
    assert message in capsys.readouterr().err
