"""The real-Slurm tier: the templates submitted with sbatch to the two-node
test cluster of ``scripts/slurm-cluster``.

These tests run only under ``scripts/test --slurm``, which starts the
cluster and sets ``HPCDIST_TEST_SLURM=1`` and ``SLURM_CONF``. Elsewhere they
are deselected (or, when they are all that was selected, skipped with the
reason), so the ordinary serial and MPI runs never submit jobs.
"""

import os
import shutil
from pathlib import Path

import pytest

from tests.slurm_real.cluster import Submitter

ENABLED = os.environ.get("HPCDIST_TEST_SLURM") == "1"
MARKER = "slurm_cluster"


def pytest_configure(config):
    config.addinivalue_line(
        "markers", f"{MARKER}: submits jobs to the test cluster of scripts/slurm-cluster "
        "(only under scripts/test --slurm)")


def pytest_collection_modifyitems(config, items):
    if ENABLED:
        return
    mine = [item for item in items if item.get_closest_marker(MARKER)]
    if not mine:
        return
    if len(mine) == len(items):  # asked for these alone: say why nothing runs
        skip = pytest.mark.skip(reason="needs the test cluster: run scripts/test --slurm")
        for item in mine:
            item.add_marker(skip)
        return
    config.hook.pytest_deselected(items=mine)
    items[:] = [item for item in items if not item.get_closest_marker(MARKER)]


def pytest_terminal_summary(terminalreporter, config):
    path = os.environ.get("HPCDIST_SLURM_MEASUREMENTS")
    if not ENABLED or hasattr(config, "workerinput") or not path or not Path(path).exists():
        return
    terminalreporter.section("measured on the test cluster")
    for line in Path(path).read_text().splitlines():
        terminalreporter.write_line(line)


@pytest.fixture
def submitter(tmp_path):
    """Submits from ``tmp_path``; cancels what still runs when the test ends."""
    if not ENABLED or shutil.which("sbatch") is None or "SLURM_CONF" not in os.environ:
        pytest.fail("no test cluster: run these tests with scripts/test --slurm")
    submitter = Submitter(tmp_path)
    yield submitter
    submitter.cancel_unfinished()
