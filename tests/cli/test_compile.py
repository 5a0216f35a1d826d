"""``hpcdist compile``: the kernels land in the cache, and a later fit loads them all."""
import json
import re
import subprocess
import sys

import pytest

from tests.helpers import mpiexec_path, subprocess_env

# a K-means fit, predict and score as a user runs them, other sizes than the compile task's;
# prints how many kernel signatures it compiled and loaded
_FIT = """
import json, numpy as np
from hpcdist.cli.compile import _kernel_counts
from hpcdist.ml import KMeans
X = np.random.default_rng(1).normal(size=(3000, 7))
model = KMeans(5, n_init=1, random_state=3).fit(X)
model.predict(X); model.score(X)
print(json.dumps(_kernel_counts()))
"""
# a forest fit, predict and score, other sizes than the compile task's
_FOREST_FIT = """
import json
from hpcdist.cli.compile import _kernel_counts
from hpcdist.data import make_classification
from hpcdist.ml import RandomForestClassifier
X, y = make_classification(3000, 9, 4, random_state=1)
model = RandomForestClassifier(6, max_depth=8, random_state=3).fit(X, y)
model.predict(X); model.score(X, y)
print(json.dumps(_kernel_counts()))
"""


def _hpcdist(argv, cache, n=None, timeout=600):
    prefix = [mpiexec_path(), "-n", str(n)] if n else []
    return subprocess.run([*prefix, sys.executable, "-m", "hpcdist.cli.main", *argv],
                          capture_output=True, text=True, timeout=timeout,
                          env=subprocess_env(NUMBA_CACHE_DIR=str(cache)),
                          stdin=subprocess.DEVNULL)


def _fit_counts(script, cache):
    """(signatures compiled, signatures loaded) by a run of ``script`` on ``cache``."""
    fit = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, env=subprocess_env(NUMBA_CACHE_DIR=str(cache)))
    assert fit.returncode == 0, fit.stderr
    return json.loads(fit.stdout.strip().splitlines()[-1])


def _counts(line_name, output):
    match = re.search(rf"{line_name}\s+[\d.]+ s\s+compiled\s+(\d+), loaded\s+(\d+)", output)
    assert match, output
    return int(match[1]), int(match[2])


def test_compile_fills_the_cache_then_a_fit_compiles_nothing(tmp_path):
    cache = tmp_path / "cache"
    done = _hpcdist(["compile", "--only", "kmeans-float64", "-j", "1"], cache)
    assert done.returncode == 0, done.stderr
    compiled, _ = _counts("kmeans-float64", done.stdout)
    assert compiled > 5
    assert f"kernels cached in {cache}" in done.stdout
    assert re.search(r"kernel signatures compiled, \d+ loaded from the cache, 1 tasks on "
                     r"1 processes in [\d.]+ s", done.stdout)
    again = _hpcdist(["compile", "--only", "kmeans-float64"], cache)
    assert again.returncode == 0, again.stderr
    again_compiled, again_loaded = _counts("kmeans-float64", again.stdout)
    # the kernels called from Python load; those only kernels call are inside them
    assert again_compiled == 0 and 0 < again_loaded <= compiled
    fit_compiled, fit_loaded = _fit_counts(_FIT, cache)
    assert fit_compiled == 0 and fit_loaded > 0


def test_a_forest_fit_after_compile_compiles_nothing(tmp_path):
    """The forest's kernels run on threads over ranges of rows and its helpers have no
    entry point for Python: the kernels a fit calls are still all in the task's cache."""
    cache = tmp_path / "cache"
    done = _hpcdist(["compile", "--only", "forest-classifier", "-j", "1"], cache)
    assert done.returncode == 0, done.stderr
    fit_compiled, fit_loaded = _fit_counts(_FOREST_FIT, cache)
    assert fit_compiled == 0 and fit_loaded > 0


def test_ranks_of_a_node_share_the_tasks(tmp_path):
    done = _hpcdist(["compile", "--only", "kmeans-float32", "mlp"], tmp_path / "cache", n=2)
    assert done.returncode == 0, done.stderr
    assert re.search(r"kmeans-float32 .*\(rank 0\)", done.stdout)
    assert re.search(r"mlp .*\(rank 1\)", done.stdout)
    assert done.stdout.count("kernel signatures compiled") == 1  # printed by rank 0 only


@pytest.mark.parametrize("argv, message", [
    (["compile", "--only", "forest", "kmeans-float64"],
     "--only forest: no such task; choose from forest-classifier, "),
    (["compile", "--jobs", "0"], "--jobs 0 should be >= 1"),
])
def test_usage_errors(tmp_path, argv, message):
    done = _hpcdist(argv, tmp_path, timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr
