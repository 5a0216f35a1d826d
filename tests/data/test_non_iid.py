"""dirichlet_partition: every row once, skew that follows alpha, the same split everywhere."""
import numpy as np
import pytest

import hpcdist
from hpcdist.data import dirichlet_partition
from tests.helpers import mpi_twin, same_on_all_ranks

LABELS = np.repeat(np.arange(10), 60)


@pytest.mark.parametrize("n_parts", [1, 2, 3, 7])
@pytest.mark.parametrize("alpha", [0.1, 0.5, 5.0])
def test_every_row_exactly_once_in_sorted_nonempty_parts(n_parts, alpha):
    parts = dirichlet_partition(LABELS, n_parts, alpha, seed=3)
    assert len(parts) == n_parts
    assert all(p.dtype == np.int64 and len(p) and np.all(np.diff(p) > 0) for p in parts)
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(len(LABELS)))


def _class_share_spread(alpha, seed):
    """Mean over parts of the largest class's share of the part."""
    parts = dirichlet_partition(LABELS, 5, alpha, seed=seed)
    return np.mean([np.bincount(LABELS[p], minlength=10).max() / len(p) for p in parts])


def test_small_alpha_skews_and_large_alpha_mixes():
    skewed = np.mean([_class_share_spread(0.1, seed) for seed in range(5)])
    mixed = np.mean([_class_share_spread(1000.0, seed) for seed in range(5)])
    assert skewed > 0.4, skewed  # a few classes dominate each part
    assert mixed < 0.16, mixed   # close to the uniform 0.1


def test_seed_decides_the_split_and_labels_of_any_type_work():
    words = np.array(["cat", "dog", "eel"])[LABELS % 3]
    a = dirichlet_partition(words, 4, 0.5, seed=7)
    b = dirichlet_partition(list(words), 4, 0.5, seed=7)
    c = dirichlet_partition(words, 4, 0.5, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_same_split_on_every_rank():
    parts = dirichlet_partition(LABELS, 4, 0.5, seed=11)
    assert same_on_all_ranks(tuple(map(tuple, parts)))


test_same_split_on_every_rank_mpi = mpi_twin(test_same_split_on_every_rank)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(y=LABELS.reshape(2, -1), n_parts=2, alpha=1.0), hpcdist.InvalidArgumentError, "1-D"),
    (dict(y=LABELS, n_parts=0, alpha=1.0), ValueError, "n_parts=0"),
    (dict(y=LABELS[:3], n_parts=4, alpha=1.0), hpcdist.InvalidArgumentError, "n_parts=4"),
    (dict(y=LABELS, n_parts=2, alpha=0.0), hpcdist.InvalidArgumentError, "alpha=0.0"),
    (dict(y=LABELS, n_parts=2, alpha=float("nan")), hpcdist.InvalidArgumentError, "alpha=nan"),
    (dict(y=LABELS, n_parts=2, alpha="0.5"), hpcdist.InvalidArgumentTypeError, "alpha='0.5'"),
    (dict(y=LABELS, n_parts=2, alpha=1.0, seed=None), TypeError, "seed=None"),
    (dict(y=LABELS[:20], n_parts=20, alpha=1e-3), hpcdist.InvalidArgumentError,
     "left a part empty"),
    (dict(y=[], n_parts=2, alpha=1.0), hpcdist.InvalidArgumentError,
     r"one per row and at least one, got shape \(0,\)"),
    (dict(y=np.array([0.5, np.nan]), n_parts=2, alpha=1.0), hpcdist.InvalidArgumentError,
     "y holds non-integral or NaN values; pass class labels"),
])
def test_bad_arguments_name_the_value(kwargs, error, match):
    with pytest.raises(error, match=match):
        dirichlet_partition(**kwargs)
