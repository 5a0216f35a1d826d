"""Shared fixtures for the hpcdist test suite.

Serial run:  ``python -m pytest``            (tests marked ``mpi`` are skipped)
MPI runs:    ``mpiexec -n N python -m pytest --only-mpi``, N = 2, 3, 4 (see scripts/test)
"""
import os

from tests import _env  # noqa: F401  - snapshot of the environment before MPI starts

# Keep ranks x threads within the machine, and let a hung collective abort the
# job long before pytest-timeout would (tests that need another value run
# their own processes). Must happen before hpcdist / numpy start.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("HPCDIST_STALL_TIMEOUT", "60")
# Layout overrides are set by individual tests only, around the creation of a
# new context; never inherit them into the default context.
for _var in ("HPCDIST_RANKS_PER_NODE", "HPCDIST_CUDA_AWARE"):
    os.environ.pop(_var, None)

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ctx():
    """The default context (``hpcdist.init()``), shared by the whole session."""
    import hpcdist
    return hpcdist.init()


@pytest.fixture(scope="session")
def size(ctx):
    return ctx.size


@pytest.fixture(scope="session")
def rank(ctx):
    return ctx.rank


@pytest.fixture
def check_mode(ctx):
    """Turn check mode on for one test (on every rank); restore it afterwards."""
    old = ctx.check
    ctx.check = True
    yield ctx
    ctx.check = old


def _world_size():
    from mpi4py import MPI
    return MPI.COMM_WORLD.Get_size()


def pytest_collection_modifyitems(config, items):
    """Under mpiexec, run only tests marked ``mpi``.

    pytest-mpi ignores ``--only-mpi`` when ``--with-mpi`` is also given, and
    serial tests (subprocess jobs, per-rank temporary files) are wrong when
    every rank runs them. So unmarked tests are skipped whenever
    ``--only-mpi`` is given or more than one MPI process is running.
    """
    only_mpi = config.getoption("--only-mpi", default=False)
    if not only_mpi and _world_size() == 1:
        return
    skip = pytest.mark.skip(reason="serial test: runs under plain pytest only")
    for item in items:
        if "mpi" not in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter):
    """One line counting the documentation's examples that ran (tests/docs), by kind.

    Here rather than in tests/docs: with pytest-xdist only the controller
    prints, and it loads this file alone.
    """
    counts = {}
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, ()):
            nodeid = getattr(report, "nodeid", "")
            if report.when not in ("call", "setup") or "::test_example_runs[" not in nodeid \
                    or not nodeid.startswith("tests/docs/"):
                continue
            if report.when == "setup" and outcome == "passed":
                continue
            kind = nodeid.rsplit("-", 1)[-1].rstrip("]").rstrip("0123456789") or "?"
            counts.setdefault(outcome, {}).setdefault(kind, 0)
            counts[outcome][kind] += 1
    if counts:
        terminalreporter.write_line("documentation examples: " + "; ".join(
            f"{outcome} " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
            for outcome, kinds in counts.items()))
