"""Estimators trained over MPI ranks, following the scikit-learn contract.

``fit`` takes this rank's rows; model attributes end up identical on every
rank; ``score`` is global.
"""

from .forest import RandomForestClassifier, RandomForestRegressor
from .kmeans import KMeans
from .mlp import MLPClassifier, MLPRegressor

__all__ = ["KMeans", "MLPClassifier", "MLPRegressor", "RandomForestClassifier",
           "RandomForestRegressor"]
