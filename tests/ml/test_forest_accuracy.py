"""Held-out accuracy and R^2 against scikit-learn's forests (serial; 5 seeds, 50 trees).

The mean over seeds must be at least scikit-learn's mean minus one point.
"""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_friedman1
from sklearn.ensemble import RandomForestClassifier as SklearnClassifier
from sklearn.ensemble import RandomForestRegressor as SklearnRegressor
from sklearn.model_selection import train_test_split

from hpcdist.ml import RandomForestClassifier, RandomForestRegressor

SEEDS = range(5)
N_TREES = 50

pytestmark = pytest.mark.slow


def _mean_scores(make_pair, X, y, stratify):
    ours, theirs = [], []
    for seed in SEEDS:
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=0.25, random_state=seed, stratify=y if stratify else None)
        mine, reference = make_pair(seed)
        ours.append(mine.fit(X_train, y_train).score(X_test, y_test))
        theirs.append(reference.fit(X_train, y_train).score(X_test, y_test))
    return float(np.mean(ours)), float(np.mean(theirs))


@pytest.mark.parametrize("loader", [load_digits, load_breast_cancer, load_wine],
                         ids=["digits", "breast_cancer", "wine"])
def test_held_out_accuracy_matches_scikit_learn(loader):
    X, y = loader(return_X_y=True)
    ours, theirs = _mean_scores(
        lambda seed: (RandomForestClassifier(N_TREES, random_state=seed),
                      SklearnClassifier(N_TREES, random_state=seed)), X, y, stratify=True)
    assert ours >= theirs - 0.01, f"mean accuracy {ours:.4f} < scikit-learn's {theirs:.4f} - 0.01"


def test_held_out_r2_matches_scikit_learn():
    X, y = make_friedman1(1000, 10, noise=1.0, random_state=0)
    ours, theirs = _mean_scores(
        lambda seed: (RandomForestRegressor(N_TREES, random_state=seed),
                      SklearnRegressor(N_TREES, random_state=seed)), X, y, stratify=False)
    assert ours >= theirs - 0.01, f"mean R^2 {ours:.4f} < scikit-learn's {theirs:.4f} - 0.01"
