"""The SLURM templates parse, and their bodies run here with a faked allocation."""

import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.helpers import subprocess_env

SLURM = pathlib.Path(__file__).resolve().parents[2] / "slurm"
TEMPLATES = sorted(SLURM.glob("*.sbatch"))


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_template_is_valid_bash(template):
    completed = subprocess.run(["bash", "-n", str(template)], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_template_passes_shellcheck(template):
    completed = subprocess.run(["shellcheck", str(template)], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stdout


def test_single_node_template_runs_hpcdist_info_on_every_task(tmp_path):
    env = subprocess_env(SLURM_NTASKS="2", SLURM_CPUS_PER_TASK="1", SLURM_JOB_ID="4242",
                         HPCDIST_VENV=str(pathlib.Path(sys.executable).parent.parent),
                         TMPDIR=str(tmp_path))
    completed = subprocess.run(["bash", str(SLURM / "cpu_single_node.sbatch")], env=env,
                               capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "2 ranks x 1 threads" in completed.stdout
    assert "world_size             2" in completed.stdout
