"""Test helpers that keep all MPI ranks in step.

Any assertion whose outcome may differ between ranks goes through
:func:`assert_on_all_ranks` (or the :func:`all_ranks` block, or
:func:`expect_error`): the outcome is agreed on with raw mpi4py on
``MPI.COMM_WORLD`` and the failure is raised on *every* rank, with the
messages of all failing ranks, so that one failing rank never leaves the
others waiting in the next test's collective.
"""
import functools
import os
import re
import sys
import traceback
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

from hpcdist.launch.environment import LAUNCHER_PREFIXES
from tests.reference import BFLOAT16, is_complex, is_float, tolerance

__all__ = [
    "world_rank", "world_size", "assert_on_all_ranks", "all_ranks",
    "expect_error", "check_array", "check_scalar", "same_on_all_ranks",
    "REPO_ROOT", "mpiexec_path", "subprocess_env", "run_mpi_script", "mpi_twin", "run_ok",
]

REPO_ROOT = Path(__file__).resolve().parents[1]


def mpi_twin(test):
    """The same test marked ``mpi``: the original runs serially (one rank), the
    twin under ``mpiexec -n N``. Use as ``test_x_mpi = mpi_twin(test_x)``."""
    import pytest

    @functools.wraps(test)
    def twin(*args, **kwargs):
        return test(*args, **kwargs)

    return pytest.mark.mpi(min_size=2)(twin)


def world_rank():
    return MPI.COMM_WORLD.Get_rank()


def world_size():
    return MPI.COMM_WORLD.Get_size()


def assert_on_all_ranks(ok, message=""):
    """Raise AssertionError on every rank if ``ok`` is false on any rank."""
    comm = MPI.COMM_WORLD
    ok = bool(ok)
    if comm.Get_size() == 1:
        if not ok:
            raise AssertionError(f"rank 0: {message}")
        return
    # cheap flag first, messages only on failure (a buffer allreduce: mpi4py's object
    # allreduce keeps the GIL while it waits, stopping the rank's other threads)
    all_ok = np.array([ok], dtype=np.int8)
    comm.Allreduce(MPI.IN_PLACE, all_ok, op=MPI.MIN)
    if all_ok[0]:
        return
    msgs = comm.allgather(None if ok else str(message))
    failed = [(r, m) for r, m in enumerate(msgs) if m is not None]
    text = "\n".join(f"  rank {r}: {m}" for r, m in failed)
    raise AssertionError(
        f"failed on rank(s) {[r for r, _ in failed]} of {comm.Get_size()}:\n{text}")


@contextmanager
def all_ranks(what=""):
    """Run local assertions in the block; agree on the outcome afterwards.

    Put only local checks in the block, never collectives: a rank that fails
    early would skip the collective the others are waiting in.
    """
    message = None
    try:
        yield
    # pytest.raises' "DID NOT RAISE" and pytest.fail are no Exception: left out, they
    # would leave the other ranks waiting in the agreement below
    except (Exception, pytest.fail.Exception) as exc:  # noqa: BLE001 - re-raised on every rank
        tb = traceback.format_exception_only(type(exc), exc)
        message = (what + ": " if what else "") + "".join(tb).strip()
    assert_on_all_ranks(message is None, message)


def expect_error(exc_type, fn, *args, match=None, **kwargs):
    """Call ``fn`` on every rank and require ``exc_type`` on *every* rank.

    ``match`` is a regular expression searched in ``str(exc)`` (or a list of
    them, all required). Returns the exception (the same on every rank that
    raised it).
    """
    message = None
    caught = None
    name = (exc_type.__name__ if isinstance(exc_type, type)
            else " or ".join(t.__name__ for t in exc_type))
    try:
        result = fn(*args, **kwargs)
    except exc_type as exc:
        caught = exc
        patterns = [] if match is None else ([match] if isinstance(match, str) else list(match))
        for pat in patterns:
            if not re.search(pat, str(exc), flags=re.IGNORECASE | re.DOTALL):
                message = (f"{type(exc).__name__} raised but message {str(exc)!r} "
                           f"does not match {pat!r}")
                break
    except Exception as exc:  # noqa: BLE001
        message = (f"expected {name}, got {type(exc).__name__}: {exc}")
    else:
        message = f"expected {name}, nothing raised (returned {_short(result)})"
    assert_on_all_ranks(message is None, message)
    return caught


def _short(value):
    text = repr(value)
    return text if len(text) < 200 else text[:200] + "..."


def same_on_all_ranks(value):
    """True on every rank when ``value`` (picklable) is equal on all ranks."""
    values = MPI.COMM_WORLD.allgather(value)
    return all(v == values[0] for v in values)


def _as_float64(a):
    a = np.asarray(a)
    if a.dtype == BFLOAT16 or a.dtype == np.float16:
        return a.astype(np.float64)
    return a


