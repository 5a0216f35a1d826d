"""``hpcdist info`` and the command line, run as a user would: real processes."""

import json
import os
import subprocess
import sys

from tests.helpers import subprocess_env
from tests.resilient.ulfm import VENV, needs_ulfm

BIN = os.path.dirname(sys.executable)
HPCDIST = os.path.join(BIN, "hpcdist")
MPIEXEC = os.path.join(BIN, "mpiexec")


def _run(command, timeout=120):
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env())


def test_info_reports_versions_and_mpi_library():
    completed = _run([HPCDIST, "info"])
    assert completed.returncode == 0, completed.stderr
    for label in ("hpcdist", "numpy", "mpi4py", "mpi_library", "cuda_aware_mpi",
                  "numba threading_layer", "h5py parallel", "cupy"):
        assert label in completed.stdout


@needs_ulfm
def test_info_names_open_mpi_without_its_nul_byte():
    # Open MPI ends its library version text with a NUL byte, which went into the report
    completed = _run([str(VENV / "bin" / "hpcdist"), "info"])
    assert completed.returncode == 0, completed.stderr
    line = next(line for line in completed.stdout.splitlines() if line.startswith("mpi_library"))
    assert line.split(None, 1)[1].startswith("Open MPI v5") and "\x00" not in line, repr(line)


def test_info_json_under_mpiexec_lists_every_rank():
    completed = _run([MPIEXEC, "-n", "2", HPCDIST, "info", "--json"])
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    assert report["info"]["world_size"] == 2
    assert [row["rank"] for row in report["layout"]] == [0, 1]
    assert {row["local_rank"] for row in report["layout"]} == {0, 1}
    assert report["info"]["mpi_thread_level"] == "multiple"


def test_help_documents_every_command():
    completed = _run([HPCDIST, "--help"])
    assert completed.returncode == 0
    assert "info" in completed.stdout and "bench" in completed.stdout
    completed = _run([HPCDIST, "bench", "--help"])
    assert "collectives" in completed.stdout


def test_a_benchmarks_help_starts_no_mpi_job():
    for name in ("collectives", "compression", "ps", "mlp"):
        completed = _run([HPCDIST, "bench", name, "--help"])
        assert completed.returncode == 0, completed.stderr
        assert "usage:" in completed.stdout and "mpiexec" not in completed.stdout.split("\n")[0]
        assert "+ " not in completed.stdout, completed.stdout  # the line of a started job


def test_unknown_benchmark_is_a_clear_error():
    completed = _run([HPCDIST, "bench", "nosuchbench"])
    assert completed.returncode == 2
    assert "invalid choice: 'nosuchbench'" in completed.stderr


def test_import_does_not_initialise_mpi():
    code = "import sys, hpcdist; print('mpi4py.MPI' in sys.modules)"
    completed = _run([sys.executable, "-c", code])
    assert completed.stdout.strip() == "False"


def test_bench_starts_itself_under_mpiexec(tmp_path):
    """``hpcdist bench NAME -n 2`` outside mpiexec launches two ranks and writes results."""
    completed = _run([HPCDIST, "bench", "collectives", "-n", "2", "--quick", "--sizes", "8",
                      "--repetitions", "1", "--operations", "allreduce", "--no-gloo",
                      "--no-plot", "--output-dir", str(tmp_path)], timeout=300)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads((tmp_path / "collectives.json").read_text())
    assert report["machine"]["ranks"] == 2
    assert list(report["operations"]) == ["allreduce"]
