"""Estimators trained over MPI ranks, following the scikit-learn contract.

``fit`` takes this rank's rows; model attributes end up identical on every
rank; ``score`` is global.

The estimators (with scikit-learn, SciPy and the Numba kernels under them)
load on first use of their name, so that ``import hpcdist.ml`` alone costs
nothing; ``from hpcdist.ml import KMeans`` loads K-means' module as usual.
"""

import importlib

#: public name -> the submodule that defines it, imported on first use (PEP 562)
_LAZY = {"KMeans": ".kmeans", "MLPClassifier": ".mlp", "MLPRegressor": ".mlp",
         "RandomForestClassifier": ".forest", "RandomForestRegressor": ".forest"}

__all__ = ["KMeans", "MLPClassifier", "MLPRegressor", "RandomForestClassifier",
           "RandomForestRegressor"]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpcdist.ml' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
