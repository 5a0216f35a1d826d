"""Input validation for estimators whose data is split over ranks.

Each rank checks its own rows first (a failure on any rank raises on every
rank, see :func:`hpcdist.comm.checks.validated_on_every_rank`); then facts
that only make sense globally (equal widths, labels, sample counts) are
exchanged once and judged identically on every rank.
"""

import numpy as np
from sklearn.utils import check_array

from ..comm.checks import format_ranks, validated_on_every_rank
from ..comm.context import Context, resolve
from ..comm.objects import allgather_object

__all__ = ["context_of", "check_local_data", "LocalData"]


def context_of(comm):
    """The hpcdist Context for an estimator's ``comm`` argument.

    Parameters
    ----------
    comm : None, Context or mpi4py.MPI.Comm
        None means the default context.
    """
    if comm is None or isinstance(comm, Context):
        return resolve(comm)
    if hasattr(comm, "Get_rank") and hasattr(comm, "Dup"):
        return Context(comm)
    raise TypeError(f"comm={comm!r} should be None, an hpcdist Context or an mpi4py "
                    "communicator")


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
                     classification=False, multi_output=False, min_local_rows=1,
                     n_features=None):
    """Validate this rank's rows; raise the same clear error on every rank.

    Parameters
    ----------
    ctx : Context
    X : array-like of shape (n_local, n_features)
    y : array-like of shape (n_local,) or (n_local, n_outputs), optional
    name : str
        The estimator, for messages, e.g. ``"MLPClassifier.fit"``.
    dtype : dtype or tuple of dtypes
        Accepted float dtypes (the first is used for conversions).
    classification : bool
        Whether ``y`` holds class labels (their union is collected).
    multi_output : bool
        Whether ``y`` may be 2-D.
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
        NaN or infinity in ``X``, ``y`` of the wrong length, widths that
        differ between ranks or from ``n_features``, too few rows on a rank.
    """
    with validated_on_every_rank(ctx):
        X = check_array(X, dtype=dtype, ensure_min_samples=0, input_name="X")
        if y is not None:
            y = np.asarray(y)
            if y.ndim == 2 and y.shape[1] == 1 and not multi_output:
                y = y.ravel()
            if y.ndim not in ((1, 2) if multi_output else (1,)):
                raise ValueError(f"{name}: y has shape {y.shape}; pass a 1-D array of "
                                 f"{'targets' if multi_output else 'labels'} per row")
            if len(y) != len(X):
                raise ValueError(f"{name}: X has {len(X)} rows but y has {len(y)}; pass one "
                                 "target per row")
            if not classification:
                y = check_array(y, dtype=dtype, ensure_2d=False, ensure_min_samples=0,
                                input_name="y")
            elif y.dtype.kind == "f" and not np.isfinite(y).all():
                raise ValueError(f"{name}: y contains NaN or infinity; labels must be finite")
    facts = (len(X), X.shape[1], None if not classification else np.unique(y))
    all_facts = allgather_object(facts, ctx=ctx) if ctx.size > 1 else [facts]
    counts = [f[0] for f in all_facts]
    widths = {}
    for rank, f in enumerate(all_facts):
        widths.setdefault(f[1], []).append(rank)
    if len(widths) > 1:
        listing = ", ".join(f"{format_ranks(r)}: {w}" for w, r in widths.items())
        raise ValueError(f"{name}: X has a different number of features on different ranks "
                         f"({listing}); every rank must pass the same columns")
    width = all_facts[0][1]
    if n_features is not None and width != n_features:
        raise ValueError(f"{name}: X has {width} features, but the estimator was fitted with "
                         f"{n_features}")
    short = [rank for rank, count in enumerate(counts) if count < min_local_rows]
    if short:
        raise ValueError(f"{name}: {format_ranks(short)} got "
                         f"{[counts[r] for r in short]} rows, fewer than the {min_local_rows} "
                         "needed per rank; give every rank more rows or use fewer ranks")
    labels = [f[2] for f in all_facts] if classification else None
    return LocalData(X, y, width, counts, labels)
