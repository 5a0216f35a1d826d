"""Distributed K-means (Lloyd) with scikit-learn's semantics: :class:`KMeans`.

Each rank passes its own rows. One iteration is one fused Numba pass over
the local rows (GEMM distances, argmin, per-cluster sums) and one packed
allreduce; the centers are identical on every rank. With the same initial
centers the result is scikit-learn's ``KMeans(algorithm="lloyd")`` (same
centers, inertia and ``n_iter_``), whatever the number of ranks.
"""

import numbers
import warnings

import numpy as np
from sklearn.base import ClassNamePrefixFeaturesOutMixin, ClusterMixin, TransformerMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils import check_array

from ..._arrays import array_module, is_cupy
from ...comm import allreduce
from ...comm.checks import mark_raised_on_every_rank, validated_on_every_rank
from ...exceptions import InvalidArgumentError
from ...kernels._arrays import aligned_empty
from .._base import DistributedEstimator, accepts_local_keywords, shared_seed
from .._validation import check_local_data
from .initialization import Shards, kmeans_parallel, kmeans_plusplus, random_rows
from .kernels import assign
from .lloyd import (
    LloydStart,
    LloydState,
    global_mean_variance,
    lloyd_iteration,
    lloyd_labels,
    run_lloyd,
    same_clustering,
)

__all__ = ["KMeans"]

_INIT_METHODS = ("k-means++", "k-means||", "random")
_SEED_BOUND = np.iinfo(np.int32).max  # seeds of the initialisations are below it


#: attributes a fit sets (``fit`` removes them first; a state without centers as well)
_FITTED = ("cluster_centers_", "labels_", "inertia_", "n_iter_", "_centered")
_PREPARED = ("n_features_in_", "_n_features_out", "_X_mean", "_tol")


def _is_array_init(init):
    return not isinstance(init, str) and hasattr(init, "__len__")


def _rng_tree(rng):
    """A RandomState's state as plain values (MT19937 key, position, cached Gaussian)."""
    _, key, pos, has_gauss, cached_gaussian = rng.get_state()
    return {"key": np.array(key, dtype=np.uint32), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}


def _rng_from_tree(tree):
    rng = np.random.RandomState(0)
    rng.set_state(("MT19937", np.array(tree["key"], dtype=np.uint32), int(tree["pos"]),
                   int(tree["has_gauss"]), float(tree["cached_gaussian"])))
    return rng


def _copy_tree(tree):
    """A copy of a nested dict of arrays and scalars (the arrays copied)."""
    if isinstance(tree, dict):
        return {key: _copy_tree(value) for key, value in tree.items()}
    if isinstance(tree, np.ndarray):
        return tree.copy()
    return tree


def _centered_copy(X, mean):
    """``X - mean`` as a new C-contiguous array in ``mean``'s dtype (the kernels need C order;
    host rows start on a 64-byte boundary, which the vector kernels load fastest)."""
    xp = array_module(X)
    if xp is np:
        out = aligned_empty(X.shape, mean.dtype)
    else:
        out = xp.empty(X.shape, dtype=mean.dtype)
    xp.subtract(X, xp.asarray(mean), out=out)
    return out


