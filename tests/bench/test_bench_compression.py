"""Smoke test of the compression benchmark harness (not a speed test).

Runs ``hpcdist.bench.compression`` under ``mpiexec -n 2`` on a small array in
a child process and checks that the report covers every kernel, every
compressor and the cost model (``--no-plot`` accepted, as by every benchmark).
"""
import json

import pytest

from tests.helpers import run_mpi_script

pytestmark = pytest.mark.slow

_JOB = """
import sys
from hpcdist.bench.compression import main
sys.exit(main(["--elements", "8192", "--repetitions", "1", "--no-plot",
               "--output-dir", "{output_dir}"]))
"""


def test_compression_benchmark_writes_a_complete_report(tmp_path):
    code = _JOB.format(output_dir=tmp_path / "results")
    rc, _, output = run_mpi_script(code, tmp_path, n=2, timeout=240)
    assert rc == 0, output
    report = json.loads((tmp_path / "results" / "compression.json").read_text())
    assert report["machine"]["ranks"] == 2
    assert report["kernels"]["memcpy_gb_s"] > 0
    kernels = {row["kernel"] for row in report["kernels"]["kernels"]}
    assert {"topk", "qsgd_quantize", "int8_quantize", "sign_pack", "scatter_add"} <= kernels
    assert all(row["hpcdist_ms"] > 0 and row["numpy_ms"] > 0
               for row in report["kernels"]["kernels"])
    compressors = {row["compressor"]: row for row in report["compressors"]}
    assert set(compressors) == set(report["model"])
    assert compressors["none"]["wire_bytes"] == 8192 * 4
    assert compressors["topk"]["wire_bytes"] < compressors["none"]["wire_bytes"]
    assert compressors["sign+ef"]["wire_bytes"] == 8192 // 8 + 4 * (8192 // 1024)
    assert "break-even" in output
