"""``hpcdist bench startup``: first against second runs, hpcdist compile and imports, as JSON."""
import json
import subprocess
import sys

from tests.helpers import subprocess_env


def _bench(argv, timeout=900):
    return subprocess.run([sys.executable, "-m", "hpcdist.cli.main", "bench", "startup",
                           *argv], capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(), stdin=subprocess.DEVNULL)


def test_quick_run_writes_first_second_and_after_compile_figures(tmp_path):
    done = _bench(["--quick", "--commands", "mlp", "--ranks", "1", "--repetitions", "1",
                   "--output-dir", str(tmp_path)])
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "startup.json").read_text())
    assert report["benchmark"] == "startup"
    assert report["command"].startswith("hpcdist bench startup ")
    assert "--commands mlp" in report["command"] and report["settings"]["ranks"] == [1]
    run = report["runs"]["mlp@1"]
    for phase in ("first", "second", "after_compile"):
        assert run[phase]["wall"] > run[phase]["fit"] > 0
    assert run["first_over_second"] == run["first"]["wall"] / run["second"]["wall"]
    assert report["hpcdist_compile_seconds"] > 0
    assert set(report["import_seconds"]) == {"import hpcdist", "import hpcdist.ml"}
    assert "mlp@1 first/second wall" in report["summary"]
    assert "PASS" not in done.stdout and "MISS" not in done.stdout


def test_unknown_command_is_a_usage_error(tmp_path):
    done = _bench(["--commands", "forest,svm", "--output-dir", str(tmp_path)], timeout=120)
    assert done.returncode == 2
    assert "--commands forest,svm: choose among forest,kmeans,mlp" in done.stderr