def check_array(actual, expected, *, dtype=None, rtol=None, atol=None, what="result"):
    """Local check: ``actual`` is an ndarray equal to ``expected``.

    Exact for bool/int dtypes, allclose with dtype-dependent tolerances for
    floating and complex dtypes. Checks type, dtype and shape too.
    """
    expected = np.asarray(expected)
    dt = np.dtype(dtype) if dtype is not None else expected.dtype
    if not isinstance(actual, np.ndarray):
        raise AssertionError(f"{what}: expected numpy.ndarray, got {type(actual).__name__}: "
                             f"{_short(actual)}")
    if actual.dtype != dt:
        raise AssertionError(f"{what}: dtype {actual.dtype} != expected {dt}")
    if actual.shape != expected.shape:
        raise AssertionError(f"{what}: shape {actual.shape} != expected {expected.shape}")
    if is_float(dt) or is_complex(dt):
        r, a = tolerance(dt)
        r = r if rtol is None else rtol
        a = a if atol is None else atol
        np.testing.assert_allclose(_as_float64(actual), _as_float64(expected),
                                   rtol=r, atol=a, err_msg=what)
    else:
        np.testing.assert_array_equal(actual, expected.astype(dt, copy=False), err_msg=what)


def check_scalar(actual, expected, kind, *, what="result"):
    """``actual`` has exactly type ``kind`` and equals ``expected``."""
    if type(actual) is not kind:
        raise AssertionError(f"{what}: expected type {kind.__name__}, got "
                             f"{type(actual).__name__} ({_short(actual)})")
    if kind in (float, complex) or (isinstance(kind, type) and issubclass(kind, np.inexact)):
        if not np.allclose(complex(actual), complex(expected), rtol=1e-6, atol=1e-6):
            raise AssertionError(f"{what}: {actual!r} != {expected!r}")
    elif actual != expected:
        raise AssertionError(f"{what}: {actual!r} != {expected!r}")


def mpiexec_path():
    """The mpiexec that belongs to the running interpreter's environment
    (``.venv/bin/mpiexec`` from the mpich wheel, or the link to the system
    one in ``.venv-system``); the one on PATH only when there is none."""
    import shutil

    path = Path(sys.executable).parent / "mpiexec"
    if path.exists():
        return str(path)
    return shutil.which("mpiexec") or str(path)


# Variables a launcher or an MPI singleton sets for *this* process; a child
# job must get its own. (OMPI_ALLOW_RUN_AS_ROOT* and OMPI_MCA_* chosen by the
# user or scripts/test are kept.)
_LAUNCHER_PREFIXES = LAUNCHER_PREFIXES + ("HPCDIST_",)


def subprocess_env(**extra):
    """Environment for a child ``mpiexec`` job: the environment from before
    MPI started here, clean of launcher variables, with the repository on
    PYTHONPATH, plus ``extra``."""
    try:
        from tests._env import ORIGINAL as base
    except ImportError:  # pragma: no cover - conftest always imports it
        base = os.environ
    env = {k: v for k, v in base.items() if not k.startswith(_LAUNCHER_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    env.setdefault("MKL_NUM_THREADS", "1")
    env.setdefault("NUMBA_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_mpi_script(code, tmp_path, *, n=2, timeout=90, name="job.py", **env):
    """Run ``code`` as a script under ``mpiexec -n n`` in a child process.

    Returns ``(returncode, elapsed_seconds, output)`` where output is stdout
    and stderr together. A job still running after ``timeout`` seconds is
    killed (its whole process group) and reported as a hang (AssertionError).
    """
    import textwrap

    script = Path(tmp_path) / name
    script.write_text(textwrap.dedent(code))
    cmd = [mpiexec_path(), "-n", str(n), sys.executable, str(script)]
    return run_command(cmd, subprocess_env(**env), tmp_path, timeout)


def run_command(cmd, env, cwd, timeout):
    """Run ``cmd`` (a job launcher) in its own session; ``(returncode, seconds, output)``.

    A job still running after ``timeout`` seconds is killed (its whole
    process group) and reported as a hang (AssertionError).
    """
    import signal
    import subprocess
    import time

    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output, _ = proc.communicate()
        raise AssertionError(f"job hung: still running after {timeout} s\n"
                             f"--- output ---\n{output}") from None
    elapsed = time.monotonic() - start
    return proc.returncode, elapsed, output


def run_ok(command, cwd, timeout=240):
    """Run ``command`` in a launcher-clean environment; its stdout + stderr, or
    AssertionError (with that output) when it exits non-zero."""
    import subprocess
    completed = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                               env=subprocess_env(), cwd=str(cwd), stdin=subprocess.DEVNULL)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    return output
