"""``import hpcdist`` and ``import hpcdist.ml`` load neither scikit-learn, SciPy nor Numba:
the estimators load on first use of their names."""

import json
import subprocess
import sys

from tests.helpers import subprocess_env

_HEAVY = ("sklearn", "scipy", "numba", "mpi4py.MPI")


def _loaded_after(code):
    probe = (f"import json, sys\n{code}\n"
             f"print(json.dumps([name for name in {_HEAVY!r} if name in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_importing_hpcdist_and_hpcdist_ml_loads_no_heavy_dependency():
    assert _loaded_after("import hpcdist") == []
    assert _loaded_after("import hpcdist.ml") == []
    assert _loaded_after("import hpcdist, hpcdist.ml; dir(hpcdist.ml)") == []


def test_estimator_names_load_on_first_use():
    names = ["KMeans", "MLPClassifier", "MLPRegressor", "RandomForestClassifier",
             "RandomForestRegressor"]
    code = ("import hpcdist.ml as ml\n"
            "listed = sorted(set(ml.__all__) & set(dir(ml)))\n"
            "from hpcdist.ml import *\n"
            "classes = [KMeans.__name__, ml.MLPClassifier.__name__, ml.MLPRegressor.__name__,\n"
            "           RandomForestClassifier.__name__, RandomForestRegressor.__name__]\n"
            "import hpcdist\n"
            "assert hpcdist.ml.KMeans is KMeans\n"
            "try:\n"
            "    ml.NoSuchEstimator\n"
            "except AttributeError as error:\n"
            "    missing = str(error)\n"
            "print(json.dumps([listed, classes, missing]))")
    probe = "import json\n" + code
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=300, env=subprocess_env())
    assert done.returncode == 0, done.stderr
    listed, classes, missing = json.loads(done.stdout.strip().splitlines()[-1])
    assert listed == names and classes == names
    assert missing == "module 'hpcdist.ml' has no attribute 'NoSuchEstimator'"
