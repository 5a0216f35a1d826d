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
