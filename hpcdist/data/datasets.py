"""Built-in data sets for demos and tests, made or loaded per rank.

Every function returns this rank's rows ``(X_local, y_local)`` of a global
data set, partitioned by :class:`DataPartitioner` (contiguous, balanced).

The synthetic sets (:func:`make_blobs`, :func:`make_classification`) are
generated in blocks of ``BLOCK_ROWS`` rows, block ``b`` from its own seed
``SeedSequence(random_state, spawn_key=(1, b))``, and the generating model
(centres, covariances) from ``SeedSequence(random_state, spawn_key=(0,))``.
A rank generates only the blocks that overlap its rows, so the global data
set is the same whatever the number of ranks, and no rank ever holds it all;
the class counts differ by at most one.
"""
import numpy as np
from sklearn.datasets import load_digits as sklearn_digits
from sklearn.model_selection import train_test_split

from .._checks import check_int
from ..comm import resolve_context
from ..exceptions import InvalidArgumentError
from ._checks import check_seed
from .partition import DataPartitioner

__all__ = ["BLOCK_ROWS", "DATASETS", "get_dataset", "load_digits", "make_blobs",
           "make_classification"]

BLOCK_ROWS = 1024  # rows per independently seeded block (changing it changes the data)

_SPLITS = ("train", "test", "all")


def _local_range(n_samples, ctx):
    ctx = resolve_context(ctx)
    return DataPartitioner(n_samples, ctx.size).get_partition(ctx.rank)


def _model_rng(random_state):
    return np.random.default_rng(np.random.SeedSequence(random_state, spawn_key=(0,)))