class KMeans(ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin,
             DistributedEstimator):
    """K-means clustering of rows spread over MPI ranks (Lloyd's algorithm).

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "k-means||", "random"} or array-like of shape \
(n_clusters, n_features), default="k-means++"
        ``"k-means++"``: scikit-learn's greedy k-means++ (``2 + log(k)``
        D^2-sampled trials per center), over the rows of all ranks.
        ``"k-means||"``: Bahmani et al.'s scalable k-means++ (5 rounds of
        oversampling with ``l = 2k``, then weighted k-means++ on the
        candidates). ``"random"``: distinct rows drawn uniformly. An array:
        the initial centers (the same on every rank).
    n_init : "auto" or int, default="auto"
        Runs from different initial centers; the one with the lowest global
        inertia is kept. ``"auto"``: 10 for ``"random"``, else 1.
    max_iter : int, default=300
    tol : float, default=1e-4
        Stop when the squared Frobenius norm of the center update is at most
        ``tol`` times the mean per-feature variance of the global data (or
        when no label changes).
    random_state : int in [0, 2**32 - 1], RandomState, Generator or None
        Seeds the initialization. With None, a RandomState or a Generator, rank 0's draw
        is used on every rank.
    comm : None, Context or mpi4py communicator
    verbose : int, default=0
        Rank 0 prints the inertia of each iteration.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        Identical on every rank, in the dtype of the training data.
    labels_ : ndarray of int32, shape (n_local,)
        The cluster of each of this rank's rows.
    inertia_ : float
        Global sum of squared distances of the rows to their centers.
    n_iter_ : int
    n_features_in_ : int

    Notes
    -----
    Float32 data is clustered in float32 (distances through an sgemm); the
    per-cluster sums and the inertia are accumulated in float64. As in
    scikit-learn the data are centered on their (global) mean first, which
    costs one copy of the local rows. CuPy arrays are clustered on their GPU
    (plain CuPy array expressions; ``labels_`` and ``predict``'s result stay
    on the device, the centers are NumPy arrays).

    Examples
    --------
    >>> X_local, _ = hpcdist.data.make_blobs(10_000, 2, centers=3)   # doctest: +SKIP
    >>> km = KMeans(3, random_state=0).fit(X_local)                  # doctest: +SKIP
    >>> km.cluster_centers_        # the same on every rank          # doctest: +SKIP
    """

    _model_attribute = "cluster_centers_"
    _fit_attributes = _FITTED + _PREPARED + ("_fit_progress",)
    _state_keys = ("mean", "tol", "n_features_in")

    def __init__(self, n_clusters=8, *, init="k-means++", n_init="auto", max_iter=300,
                 tol=1e-4, random_state=None, comm=None, verbose=0):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.comm = comm
        self.verbose = verbose

    # -- validation -----------------------------------------------------------------------
    def _check_params(self):
        """Hyperparameters (the same on every rank, so every rank raises the same)."""
        name = type(self).__name__
        for option, value in (("n_clusters", self.n_clusters), ("max_iter", self.max_iter)):
            if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < 1:
                raise InvalidArgumentError(f"{name}: {option}={value!r} should be an integer >= 1")
        if not (isinstance(self.tol, numbers.Real) and self.tol >= 0):
            raise InvalidArgumentError(f"{name}: tol={self.tol!r} should be a number >= 0")
        if self.n_init != "auto" and not (isinstance(self.n_init, numbers.Integral)
                                          and not isinstance(self.n_init, bool)
                                          and self.n_init >= 1):
            raise InvalidArgumentError(
                f"{name}: n_init={self.n_init!r} should be 'auto' or an integer "
                ">= 1")
        if not _is_array_init(self.init) and self.init not in _INIT_METHODS:
            raise InvalidArgumentError(f"{name}: init={self.init!r} should be one of "
                                       f"{list(_INIT_METHODS)} or an array of shape (n_clusters, "
                                       "n_features)")
        if _is_array_init(self.init):
            n_init = 1
            if self.n_init not in ("auto", 1):
                warnings.warn(f"Explicit initial center position passed: performing only one "
                              f"init in {name} instead of n_init={self.n_init}.",
                              RuntimeWarning, stacklevel=5)
        elif self.n_init == "auto":
            n_init = 10 if self.init == "random" else 1
        else:
            n_init = int(self.n_init)
        return n_init

    def _validate(self, X, ctx, name, fitted):
        data = check_local_data(ctx, X, name=name, min_local_rows=0,
                                n_features=self.n_features_in_ if fitted else None)
        if data.n_global < self.n_clusters:
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"n_samples={data.n_global} should be >= "
                f"n_clusters={self.n_clusters}."))
        return data

    def _array_init(self, X, ctx):
        """The init array, checked on every rank (the agreement check at the start of
        fit and train_epoch has already found it equal on every rank)."""
        with validated_on_every_rank(ctx):
            init = check_array(self.init, dtype=X.dtype, copy=True, order="C",
                               input_name="init")
            if init.shape != (self.n_clusters, X.shape[1]):
                raise InvalidArgumentError(
                    f"The shape of the initial centers {init.shape} does not "
                    f"match the number of clusters {self.n_clusters} and the "
                    f"number of features {X.shape[1]} of the data; pass an "
                    f"array of shape ({self.n_clusters}, {X.shape[1]}).")
        return init

    # -- fitting ----------------------------------------------------------------------------
    def _prepare(self, data, ctx, resumed=False):
        """Global statistics, the centered rows and everything an initialization needs.

        ``resumed``: the mean and tolerance come from the loaded state (as fitted).
        """
        X = data.X
        if resumed:
            self._X_mean = np.asarray(self._X_mean, dtype=X.dtype)
        else:
            mean, variance = global_mean_variance(X, ctx)
            self._tol = float(np.mean(variance) * self.tol) if self.tol else 0.0
            self._X_mean = mean.astype(X.dtype)
        Xc = _centered_copy(X, self._X_mean)
        shards = Shards(data.counts, ctx.rank)
        init = self._array_init(X, ctx) if _is_array_init(self.init) else None
        if init is not None:
            init = init - self._X_mean
        self.n_features_in_ = data.n_features
        self._n_features_out = self.n_clusters
        return Xc, shards, init

    def _initial_centers(self, Xc, init, rng, shards, ctx):
        if init is not None:
            return init.copy()
        if self.init == "k-means++":
            return kmeans_plusplus(Xc, self.n_clusters, rng, shards, ctx)
        if self.init == "k-means||":
            return kmeans_parallel(Xc, self.n_clusters, rng, shards, ctx)
        return random_rows(Xc, self.n_clusters, rng, shards, ctx)

    @accepts_local_keywords
    def fit(self, X, y=None, *, checkpoint=None, checkpoint_every=None):
        """Cluster the rows of all ranks.

        Parameters
        ----------
        X : array-like of shape (n_local, n_features)
            This rank's rows (float32 is kept, other numbers become float64;
            a rank may have no rows).
        y : ignored
        checkpoint : hpcdist.checkpoint.CheckpointManager, optional
            Save the full state of the fit there (and resume from it when it
            already holds a checkpoint). A stop signal (SIGUSR1, SIGTERM) on
            any rank then saves after the current Lloyd iteration and exits
            with code 75. Resumed on as many ranks, the fit ends bitwise as
            an uninterrupted one (the state is replicated: it also resumes on
            any other number of ranks). A finished fit resumed with a larger
            ``max_iter`` goes on from the first run that ``max_iter`` cut
            short, as a fit with that ``max_iter`` would have.
        checkpoint_every : int, optional
            Lloyd iterations between checkpoints, counted over all the
            ``n_init`` runs (default: only at the end).

        Returns
        -------
        self
        """
        n_init, ctx, saving = self._start_fit(X, checkpoint, checkpoint_every)
        with saving:
            resumed = saving.resume() is not None
            data = self._validate(X, ctx, f"{type(self).__name__}.fit", fitted=resumed)
            Xc, shards, init = self._prepare(data, ctx, resumed=resumed)
            if resumed and getattr(self, "_fit_progress", None) is None:
                self._label_loaded_centers(Xc)  # a state_dict() of a fitted model: done
                return self
            if not resumed:
                self._fit_progress = {
                    "progress": 0, "max_iter": int(self.max_iter),
                    "position": {"run": 0, "rng": _rng_tree(np.random.RandomState(
                        shared_seed(self.random_state, ctx, _SEED_BOUND)))}}
            else:
                self._rewind_for_max_iter()
            self._fit_runs(Xc, init, shards, ctx, n_init, saving)
            saving.finish(self._fit_progress["progress"])
        del self._fit_progress
        return self

    def _rewind_for_max_iter(self):
        """Resumed with a larger max_iter: go back to the first run the old one cut short."""
        fit = self._fit_progress
        rewind = fit.get("rewind")
        if rewind is not None and int(self.max_iter) > int(fit["max_iter"]):
            fit["position"] = rewind
            del fit["rewind"]
        if "rewind" not in fit:
            fit["max_iter"] = int(self.max_iter)

    def _fit_runs(self, Xc, init, shards, ctx, n_init, saving):
        """The ``n_init`` runs from ``self._fit_progress`` on; sets the fitted attributes.

        ``self._fit_progress`` (``state_dict()["fit"]``, laid out there) is
        kept up to date at every Lloyd iteration, the checkpoint boundary.
        """
        fit = self._fit_progress
        max_iter = int(self.max_iter)
        position = fit["position"]
        rng = _rng_from_tree(position["rng"])
        best = position.get("best")
        best_labels = None if best is None else self._labels_of_run(Xc, best)
        done = False
        while int(position["run"]) < n_init:
            lloyd = position.get("lloyd")
            if lloyd is None:
                centers = self._initial_centers(Xc, init, rng, shards, ctx)
                position = {**position, "rng": _rng_tree(rng)}
                fit["position"] = position
                start = None
                if self.verbose and ctx.rank == 0:
                    print("Initialization complete", flush=True)
            else:
                centers = lloyd["centers"]
                start = LloydStart(lloyd["previous"], int(lloyd["n_iter"]))
            first = 0 if start is None else start.n_iter
            base = int(fit["progress"])

            def on_iteration(n_iter, current, previous, position=position, base=base,
                             first=first):
                position["lloyd"] = {"centers": current.copy(), "previous": previous.copy(),
                                     "n_iter": int(n_iter)}
                fit["progress"] = base + n_iter - first
                saving.end_of_epoch(fit["progress"])

            run = run_lloyd(Xc, centers, shards, ctx, max_iter=max_iter, tol=self._tol,
                            verbose=bool(self.verbose), start=start,
                            on_iteration=on_iteration if saving.enabled else None)
            labels, inertia, centers, n_iter, counts = run
            if run.cut and "rewind" not in fit:
                fit["rewind"] = {"run": int(position["run"]), "rng": position["rng"],
                                 **({} if best is None else {"best": best}),
                                 "lloyd": {"centers": centers.copy(),
                                           "previous": run.previous.copy(),
                                           "n_iter": int(n_iter)}}
                fit["max_iter"] = max_iter
            if best is None or (inertia < best["inertia"] and not same_clustering(
                    labels, best_labels, self.n_clusters, ctx)):
                best = {"centers": centers, "inertia": float(inertia), "n_iter": int(n_iter),
                        "counts": np.asarray(counts, dtype=np.float64),
                        "label_centers": run.previous if run.strict else centers,
                        "strict": bool(run.strict)}
                best_labels = labels
            position = {"run": int(position["run"]) + 1, "rng": position["rng"], "best": best}
            fit["position"] = position
            fit["progress"] = base + n_iter - first
            if int(position["run"]) >= n_init:  # the final state is the one saved
                self._set_fitted(best, best_labels, ctx)
                done = True
            if n_iter > first:
                saving.end_of_epoch(fit["progress"])
        if not done:  # resumed after the last run
            self._set_fitted(best, best_labels, ctx)

    def _labels_of_run(self, Xc, run):
        """This rank's labels of a finished run, with the kernel that made them."""
        if run["strict"]:  # the last Lloyd pass's labels
            return lloyd_labels(Xc, run["label_centers"])
        xp = array_module(Xc)
        labels = xp.empty(len(Xc), dtype=xp.int32)
        centers = np.ascontiguousarray(run["label_centers"], dtype=Xc.dtype)
        assign(Xc, centers, labels, counts=np.zeros(self.n_clusters))
        return labels

    def _set_fitted(self, best, labels, ctx):
        counts = best["counts"]
        distinct = int((counts > 0).sum())
        if distinct < self.n_clusters and ctx.rank == 0:
            warnings.warn(f"Number of distinct clusters ({distinct}) found smaller than "
                          f"n_clusters ({self.n_clusters}). Possibly due to duplicate points "
                          "in X.", ConvergenceWarning, stacklevel=5)
        centers = np.asarray(best["centers"], dtype=self._X_mean.dtype)
        self._centered = centers
        self.cluster_centers_ = centers + self._X_mean
        self.labels_ = labels
        self.inertia_ = float(best["inertia"])
        self.n_iter_ = int(best["n_iter"])

    def _label_loaded_centers(self, Xc):
        """``labels_`` for a fitted model loaded without its fit state (its final centers)."""
        xp = array_module(Xc)
        self.labels_ = xp.empty(len(Xc), dtype=xp.int32)
        assign(Xc, np.ascontiguousarray(self._centered, dtype=Xc.dtype), self.labels_)

    @accepts_local_keywords
    def fit_predict(self, X, y=None, **fit_params):
        """Fit, then return ``labels_`` (this rank's rows)."""
        return self.fit(X, y, **fit_params).labels_

    # -- inference ------------------------------------------------------------------------
    def _check_test_data(self, X):
        return self._check_rows(X, dtype=[np.float64, np.float32], order="C")

    def _assign(self, X, labels):
        centers = np.ascontiguousarray(self.cluster_centers_, dtype=X.dtype)
        return assign(X, centers, labels)

    @accepts_local_keywords
    def predict(self, X):
        """Index of the nearest center for each of the rows given (local, no communication).

        Returns
        -------
        labels : ndarray of int32, shape (n_rows,)
        """
        X = self._check_test_data(X)
        xp = array_module(X)
        labels = xp.empty(len(X), dtype=xp.int32)
        self._assign(X, labels)
        return labels

    @accepts_local_keywords
    def transform(self, X):
        """Euclidean distance of each row given to every center, shape (n_rows, n_clusters)."""
        X = self._check_test_data(X)
        centers = self.cluster_centers_.astype(X.dtype, copy=False)
        if is_cupy(X):
            cupy = array_module(X)
            centers = cupy.asarray(centers)
            squared = ((X * X).sum(axis=1)[:, None] - 2 * (X @ centers.T)
                       + (centers * centers).sum(axis=1)[None, :])
            return cupy.sqrt(cupy.maximum(squared, 0))
        return euclidean_distances(X, centers)

    @accepts_local_keywords
    def score(self, X, y=None):
        """Opposite of the global inertia of the rows of all ranks (collective)."""
        ctx = self._context()
        with validated_on_every_rank(ctx):  # a bad input on one rank fails all
            X = self._check_test_data(X)
        xp = array_module(X)
        inertia = self._assign(X, xp.empty(len(X), dtype=xp.int32))
        if ctx.size > 1:
            inertia = float(allreduce(np.array([inertia]), ctx=ctx)[0])
        return -float(inertia)

    # -- trainer protocol ----------------------------------------------------------------------
    @accepts_local_keywords
    def train_epoch(self, X, y=None):
        """One Lloyd iteration over this rank's rows (initializing on the first call).

        The first call validates, centers and initializes like :meth:`fit`
        (one initialization). ``labels_`` and ``inertia_`` are those of the
        centers before the update; ``cluster_centers_`` the updated ones.
        Calls from the same initial centers reproduce :meth:`fit`'s centers.

        Returns
        -------
        self
        """
        fitted, ctx = self._start_epoch(X)
        data = self._validate(X, ctx, f"{type(self).__name__}.train_epoch", fitted)
        if not fitted:
            Xc, shards, init = self._prepare(data, ctx)
            rng = np.random.RandomState(shared_seed(self.random_state, ctx, _SEED_BOUND))
            self._centered = self._initial_centers(Xc, init, rng, shards, ctx)
            self.n_iter_ = 0
        else:
            Xc = _centered_copy(data.X, self._X_mean)
            shards = Shards(data.counts, ctx.rank)
        labels = getattr(self, "labels_", None)
        if labels is None or len(labels) != len(Xc):
            labels = None
        state = LloydState(Xc, self._centered, labels)
        inertia, _, _, _ = lloyd_iteration(Xc, state, shards, ctx)
        self._centered = state.centers
        self.cluster_centers_ = state.centers + self._X_mean
        self.labels_ = state.labels
        self.inertia_ = inertia
        self.n_iter_ += 1
        return self

    def get_parameters(self):
        """The centers, flattened, as float64 (shape ``(n_clusters * n_features,)``)."""
        self._check_fitted()
        return self.cluster_centers_.astype(np.float64).ravel()

    def set_parameters(self, vector):
        """Load centers from a vector made by :meth:`get_parameters`."""
        self._check_fitted()
        shape = self.cluster_centers_.shape
        vector = self._parameter_vector(vector, shape[0] * shape[1],
                                        f"({shape[0]} centers x {shape[1]} features)")
        self._set_centers(vector.reshape(shape).astype(self.cluster_centers_.dtype))
        return self

    def _set_centers(self, centers):
        self.cluster_centers_ = centers
        mean = getattr(self, "_X_mean", np.zeros(centers.shape[1], centers.dtype))
        self._centered = (centers - mean).astype(centers.dtype)

    def state_dict(self):
        """The model, and a fit in progress, as a plain dict of arrays and scalars (no pickles).

        A fitted model: ``cluster_centers``, ``centered_centers``, ``mean``,
        ``tol``, ``inertia``, ``n_iter`` and ``n_features_in``. During a
        checkpointed :meth:`fit` (and after one was stopped) also ``"fit"``,
        everything it resumes from (before its last run ends, the state has
        only ``mean``, ``tol``, ``n_features_in`` and ``"fit"``)::

            progress   Lloyd iterations so far, all runs (the checkpoint step)
            max_iter   the max_iter that cut the ``rewind`` run short
            position   run        runs finished (the index of the one going on)
                       rng        the initialization's RandomState: key, pos,
                                  has_gauss, cached_gaussian
                       best       the best finished run: centers, inertia, n_iter,
                                  counts, label_centers, strict
                       lloyd      between two iterations of a run: its centers,
                                  previous (before the last update) and n_iter
            rewind     a position: the end of the first run max_iter cut short

        Centers are in the centered coordinates, in the data's dtype. Labels
        are local and never saved: they are recomputed from ``previous`` (or
        ``label_centers``) with the kernel that made them.
        """
        fit = getattr(self, "_fit_progress", None)
        if fit is None:
            self._check_fitted()
        if hasattr(self, "cluster_centers_"):
            state = {
                "cluster_centers": self.cluster_centers_.copy(),
                "centered_centers": np.asarray(self._centered).copy(),
                "mean": np.asarray(self._X_mean).copy(),
                "tol": float(self._tol),
                "inertia": float(getattr(self, "inertia_", np.nan)),
                "n_iter": int(getattr(self, "n_iter_", 0)),
                "n_features_in": int(self.n_features_in_),
            }
        else:
            state = {"mean": np.asarray(self._X_mean).copy(), "tol": float(self._tol),
                     "n_features_in": int(self.n_features_in_)}
        if fit is not None:
            state["fit"] = _copy_tree(fit)
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict` (``labels_`` is not restored: it is local)."""
        self._check_state(state)
        name = type(self).__name__
        if "cluster_centers" in state:
            centers = np.array(state["cluster_centers"])
            if centers.ndim != 2 or centers.shape[0] != self.n_clusters:
                raise InvalidArgumentError(
                    f"{name}.load_state_dict: cluster_centers of shape "
                    f"{centers.shape} do not fit n_clusters={self.n_clusters}")
            self.cluster_centers_ = centers
            self._centered = np.array(state["centered_centers"], dtype=centers.dtype)
            self._X_mean = np.array(state["mean"], dtype=centers.dtype)
            self.inertia_ = float(state["inertia"])
            self.n_iter_ = int(state["n_iter"])
        elif "fit" in state:  # a fit stopped before its last run ended
            for attribute in _FITTED:
                self.__dict__.pop(attribute, None)
            self._X_mean = np.array(state["mean"])
        else:
            raise InvalidArgumentError(f"{name}.load_state_dict: the state holds neither "
                                       "cluster_centers nor a fit in progress")
        self._tol = float(state["tol"])
        self.n_features_in_ = int(state["n_features_in"])
        self._n_features_out = self.n_clusters
        if "fit" in state:
            self._fit_progress = self._checked_fit_tree(state["fit"])
        else:
            self.__dict__.pop("_fit_progress", None)
        self.__dict__.pop("labels_", None)
        return self

    def _checked_fit_tree(self, fit):
        """A copy of a saved fit state, its centers checked against the estimator."""
        fit = _copy_tree(dict(fit))
        shape = (self.n_clusters, int(self._X_mean.shape[0]))
        for where in ("position", "rewind"):
            position = fit.get(where)
            if position is None:
                continue
            for part, keys in (("best", ("centers", "label_centers")),
                               ("lloyd", ("centers", "previous"))):
                for key in keys if part in position else ():
                    array = np.asarray(position[part][key])
                    if array.shape != shape:
                        raise InvalidArgumentError(
                            f"{type(self).__name__}.load_state_dict: fit/{where}/{part}/{key} "
                            f"has shape {array.shape}, expected {shape} (n_clusters="
                            f"{self.n_clusters})")
        return fit
