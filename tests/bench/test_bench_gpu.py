"""The GPU benchmark harness: its usage error without CuPy, and a quick run on a GPU.

The quick run (marked ``gpu``) starts ``hpcdist.bench.gpu`` under ``mpiexec -n 2``
on the node's GPU and checks that every part wrote a complete report.
"""
import json
import subprocess
import sys

import pytest

from tests.helpers import run_mpi_script

try:
    import cupy
    _HAVE_GPU = cupy.cuda.runtime.getDeviceCount() > 0
except Exception:  # noqa: BLE001 - no CuPy, no driver or no device
    cupy = None
    _HAVE_GPU = False

_JOB = """
import sys
from hpcdist.bench.gpu import main
sys.exit(main(["--quick", "--repetitions", "1", "--output-dir", "{output_dir}"]))
"""


@pytest.mark.skipif(cupy is not None, reason="CuPy is installed")
def test_without_cupy_the_benchmark_says_what_to_install():
    result = subprocess.run([sys.executable, "-m", "hpcdist.bench.gpu", "--quick"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "CuPy is not installed: install hpcdist[gpu]" in result.stderr


def test_unknown_part_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "hpcdist.bench.gpu", "--parts", "allreduce,fft"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "unknown part(s) fft" in result.stderr


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_GPU, reason="needs CuPy and a CUDA GPU")
def test_quick_run_writes_every_part(tmp_path):
    rc, _, output = run_mpi_script(_JOB.format(output_dir=tmp_path), tmp_path, n=2, timeout=400)
    assert rc == 0, output
    allreduce = json.loads((tmp_path / "gpu_allreduce.json").read_text())
    assert allreduce["machine"]["ranks"] == 2 and allreduce["machine"]["gpu"]
    rows = allreduce["allreduce"]["rows"]
    assert [row["bytes"] for row in rows] == [8, 64, 512, 4096, 32768, 262144, 1048576]
    assert all(row["hpcdist_device_us"] > 0 and row["mpi4py_host_us"] > 0 for row in rows)
    kernels = json.loads((tmp_path / "gpu_compression.json").read_text())["compression"]
    names = {row["kernel"] for row in kernels["rows"]}
    assert {"topk", "qsgd_quantize", "sign_pack", "scale_add"} <= names
    kmeans = json.loads((tmp_path / "gpu_kmeans.json").read_text())["kmeans"]
    assert kmeans["device"]["n_iter"] == kmeans["host"]["n_iter"]
    assert kmeans["inertia_relative_difference"] < 1e-3
