"""hpcdist bench recovery: a quick run under the Open MPI 5 wheel reports every case (here with
the other fault-tolerance tests, which CI runs in that environment)."""
import json
import math
import subprocess

import pytest

from hpcdist.bench import recovery
from tests.resilient.ulfm import PYTHON, needs_ulfm, venv_env


@needs_ulfm
def test_a_quick_run_reports_every_case_and_loses_no_committed_step(tmp_path):
    completed = subprocess.run(
        [str(PYTHON), "-m", "hpcdist.bench.recovery", "--quick", "--ranks", "3", "--steps", "9",
         "--block", "2", "--seed", "0", "--output-dir", str(tmp_path)],
        env=venv_env(), cwd=tmp_path, capture_output=True, text=True, timeout=400)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads((tmp_path / "recovery.json").read_text())
    cases = report["cases"]
    assert set(cases) == {"shrink (hpcdist.nn)", "shrink (torch)", "respawn (hpcdist.nn)",
                          "restart (hpcdist run)"}
    assert cases["shrink (hpcdist.nn)"]["ranks_after"] == cases["shrink (torch)"]["ranks_after"] \
        == 2
    assert cases["respawn (hpcdist.nn)"]["ranks_after"] == 3
    for case in cases.values():
        assert case["steps_completed"] == 9, cases
        assert 0 < case["seconds_to_next_step"] < 60, cases
    summary = {name: entry["value"] for name, entry in report["summary"].items()}
    assert summary["steps_lost_shrink"] == summary["steps_lost_respawn"] == 0, summary
    assert summary["restart_over_shrink"] > 1, summary
    assert report["costs"]["block_pairs"] == 2 * 7 and report["costs"]["job_pairs"] == 1
    # costs are ratios of step times minus 1 (any value above -1 on a loaded machine)
    assert math.isfinite(summary["commit_cost"]) and summary["commit_cost"] > -1, summary
    assert math.isfinite(summary["with_ft_cost"]) and summary["with_ft_cost"] > -1, summary


def test_the_first_step_after_the_kill_is_the_job_that_went_on():
    events = [{"event": "step", "t": 1.0, "step": 3, "size": 3},
              {"event": "kill", "t": 2.0, "step": 4},
              {"event": "step", "t": 2.1, "step": 4, "size": 3},   # a survivor, before it knew
              {"event": "step", "t": 2.5, "step": 5, "size": 2}]
    result = recovery._after_kill(events, None, "hpcdist", 3)
    assert result == {"kill_step": 4, "seconds_to_next_step": pytest.approx(0.5),
                      "steps_lost": 0, "ranks_after": 2, "steps_completed": 5}
    respawned = recovery._after_kill(events, None, "respawn", 3)
    assert respawned["seconds_to_next_step"] == pytest.approx(0.5)


def test_a_job_without_a_kill_is_reported_as_such():
    completed = subprocess.CompletedProcess([], 1, stdout="the job's output")
    with pytest.raises(SystemExit, match="no rank was killed"):
        recovery._after_kill([], completed, "restart", 3)
