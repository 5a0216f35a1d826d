"""Importing hpcdist starts no MPI and leaves mpi4py's own behaviour alone."""

import importlib.util
import json
import pkgutil
import subprocess
import sys

import hpcdist
from tests.helpers import subprocess_env

# subpackages whose optional extra is missing are not imported (their own import test
# runs where the extra is installed)
_OPTIONAL_EXTRAS = {"torch": "torch", "dask": "distributed"}
# packages of the optional extras, which a module may import at its top (kernels/_cupy.py)
_EXTRA_PACKAGES = {"cupy", "cupyx", "torch", "dask", "distributed", "sklearnex"}


def _importable_modules():
    names = []
    for module in pkgutil.walk_packages(hpcdist.__path__, prefix="hpcdist."):
        extra = _OPTIONAL_EXTRAS.get(module.name.split(".")[1])
        if extra is None or importlib.util.find_spec(extra) is not None:
            names.append(module.name)
    return names


def _run(code):
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               env=subprocess_env(), timeout=300)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.strip().splitlines()[-1])


def test_importing_every_module_starts_no_mpi_then_mpi4py_and_init_work():
    modules = _importable_modules()
    assert "hpcdist.comm.mpi" in modules and "hpcdist.ml" in modules
    code = f"""
import importlib, json, sys
import mpi4py
rc_before = dict(vars(mpi4py.rc))
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as error:  # a module of an optional extra (kernels._cupy)
        if error.name.split(".")[0] not in {sorted(_EXTRA_PACKAGES)!r}:
            raise
loaded_by_import = 'mpi4py.MPI' in sys.modules
rc_after = dict(vars(mpi4py.rc))
from mpi4py import MPI
initialized = MPI.Is_initialized()
thread_level = MPI.Query_thread()
import hpcdist
ctx = hpcdist.init()
total = float(hpcdist.allreduce(2.0))
print(json.dumps([loaded_by_import, rc_before == rc_after, initialized,
                  thread_level == MPI.THREAD_MULTIPLE, ctx.size, total]))
"""
    loaded, rc_unchanged, initialized, multiple, size, total = _run(code)
    assert not loaded, "importing hpcdist's modules imported mpi4py.MPI"
    assert rc_unchanged
    assert initialized and multiple  # as plain `from mpi4py import MPI` does
    assert (size, total) == (1, 2.0)


def test_the_users_own_mpi_first_then_hpcdist():
    code = """
import json
import mpi4py
mpi4py.rc.thread_level = "serialized"   # the user's choice must stand
from mpi4py import MPI
import hpcdist
ctx = hpcdist.init()
print(json.dumps([MPI.Query_thread() == MPI.THREAD_SERIALIZED, ctx.size,
                  hpcdist.allreduce(3)]))
"""
    assert _run(code) == [True, 1, 3]


def test_first_collective_loads_mpi():
    code = """
import json, sys
import numpy as np
import hpcdist
before = 'mpi4py.MPI' in sys.modules
result = hpcdist.broadcast(np.arange(3)).tolist()
print(json.dumps([before, 'mpi4py.MPI' in sys.modules, result]))
"""
    assert _run(code) == [False, True, [0, 1, 2]]


def test_import_hpcdist_loads_the_layers_on_first_use_of_their_names():
    code = """
import json, sys
import hpcdist
heavy = ['hpcdist.comm', 'hpcdist.parallel', 'numba', 'scipy', 'sklearn']
loaded_at_import = [name for name in heavy if name in sys.modules]
names_listed = sorted(set(hpcdist.__all__) - set(dir(hpcdist)))
from hpcdist import allreduce, DistributedDataParallel
same = allreduce is hpcdist.allreduce is hpcdist.comm.allreduce
kmeans = hpcdist.ml.KMeans.__name__
try:
    hpcdist.no_such_name
    missing = 'no error'
except AttributeError as error:
    missing = str(error)
print(json.dumps([loaded_at_import, names_listed, same, kmeans, missing,
                  DistributedDataParallel.__name__]))
"""
    loaded, unlisted, same, kmeans, missing, ddp = _run(code)
    assert loaded == [] and unlisted == []
    assert same and kmeans == "KMeans" and ddp == "DistributedDataParallel"
    assert missing == "module 'hpcdist' has no attribute 'no_such_name'"


def test_the_launcher_and_usage_errors_load_no_estimator_or_mpi():
    code = """
import json, sys
from hpcdist.cli.main import build_parser
import hpcdist.launch.rank_wrapper
build_parser()
print(json.dumps(sorted(name for name in ('sklearn', 'numba', 'scipy', 'mpi4py.MPI',
                                          'hpcdist.comm', 'hpcdist.ml', 'h5py')
                        if name in sys.modules)))
"""
    assert _run(code) == []
