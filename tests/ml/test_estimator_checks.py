"""scikit-learn's own estimator checks (``parametrize_with_checks``) on the five estimators.

Serially every check runs on one rank. The MPI variant runs them at 2 ranks:
every rank runs the same check, so each rank fits on its own rows (the rows
the check makes, the same on every rank: the global data holds them once per
rank) and predicts its own; the outcome is agreed on by all ranks, so a check
that fails on one rank fails on all (and a failure never leaves a rank
waiting in the next check's collective).

No check is excused: the estimators pass all of them serially and at 2 ranks,
so ``expected_failed_checks`` is not needed (a check that could only fail for
a reason of distributed training would be listed there with that reason).
The settings keep the checks fast: few trees, a small network trained for few
epochs on small batches (``batch_size=8``).
"""
from unittest import SkipTest

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from hpcdist.ml import (
    KMeans,
    MLPClassifier,
    MLPRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from tests.helpers import all_ranks, world_size

pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")

#: the MPI variant runs at this many ranks (at more, 2 cores make the MLP checks too slow)
CHECK_RANKS = 2


def _estimators():
    """Small, fast settings of every estimator (fresh instances for each parametrization)."""
    network = dict(hidden_layer_sizes=(16,), max_iter=30, batch_size=8,
                   learning_rate_init=0.02, random_state=0)
    return [KMeans(random_state=0),
            RandomForestClassifier(10, random_state=0),
            RandomForestRegressor(10, random_state=0),
            MLPClassifier(**network),
            MLPRegressor(**network)]


@parametrize_with_checks(_estimators())
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


@pytest.mark.mpi(min_size=2)
@parametrize_with_checks(_estimators())
def test_scikit_learn_estimator_checks_on_every_rank(estimator, check):
    if world_size() != CHECK_RANKS:
        pytest.skip(f"scikit-learn's checks run at {CHECK_RANKS} ranks, not {world_size()}")
    skipped = None
    with all_ranks(f"{type(estimator).__name__}: {check}"):
        try:
            check(estimator)
        except SkipTest as reason:  # the same on every rank: the checks are deterministic
            skipped = str(reason)
    if skipped is not None:
        pytest.skip(skipped)
