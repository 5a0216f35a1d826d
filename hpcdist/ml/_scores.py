"""Scores over the rows of all ranks, as scikit-learn's ``accuracy_score`` and ``r2_score``."""

import numpy as np
from sklearn.utils.validation import _check_sample_weight, check_consistent_length, column_or_1d

from ..comm import allreduce
from ..exceptions import InvalidArgumentError

__all__ = ["row_weights", "one_target_per_row", "correct_rows", "global_accuracy",
           "global_r2"]


def _total(values, ctx):
    return allreduce(values, ctx=ctx) if ctx.size > 1 else values


def row_weights(sample_weight, n_rows, where):
    """``sample_weight`` checked by scikit-learn (one finite, non-negative weight per
    row) as float64, ones when None; ``where`` (e.g. ``"KMeans.score"``) names the
    caller in the error."""
    if sample_weight is None:
        return np.ones(n_rows)
    fix = f"pass one finite weight >= 0 for each of this rank's {n_rows} row(s)"
    if n_rows == 0:  # no rows here: scikit-learn's check wants at least one
        weights = np.asarray(sample_weight, dtype=np.float64)
        if weights.shape != (0,):
            raise InvalidArgumentError(f"{where}: sample_weight of shape {weights.shape} is "
                                       f"not usable; {fix}")
        return weights
    try:
        return _check_sample_weight(sample_weight, np.empty((n_rows, 0)), dtype=np.float64,
                                    ensure_non_negative=True, allow_all_zero_weights=True)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"{where}: sample_weight is not usable ({error}); {fix}"
                                   ) from None


def one_target_per_row(y, predicted):
    """``y`` as a 1-D array, checked by scikit-learn to hold one target per predicted row."""
    y = column_or_1d(y, warn=True)
    check_consistent_length(predicted, y)
    return y


def correct_rows(predicted, y):
    """Whether each row's label ``y`` (checked: one per row) equals ``predicted``."""
    return np.asarray(predicted) == one_target_per_row(y, predicted)


def global_accuracy(correct, weights, ctx):
    """The weighted share of the ``correct`` rows of all ranks (NaN when the weights of
    all ranks sum to zero)."""
    totals = _total(np.array([weights @ correct, weights.sum()]), ctx)
    return float(totals[0] / totals[1]) if totals[1] else float("nan")


def global_r2(y, predicted, ctx, weights=None):
    """Weighted R^2 over the rows of all ranks, the uniform average over outputs.

    Two allreduces (the weighted means, then the squares about them). As
    scikit-learn's ``r2_score``, an output of constant targets scores 1.0
    when fitted exactly and 0.0 otherwise; NaN when no rank has a row.
    """
    y = np.asarray(y, dtype=np.float64)
    y = y[:, None] if y.ndim == 1 else y
    predicted = np.asarray(predicted, dtype=np.float64).reshape(y.shape)
    weights = np.ones(len(y)) if weights is None else weights
    outputs = y.shape[1]
    sums = _total(np.concatenate([[weights.sum()], weights @ y,
                                  weights @ (y - predicted) ** 2]), ctx)
    n, mean, ss_res = sums[0], sums[1:1 + outputs] / (sums[0] or 1), sums[1 + outputs:]
    if n == 0:
        return float("nan")
    ss_tot = _total(weights @ (y - mean) ** 2, ctx)
    exact = np.where(ss_res == 0, 1.0, 0.0)
    r2 = np.where(ss_tot > 0, 1 - ss_res / np.where(ss_tot > 0, ss_tot, 1), exact)
    return float(r2.mean())
