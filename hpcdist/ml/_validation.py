"""Input validation for estimators whose data is split over ranks.

Each rank checks its own rows first (a failure on any rank raises on every
rank, see :func:`hpcdist.comm.checks.validated_on_every_rank`); then facts
that only make sense globally (equal widths, labels, sample counts) are
exchanged once and judged identically on every rank. NumPy rows are checked
with scikit-learn's ``check_array``, CuPy rows on their device
(:func:`check_device_rows`); the global facts are judged alike for both.
"""

import warnings
from contextlib import contextmanager

import numpy as np
from sklearn.exceptions import DataConversionWarning
from sklearn.utils import check_array
from sklearn.utils.multiclass import check_classification_targets

from .._arrays import is_cupy
from ..comm import allgather_object
from ..comm.checks import format_ranks, mark_raised_on_every_rank, validated_on_every_rank
from ..exceptions import HpcdistError, InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["check_local_data", "check_device_rows", "LocalData", "sklearn_errors_named"]


@contextmanager
def sklearn_errors_named(name):
    """scikit-learn's validation errors raised in the block, as hpcdist's (still a
    ``ValueError`` or ``TypeError``) with ``name`` (e.g. ``"KMeans.fit"``) in front."""
    try:
        yield
    except HpcdistError:
        raise
    except TypeError as error:
        raise InvalidArgumentTypeError(f"{name}: {error}") from None
    except ValueError as error:
        raise InvalidArgumentError(f"{name}: {error}") from None


def check_device_rows(X, name):
    """CuPy rows as ``check_array`` checks host rows: 2-D, numbers, finite.

    Parameters
    ----------
    X : cupy.ndarray of shape (n_rows, n_features)
    name : str
        The estimator's method, for messages.

    Returns
    -------
    cupy.ndarray of shape (n_rows, n_features)
        C-contiguous, float32 kept, other numbers as float64.
    """
    import cupy

    if X.ndim != 2:
        raise InvalidArgumentError(
            f"{name}: expected a 2D array, got {X.ndim}D; reshape it with "
            "X.reshape(-1, 1) for one feature or X.reshape(1, -1) for one sample")
    if X.dtype.kind == "c":
        raise InvalidArgumentError(f"{name}: Complex data not supported")
    if X.dtype.kind not in "fiub":
        raise InvalidArgumentError(f"{name}: X has dtype {X.dtype}; pass numbers")
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if X.shape[1] < 1:
        raise InvalidArgumentError(
            f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of "
            "1 is required.")
    if len(X) and not bool(cupy.isfinite(X).all()):
        raise InvalidArgumentError(
            f"{name}: Input X contains NaN or infinity; remove or impute them")
    return cupy.ascontiguousarray(X)


class LocalData:
    """This rank's validated rows plus the global facts every rank agreed on.

    Attributes
    ----------
    X : ndarray of shape (n_local, n_features)
    y : ndarray of shape (n_local,) or (n_local, n_outputs), or None
    n_features : int
    counts : list of int
        Rows on every rank.
    labels : list of ndarray or None
        The distinct labels of every rank (classification only).
    """

    def __init__(self, X, y, n_features, counts, labels):
        self.X, self.y, self.n_features = X, y, n_features
        self.counts, self.labels = counts, labels

    @property
    def n_global(self):
        return sum(self.counts)

    def classes(self):
        """The sorted union of every rank's labels."""
        return np.unique(np.concatenate(self.labels))


def check_local_data(ctx, X, y=None, *, name, dtype=(np.float64, np.float32),
                     classification=False, multi_output=False, y_required=False,
                     min_local_rows=1, n_features=None):
    """Validate this rank's rows; raise the same clear error on every rank.

    Parameters
    ----------
    ctx : Context
    X : array-like or cupy.ndarray of shape (n_local, n_features)
        CuPy rows are checked on their device (:func:`check_device_rows`).
    y : array-like of shape (n_local,) or (n_local, n_outputs), optional
    name : str
        The estimator, for messages, e.g. ``"MLPClassifier.fit"``.
    dtype : dtype or tuple of dtypes
        Accepted float dtypes (the first is used for conversions).
    classification : bool
        Whether ``y`` holds class labels (their union is collected;
        continuous values raise scikit-learn's ``Unknown label type``).
    multi_output : bool
        Whether ``y`` may be 2-D. Otherwise a column ``y`` of shape
        ``(n_local, 1)`` is raveled with a ``DataConversionWarning``.
    y_required : bool
        Whether ``y=None`` is an error (a supervised estimator).
    min_local_rows : int
        Every rank needs at least this many rows.
    n_features : int, optional
        The width the estimator was fitted with.

    Returns
    -------
    LocalData

    Raises
    ------
    ValueError
        NaN or infinity in ``X``, ``y`` missing or of the wrong length,
        continuous class labels, widths that differ between ranks or from
        ``n_features``, too few rows on a rank.
    """
    with validated_on_every_rank(ctx), sklearn_errors_named(name):
        if is_cupy(X):
            X = check_device_rows(X, name)
        else:
            X = check_array(X, dtype=dtype, ensure_min_samples=0, input_name="X")
        if y is None and y_required:
            raise InvalidArgumentError(f"{name} requires y to be passed, but the target y is None; "
                                       "pass this rank's targets")
        if y is not None:
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1 and not multi_output:
                # the caller of fit: here < the estimator's checks < fit < keyword renaming
                warnings.warn(f"A column-vector y was passed when a 1d array was expected "
                              f"({name}); pass y of shape (n_local,), e.g. y.ravel()",
                              DataConversionWarning, stacklevel=5)
                y = y.ravel()
            if y.ndim not in ((1, 2) if multi_output else (1,)):
                raise InvalidArgumentError(f"{name}: y has shape {y.shape}; pass a 1-D array of "
                                           f"{'targets' if multi_output else 'labels'} per row")
            if len(y) != len(X):
                raise InvalidArgumentError(
                    f"{name}: X has {len(X)} rows but y has {len(y)}; pass one "
                    "target per row")
            if not classification:
                y = check_array(y, dtype=dtype, ensure_2d=False, ensure_min_samples=0,
                                input_name="y")
            else:
                if y.dtype.kind == "f" and not np.isfinite(y).all():
                    raise InvalidArgumentError(
                        f"{name}: y contains NaN or infinity; labels must be "
                        "finite")
                check_classification_targets(y)
    facts = (len(X), X.shape[1], None if not classification else np.unique(y))
    all_facts = allgather_object(facts, ctx=ctx) if ctx.size > 1 else [facts]
    counts = [f[0] for f in all_facts]
    widths = {}
    for rank, f in enumerate(all_facts):
        widths.setdefault(f[1], []).append(rank)
    if len(widths) > 1:
        listing = ", ".join(f"{format_ranks(r)}: {w}" for w, r in widths.items())
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"{name}: X has a different number of features on different ranks "
            f"({listing}); every rank must pass the same columns"))
    width = all_facts[0][1]
    if n_features is not None and width != n_features:
        estimator = name.partition(".")[0]
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"{name}: X has {width} features, but {estimator} is expecting "
            f"{n_features} features as input (it was fitted with {n_features})"))
    short = [rank for rank, count in enumerate(counts) if count < min_local_rows]
    if short:  # the counts of every rank: all raise
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"{name}: {format_ranks(short)} got "
            f"{[counts[r] for r in short]} rows, fewer than the {min_local_rows} "
            "needed per rank; give every rank more rows or use fewer ranks"))
    labels = [f[2] for f in all_facts] if classification else None
    return LocalData(X, y, width, counts, labels)