def _generate_rows(start, stop, n_samples, n_classes, random_state, make_block):
    """Rows ``start:stop`` from the blocks that overlap them.

    ``make_block(rng, y)`` returns the features of one block given its
    labels. Block ``b``'s labels are ``(b * BLOCK_ROWS + arange(rows)) %
    n_classes`` permuted within the block (``rows`` is ``BLOCK_ROWS`` except
    in the last block), so the class counts differ by at most one.
    """
    X_parts, y_parts = [], []
    if start >= stop:
        return X_parts, y_parts
    for b in range(start // BLOCK_ROWS, -(-stop // BLOCK_ROWS)):
        first = b * BLOCK_ROWS
        rows = min(BLOCK_ROWS, n_samples - first)
        rng = np.random.default_rng(np.random.SeedSequence(random_state, spawn_key=(1, b)))
        y = rng.permutation((first + np.arange(rows, dtype=np.int64)) % n_classes)
        X = make_block(rng, y)
        keep = slice(max(start - first, 0), min(stop - first, rows))
        X_parts.append(X[keep])
        y_parts.append(y[keep])
    return X_parts, y_parts


def _finish(X_parts, y_parts, n_features, dtype):
    if not X_parts:
        return np.empty((0, n_features), dtype=dtype), np.empty(0, dtype=np.int64)
    return np.concatenate(X_parts).astype(dtype, copy=False), np.concatenate(y_parts)


def _check_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise InvalidArgumentError(
            f"dtype={dtype} should be a floating dtype such as float32 or float64")
    return dtype


def make_blobs(n_samples=100, n_features=2, centers=3, *, cluster_std=1.0,
               center_box=(-10.0, 10.0), random_state=0, ctx=None, dtype=np.float64):
    """This rank's rows of isotropic Gaussian blobs (as scikit-learn's ``make_blobs``).

    Parameters
    ----------
    n_samples : int, default=100
        Global number of rows, >= 0.
    n_features : int, default=2
    centers : int or array-like of shape (n_centers, n_features), default=3
        The number of centres, drawn uniformly from ``center_box``, or the
        centres themselves.
    cluster_std : float, default=1.0
        Standard deviation of every blob, >= 0.
    center_box : (float, float), default=(-10.0, 10.0)
    random_state : int, default=0
        Non-negative; the same on every rank (None is refused).
    ctx : Context, optional
    dtype : floating dtype, default=float64
        The dtype of ``X_local``.

    Returns
    -------
    X_local : ndarray of shape (n_local, n_features)
        This rank's rows (``DataPartitioner(n_samples).get_partition(rank)``).
    y_local : ndarray of int64, shape (n_local,)
        Their blob index, in ``0..n_centers-1``; the classes are balanced.
    """
    n_samples = check_int(n_samples, "n_samples", minimum=0)
    n_features = check_int(n_features, "n_features", minimum=1)
    random_state = check_seed(random_state, "random_state")
    dtype = _check_dtype(dtype)
    cluster_std = float(cluster_std)
    if not cluster_std >= 0:
        raise InvalidArgumentError(f"cluster_std={cluster_std} should be >= 0")
    if np.ndim(centers) == 0:
        n_centers = check_int(centers, "centers", minimum=1,
                              hint=" (a number of centres, or their coordinates)")
        low, high = (float(v) for v in center_box)
        if not low <= high:
            raise InvalidArgumentError(
                f"center_box={center_box!r} should be (low, high) with low <= high")
        centre_points = _model_rng(random_state).uniform(low, high, size=(n_centers, n_features))
    else:
        centre_points = np.asarray(centers, dtype=np.float64)
        if (centre_points.ndim != 2 or centre_points.shape[1] != n_features
                or not len(centre_points)):
            raise InvalidArgumentError(f"centers of shape {centre_points.shape} should have shape "
                                       f"(n_centers >= 1, n_features={n_features})")
        n_centers = len(centre_points)

    def block(rng, y):
        return centre_points[y] + cluster_std * rng.standard_normal((len(y), n_features))

    start, stop = _local_range(n_samples, ctx)
    return _finish(*_generate_rows(start, stop, n_samples, n_centers, random_state, block),
                   n_features, dtype)


def make_classification(n_samples=100, n_features=20, n_classes=2, *, n_informative=2,
                        n_redundant=2, class_sep=1.0, random_state=0, ctx=None,
                        dtype=np.float64):
    """This rank's rows of a random n-class problem (after scikit-learn's ``make_classification``).

    Class ``c`` is a Gaussian cluster around a vertex of the hypercube
    ``[-class_sep, class_sep] ** n_informative`` (distinct vertices), with
    its own random covariance. The features are, in a fixed random column
    order: ``n_informative`` informative ones, ``n_redundant`` random linear
    combinations of them, and ``n_features - n_informative - n_redundant``
    standard-normal noise features.

    Parameters
    ----------
    n_samples : int, default=100
        Global number of rows, >= 0.
    n_features : int, default=20
    n_classes : int, default=2
        >= 2 and at most ``2 ** n_informative``.
    n_informative : int, default=2
    n_redundant : int, default=2
        ``n_informative + n_redundant <= n_features``.
    class_sep : float, default=1.0
        Half the hypercube's side; larger is easier.
    random_state : int, default=0
        Non-negative; the same on every rank (None is refused).
    ctx : Context, optional
    dtype : floating dtype, default=float64

    Returns
    -------
    X_local : ndarray of shape (n_local, n_features)
    y_local : ndarray of int64, shape (n_local,)
        In ``0..n_classes-1``; the classes are balanced.
    """
    n_samples = check_int(n_samples, "n_samples", minimum=0)
    n_features = check_int(n_features, "n_features", minimum=1)
    n_informative = check_int(n_informative, "n_informative", minimum=1)
    n_redundant = check_int(n_redundant, "n_redundant", minimum=0)
    n_classes = check_int(n_classes, "n_classes", minimum=2)
    random_state = check_seed(random_state, "random_state")
    dtype = _check_dtype(dtype)
    class_sep = float(class_sep)
    if not class_sep >= 0:
        raise InvalidArgumentError(f"class_sep={class_sep} should be >= 0")
    if n_informative + n_redundant > n_features:
        raise InvalidArgumentError(
            f"n_informative={n_informative} + n_redundant={n_redundant} should be "
            f"<= n_features={n_features}")
    if n_classes > 2 ** n_informative:
        raise InvalidArgumentError(f"n_classes={n_classes} should be <= 2 ** n_informative="
                                   f"{2 ** n_informative}; raise n_informative")
    n_noise = n_features - n_informative - n_redundant
    rng = _model_rng(random_state)
    # distinct vertices: the class codes' bits in the first `bits` dimensions,
    # random signs in the others
    bits = (n_classes - 1).bit_length()
    codes = rng.permutation(2 ** bits)[:n_classes]
    signs = rng.choice([-1.0, 1.0], size=(n_classes, n_informative))
    signs[:, :bits] = 2.0 * ((codes[:, None] >> np.arange(bits)) & 1) - 1.0
    centroids = class_sep * signs
    covariance_factors = rng.uniform(-1.0, 1.0, size=(n_classes, n_informative, n_informative))
    redundant = rng.uniform(-1.0, 1.0, size=(n_informative, n_redundant))
    column_order = rng.permutation(n_features)

    def block(rng, y):
        z = rng.standard_normal((len(y), n_informative))
        informative = centroids[y] + np.einsum("ni,nij->nj", z, covariance_factors[y])
        noise = rng.standard_normal((len(y), n_noise))
        X = np.concatenate([informative, informative @ redundant, noise], axis=1)
        return X[:, column_order]

    start, stop = _local_range(n_samples, ctx)
    return _finish(*_generate_rows(start, stop, n_samples, n_classes, random_state, block),
                   n_features, dtype)


def load_digits(ctx=None, *, split="train", test_size=0.25, random_state=0, dtype=np.float64):
    """This rank's rows of scikit-learn's handwritten digits (8x8 images, 10 classes).

    The 1797 images are split into train and test sets by a stratified
    shuffle from ``random_state`` (the same on every rank); each rank keeps
    its contiguous partition of the chosen split. Pixels are scaled from
    0..16 to [0, 1].

    Parameters
    ----------
    ctx : Context, optional
    split : {"train", "test", "all"}, default="train"
        ``"all"`` is the whole set in scikit-learn's order (no shuffle).
    test_size : float, default=0.25
        Fraction of the images in the test split, in (0, 1).
    random_state : int, default=0
    dtype : floating dtype, default=float64

    Returns
    -------
    X_local : ndarray of shape (n_local, 64), values in [0, 1]
    y_local : ndarray of int64, shape (n_local,)
        The digit, 0..9.
    """
    if split not in _SPLITS:
        raise InvalidArgumentError(f"split={split!r} should be one of {_SPLITS}")
    test_size = float(test_size)
    if not 0.0 < test_size < 1.0:
        raise InvalidArgumentError(f"test_size={test_size} should be in (0, 1), e.g. 0.25")
    random_state = check_seed(random_state, "random_state")
    dtype = _check_dtype(dtype)
    X, y = sklearn_digits(return_X_y=True)
    if split != "all":
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=test_size, random_state=random_state, stratify=y)
        X, y = (X_train, y_train) if split == "train" else (X_test, y_test)
    start, stop = _local_range(len(X), ctx)
    return (X[start:stop] / 16.0).astype(dtype, copy=False), y[start:stop].astype(np.int64)


_REGISTRY = {"digits": load_digits, "blobs": make_blobs,
             "classification": make_classification}

DATASETS = tuple(_REGISTRY)
"""Names accepted by :func:`get_dataset` (``hpcdist train --dataset NAME``)."""


def get_dataset(name, ctx=None, **kwargs):
    """This rank's rows of the built-in data set ``name``.

    Parameters
    ----------
    name : {"digits", "blobs", "classification"}
        :func:`load_digits`, :func:`make_blobs` or :func:`make_classification`.
    ctx : Context, optional
    **kwargs
        Passed on to that function (e.g. ``n_samples=10_000``, ``split="test"``).

    Returns
    -------
    X_local : ndarray of shape (n_local, n_features)
    y_local : ndarray of int64, shape (n_local,)
    """
    try:
        function = _REGISTRY[name]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            f"dataset name={name!r} is not known; use one of {DATASETS}") from None
    return function(ctx=ctx, **kwargs)
