"""scripts/test's set-up of its environments: its time does not count against the
real-Slurm tier's limit, and a failure names its cause. scripts/test runs here with
the real scripts/_common.sh whose set-up, test cluster and pytest are stand-ins."""
import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_COMMON = """\
. {repo}/scripts/_common.sh
HPCDIST_ROOT={root}
HPCDIST_SCRIPTS={root}/scripts
setup_env() {{
    HPCDIST_VENV={root}/venv-$1
    sleep "${{FAKE_SETUP_SECONDS:-0}}"
    if [[ $1 == system && -n ${{FAKE_SETUP_FAILS:-}} ]]; then
        fake-compiler --build mpi4py
    fi
}}
"""

_CLUSTER = """\
#!/usr/bin/env bash
case $1 in
    env) echo "export SLURM_CONF={root}/slurm.conf" ;;
esac
"""

_PYTEST = """\
#!/usr/bin/env bash
echo "fake pytest $*"
"""


@pytest.fixture
def fake_root(tmp_path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    shutil.copy(REPO / "scripts" / "test", scripts / "test")
    (scripts / "_common.sh").write_text(_COMMON.format(repo=REPO, root=tmp_path))
    for path, text in ((scripts / "slurm-cluster", _CLUSTER),
                       (tmp_path / "venv-wheels" / "bin" / "python", _PYTEST)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).format(root=tmp_path))
        path.chmod(0o755)
    return tmp_path


def _slurm_tier(root, **env):
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("HPCDIST_TEST_DEADLINE", "CI")}
    environment.update(env, TMPDIR=str(root))
    done = subprocess.run(["bash", str(root / "scripts" / "test"), "--slurm"],
                          capture_output=True, text=True, timeout=120, env=environment,
                          stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr


def test_setup_time_does_not_count_against_the_tier_limit(fake_root):
    returncode, output = _slurm_tier(fake_root, FAKE_SETUP_SECONDS="4",
                                     HPCDIST_TEST_TIMEOUT_SLURM="3")
    assert returncode == 0, output
    assert "fake pytest" in output and "tests/slurm_real" in output, output


def test_a_setup_failure_prints_its_cause(fake_root):
    returncode, output = _slurm_tier(fake_root, FAKE_SETUP_FAILS="1")
    assert returncode != 0, output
    assert ("hpcdist tests: setup of the wheels, openmpi and system environment failed: "
            "`fake-compiler --build mpi4py` exited with status 127") in output, output
    assert "no tests ran" in output and "fake pytest" not in output, output
