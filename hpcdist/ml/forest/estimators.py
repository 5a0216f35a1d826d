"""RandomForestClassifier and RandomForestRegressor over row-partitioned data.

Each rank passes its own rows to ``fit``; every rank ends up with the same
forest, and the same ``random_state`` gives the same forest at any number of
ranks (see :mod:`hpcdist.ml.forest` for how).
"""
import contextlib
import math
import warnings

import numba
import numpy as np
from sklearn.base import RegressorMixin
from tqdm.auto import tqdm

from ..._checks import check_bool
from ...comm import allreduce, broadcast
from ...comm.checks import mark_raised_on_every_rank, validated_on_every_rank
from ...exceptions import InvalidArgumentError
from .._base import (
    DistributedClassifierMixin,
    DistributedEstimator,
    accepts_local_keywords,
    shared_seed,
)
from .._scores import global_r2, one_target_per_row, row_weights
from .._validation import check_local_data
from ._hash_kernels import MAX_BOOTSTRAP_WEIGHT
from ._split_kernels import CRITERIA
from .binning import BinEdges, find_bin_edges
from .grow import NO_DEPTH_LIMIT, GrowSettings, grow_trees, training_rows
from .sampling import global_row_index
from .targets import FixedPointTarget, class_fractions
from .tree import Forest, ForestBuilder

__all__ = ["RandomForestClassifier", "RandomForestRegressor"]


class _Prepared:
    """One call's validated, binned rows and what the growth needs."""

    def __init__(self, Xb, target, global_index, n_global, y):
        self.Xb, self.target = Xb, target
        self.global_index, self.n_global, self.y = global_index, n_global, y


class _BaseForest(DistributedEstimator):
    """Shared machinery of the forests (see :class:`RandomForestClassifier`)."""

    _model_attribute = "forest_"
    _fit_attributes = ("forest_", "classes_", "oob_score_", "oob_decision_function_",
                       "oob_prediction_", "bin_edges_", "n_features_in_")
    _classification = False
    _criteria = ()
    _state_keys = ("forest", "bootstrapped", "bin_edges", "bin_edge_offsets", "n_features_in",
                   "max_features", "seed")

    def __init__(self, n_estimators=100, *, criterion=None, max_depth=None, min_samples_split=2,
                 min_samples_leaf=1, max_features=None, bootstrap=True, max_bins=256,
                 random_state=None, comm=None, verbose=0, oob_score=False, n_jobs=None,
                 trees_per_batch=16, local_threshold=None):
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.max_features = max_features
        self.bootstrap = bootstrap
        self.max_bins = max_bins
        self.random_state = random_state
        self.comm = comm
        self.verbose = verbose
        self.oob_score = oob_score
        self.n_jobs = n_jobs
        self.trees_per_batch = trees_per_batch
        self.local_threshold = local_threshold

    # -- hyperparameters ------------------------------------------------------------------
    def _name(self):
        return type(self).__name__

    def _check_params(self):
        self._check_int("n_estimators", 1)
        self._check_int("max_depth", 1, allow_none=True)
        self._check_int("min_samples_split", 2, allow_fraction=(0.0, 1.0))
        self._check_int("min_samples_leaf", 1, allow_fraction=(0.0, 0.5))
        self._check_int("trees_per_batch", 1)
        self._check_int("local_threshold", 0, allow_none=True)
        max_bins = self._check_int("max_bins", 2)
        if max_bins > 256:
            raise InvalidArgumentError(
                f"{self._name()}: max_bins={max_bins} should be <= 256 (bins are "
                "stored as uint8)")
        if self.criterion not in self._criteria:
            raise InvalidArgumentError(
                f"{self._name()}: criterion={self.criterion!r} is not supported; "
                f"choose one of {list(self._criteria)}")
        for option in ("bootstrap", "oob_score"):
            check_bool(getattr(self, option), f"{self._name()}: {option}")
        if self.oob_score and not self.bootstrap:
            raise InvalidArgumentError(
                f"{self._name()}: oob_score=True needs bootstrap=True (without a "
                "bootstrap no row is out of bag)")
        if self.n_jobs is not None and (not isinstance(self.n_jobs, (int, np.integer))
                                        or self.n_jobs == 0):
            raise InvalidArgumentError(
                f"{self._name()}: n_jobs={self.n_jobs!r} should be None, a positive "
                "int, or -1 for all of this rank's Numba threads")

    def _resolve_max_features(self, n_features):
        value = self.max_features
        name = self._name()
        choices = ('an int in [1, n_features], a float in (0, 1], "sqrt", "log2" or None')
        if value is None:
            return n_features
        if isinstance(value, str):
            if value == "sqrt":
                return max(1, int(math.sqrt(n_features)))
            if value == "log2":
                return max(1, int(math.log2(n_features)))
            raise InvalidArgumentError(
                f"{name}: max_features={value!r} is not understood; pass {choices}")
        if isinstance(value, (bool, np.bool_)):
            raise InvalidArgumentError(
                f"{name}: max_features={value!r} is not understood; pass {choices}")
        if isinstance(value, (int, np.integer)):
            if not 1 <= value <= n_features:
                raise InvalidArgumentError(
                    f"{name}: max_features={value} should be in [1, n_features="
                    f"{n_features}]; pass {choices}")
            return int(value)
        if isinstance(value, (float, np.floating)):
            if not 0.0 < value <= 1.0:
                raise InvalidArgumentError(
                    f"{name}: max_features={value} should be a fraction in (0, 1]; "
                    f"pass {choices}")
            return max(1, int(value * n_features))
        raise InvalidArgumentError(
            f"{name}: max_features={value!r} is not understood; pass {choices}")

    def _min_counts(self, n_global):
        split, leaf = self.min_samples_split, self.min_samples_leaf
        if isinstance(split, (float, np.floating)):
            split = max(2, math.ceil(split * n_global))
        if isinstance(leaf, (float, np.floating)):
            leaf = max(1, math.ceil(leaf * n_global))
        return int(split), int(leaf)

    @contextlib.contextmanager
    def _threads(self):
        """Numba threads limited to ``n_jobs`` inside the block (-1 or None: unchanged)."""
        if self.n_jobs is None or self.n_jobs < 0:
            yield
            return
        before = numba.get_num_threads()
        numba.set_num_threads(max(1, min(int(self.n_jobs), numba.config.NUMBA_NUM_THREADS)))
        try:
            yield
        finally:
            numba.set_num_threads(before)

    # -- subclass hooks -------------------------------------------------------------------
    def _encode_targets(self, data, y, ctx, first):
        raise NotImplementedError

    def _to_values(self, stats):
        raise NotImplementedError

    def _channels(self):
        raise NotImplementedError

    # -- validation and binning -----------------------------------------------------------
    def _prepare(self, X, y, ctx, first):
        """Validate this rank's rows on every rank, bin them, code the targets."""
        name = f"{self._name()}.fit"
        data = check_local_data(ctx, X, y, name=name, classification=self._classification,
                                y_required=True, min_local_rows=0,
                                n_features=None if first else self.n_features_in_)
        if data.n_global == 0:
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"{name}: got 0 rows on all {ctx.size} rank(s) together; pass at "
                "least 1 sample"))
        if first:
            self.n_features_in_ = data.n_features
            try:  # the width and the parameters agree across ranks: so does the outcome
                self._max_features = self._resolve_max_features(data.n_features)
            except InvalidArgumentError as error:
                raise mark_raised_on_every_rank(error) from None
            self._seed = np.uint64(shared_seed(self.random_state, ctx, np.iinfo(np.int64).max))
        global_index = global_row_index(data.counts, ctx.rank)
        if first:
            self.bin_edges_ = find_bin_edges(ctx, data.X, global_index, data.n_global,
                                             int(self.max_bins), self._seed)
        target = self._encode_targets(data, data.y, ctx, first)
        Xb = self.bin_edges_.transform(data.X)
        return _Prepared(Xb, target, global_index, data.n_global, data.y)

    def _settings(self, prepared):
        split, leaf = self._min_counts(prepared.n_global)
        return GrowSettings(
            self.bin_edges_.n_bins, self._max_features, self._channels(),
            CRITERIA[self.criterion],
            NO_DEPTH_LIMIT if self.max_depth is None else int(self.max_depth), split, leaf,
            self.local_threshold, self._seed, self.bootstrap, self.bin_edges_, self._to_values)

    # -- training -------------------------------------------------------------------------
    @accepts_local_keywords
    def fit(self, X, y=None, *, checkpoint=None, checkpoint_every=None):
        """Grow ``n_estimators`` trees on the rows of all ranks.

        Parameters
        ----------
        X : array-like of shape (n_local, n_features)
            This rank's rows (ranks may hold different numbers of rows, zero included).
        y : array-like of shape (n_local,)
            This rank's targets; required (None raises a ValueError saying so).
        checkpoint : hpcdist.checkpoint.CheckpointManager, optional
            Save the forest grown so far there (and resume from it when it
            already holds a checkpoint: the finished forest is the same as
            without interruption). A stop signal (SIGUSR1, SIGTERM) saves
            after the current batch of trees and exits with code 75.
        checkpoint_every : int, optional
            Batches of ``trees_per_batch`` trees between checkpoints
            (default: only at the end).

        Returns
        -------
        self
        """
        _, ctx, saving = self._start_fit(X, checkpoint, checkpoint_every)
        batch = int(self.trees_per_batch)
        with saving:
            resumed = saving.resume() is not None
            prepared = self._prepare(X, y, ctx, first=not resumed)
            if not resumed:
                self.forest_ = Forest.empty(self._n_values())
                self._bootstrapped = np.zeros(0, dtype=np.uint8)
            settings = self._settings(prepared)
            rows = training_rows(ctx, prepared.Xb, prepared.target, prepared.global_index,
                                 prepared.n_global, settings)
            grown = self.forest_.n_trees
            built = ForestBuilder(self._n_values(), max(grown, int(self.n_estimators)))
            built.append(self.forest_)
            flags = [self._bootstrapped]
            with self._threads():
                for start in tqdm(range(grown, int(self.n_estimators), batch), desc=self._name(),
                                  unit="batch", disable=not (self.verbose and ctx.rank == 0)):
                    trees = np.arange(start, min(start + batch, int(self.n_estimators)))
                    flags.append(grow_trees(ctx, rows, trees, settings, built))
                    if saving.enabled:  # the state to save holds every tree so far
                        self.forest_ = built.forest()
                        self._bootstrapped = np.concatenate(flags)
                    saving.end_of_epoch(-(-int(trees[-1] + 1) // batch))
                self.forest_ = built.forest()
                self._bootstrapped = np.concatenate(flags)
                saving.finish(-(-self.forest_.n_trees // batch))
                if self.oob_score:
                    self._set_oob(prepared, ctx)
        return self

    @accepts_local_keywords
    def train_epoch(self, X, y=None):
        """Grow the next ``trees_per_batch`` trees (up to ``n_estimators``; then a no-op).

        The first call validates, places the bin edges and fixes the classes
        (or the target coding); later calls reuse them.

        Returns
        -------
        self
        """
        fitted, ctx = self._start_epoch(X)
        prepared = self._prepare(X, y, ctx, first=not fitted)
        if not fitted:
            self.forest_ = Forest.empty(self._n_values())
            self._bootstrapped = np.zeros(0, dtype=np.uint8)
        start = self.forest_.n_trees
        stop = min(start + int(self.trees_per_batch), int(self.n_estimators))
        if stop > start:
            settings = self._settings(prepared)
            rows = training_rows(ctx, prepared.Xb, prepared.target, prepared.global_index,
                                 prepared.n_global, settings)
            built = ForestBuilder(self._n_values(), stop - start)
            with self._threads():
                flags = grow_trees(ctx, rows, np.arange(start, stop), settings, built)
            self.forest_ = self.forest_.concatenate(built.forest())
            self._bootstrapped = np.concatenate([self._bootstrapped, flags])
        return self

    # -- inference ------------------------------------------------------------------------
    def _mean_values(self, X):
        X = self._check_rows(X, dtype=(np.float64, np.float32), ensure_min_samples=0)
        if self.forest_.n_trees == 0:
            raise InvalidArgumentError(
                f"{self._name()}: no tree grown yet; call fit or train_epoch first")
        with self._threads():
            return self.forest_.mean_values_binned(self.bin_edges_.transform(X))

    @property
    def feature_importances_(self):
        """Impurity-based importances, shape (n_features,), summing to 1 (global)."""
        self._check_fitted()
        return self.forest_.feature_importances(self.n_features_in_)

    def _oob_sums(self, prepared):
        return self.forest_.out_of_bag_sums(prepared.Xb, prepared.global_index, self._seed,
                                            self._bootstrapped)

    def _warn_if_no_oob(self, missing, ctx):
        if missing and ctx.rank == 0:
            warnings.warn(f"{self._name()}: {missing} row(s) were in the bootstrap of every tree "
                          "and have no out-of-bag prediction; grow more trees for a reliable "
                          "oob_score_", UserWarning, stacklevel=5)

    # -- trainer protocol -----------------------------------------------------------------
    def get_parameters(self):
        """The forest's flat arrays in one 1-D float64 vector (see ``Forest.to_vector``)."""
        self._check_fitted()
        return self.forest_.to_vector()

    def set_parameters(self, vector):
        """Load a forest from a vector made by :meth:`get_parameters`."""
        self._check_fitted()
        vector = self._parameter_vector(vector)
        try:
            forest = Forest.from_vector(vector)
        except ValueError as error:
            raise InvalidArgumentError(
                f"{self._name()}.set_parameters: the vector of {vector.size} values is not a "
                f"forest's from get_parameters() (read as one, {error}); this model's has "
                f"{self.get_parameters().size}") from None
        if forest.n_values != self._n_values():
            raise InvalidArgumentError(f"{self._name()}.set_parameters: the vector's nodes hold "
                                       f"{forest.n_values} values, this model's {self._n_values()}")
        self.forest_ = forest
        if len(self._bootstrapped) != forest.n_trees:
            self._bootstrapped = np.ones(forest.n_trees, dtype=np.uint8)
        return self

    def synchronize_model(self):
        """Make every rank's forest rank 0's (they are identical after ``fit`` already)."""
        self._check_fitted()
        ctx = self._context()
        if ctx.size > 1:
            self.set_parameters(broadcast(self.get_parameters() if ctx.rank == 0 else None,
                                          ctx=ctx))
        return self

    def state_dict(self):
        """Everything needed to predict and to grow more trees: plain arrays and scalars."""
        self._check_fitted()
        state = {"forest": self.forest_.state(),
                 "bootstrapped": np.asarray(self._bootstrapped, dtype=np.uint8),
                 "bin_edges": self.bin_edges_.edges, "bin_edge_offsets": self.bin_edges_.offsets,
                 "n_features_in": int(self.n_features_in_), "max_features": int(self._max_features),
                 "seed": np.array(self._seed, dtype=np.uint64)}
        state.update(self._extra_state())
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`."""
        self._check_state(state)
        self._load_extra_state(state)
        self.forest_ = Forest.from_state(state["forest"])
        self._bootstrapped = np.asarray(state["bootstrapped"], dtype=np.uint8)
        self.bin_edges_ = BinEdges(state["bin_edges"], state["bin_edge_offsets"])
        self.n_features_in_ = int(state["n_features_in"])
        self._max_features = int(state["max_features"])
        self._seed = np.uint64(np.asarray(state["seed"], dtype=np.uint64))
        return self

    def _n_values(self):
        raise NotImplementedError


_DOC_PARAMETERS = """
    n_estimators : int, default=100
        Trees in the forest.
    criterion : {criteria}, default="{criterion}"
    max_depth : int or None, default=None
        The root has depth 0; None grows until the stopping rules below.
    min_samples_split : int or float, default=2
        A node with fewer (bootstrap-weighted) rows is a leaf; a float is a
        fraction of the global number of rows.
    min_samples_leaf : int or float, default=1
        Each child keeps at least this many (bootstrap-weighted) rows.
    max_features : {{"sqrt", "log2"}}, int, float or None, default={max_features}
        Features drawn per node (as scikit-learn: if all drawn ones are
        constant in the node, more are drawn until one is not).
    bootstrap : bool, default=True
        Poisson(1) weights per (tree, global row); False: every row once.
    max_bins : int, default=256
        At most this many quantile bins per feature (2 to 256).
    random_state : int in [0, 2**32 - 1], RandomState, Generator or None
        The same value gives the same forest at any number of ranks.
    comm : None, Context or mpi4py communicator
    verbose : int, default=0
        A tqdm progress bar (per batch of trees) on rank 0 when non-zero.
    oob_score : bool, default=False
        Compute the global out-of-bag score ``oob_score_``.
    n_jobs : int or None, default=None
        Numba threads of this rank during fit/predict (None: as set by
        ``hpcdist.init``, which shares the node's cores among its ranks).
    trees_per_batch : int, default=16
        Trees grown together (one allreduce per level for the whole batch);
        also the trees added per ``train_epoch``. Does not change the forest.
    local_threshold : int or None, default=None
        Nodes with at most this many (bootstrap-weighted) rows are grown to
        the end on one rank from their gathered rows; 0: every level through
        allreduce. None: every tree grows whole on one rank from every rank's
        rows, gathered once per fit, when they fit in one rank's share of the
        input as float64 (``n_ranks * (n_features + 8) <= 8 * n_features``,
        always on one rank); otherwise the rows of one rank's share
        (``n_samples // n_ranks``). Does not change the forest, only where
        work happens.
"""


class RandomForestClassifier(DistributedClassifierMixin, _BaseForest):
    __doc__ = """Random forest classifier over rows partitioned across MPI ranks.

    Histogram trees: features are cut into at most ``max_bins`` global
    quantile bins. On few ranks each tree grows whole on one rank from every
    rank's binned rows; otherwise trees of a batch grow level by level with
    one allreduce of integer class-count histograms per level, and small
    nodes are finished on one rank. ``predict_proba`` averages the trees'
    leaf class fractions.

    Parameters
    ----------""" + _DOC_PARAMETERS.format(criteria='{"gini", "entropy", "log_loss"}',
                                            criterion="gini", max_features='"sqrt"') + """
    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The union of the labels of all ranks.
    n_features_in_ : int
    forest_ : Forest
        The trees as flat arrays (identical on every rank).
    bin_edges_ : BinEdges
    feature_importances_ : ndarray of shape (n_features,)
        Mean decrease in impurity (global).
    oob_score_ : float
        Global out-of-bag accuracy (with ``oob_score=True``).
    oob_decision_function_ : ndarray of shape (n_local, n_classes)
        Out-of-bag class probabilities of this rank's rows (NaN for rows in
        every tree's bootstrap).

    Examples
    --------
    >>> X, y = hpcdist.data.load_digits()                               # doctest: +SKIP
    >>> clf = RandomForestClassifier(50, random_state=0).fit(X, y)      # doctest: +SKIP
    >>> clf.score(X_test_local, y_test_local)  # global accuracy         # doctest: +SKIP
    """

    _classification = True
    _criteria = ("gini", "entropy", "log_loss")
    _state_keys = _BaseForest._state_keys + ("classes",)

    def __init__(self, n_estimators=100, *, criterion="gini", max_depth=None,
                 min_samples_split=2, min_samples_leaf=1, max_features="sqrt", bootstrap=True,
                 max_bins=256, random_state=None, comm=None, verbose=0, oob_score=False,
                 n_jobs=None, trees_per_batch=16, local_threshold=None):
        super().__init__(n_estimators, criterion=criterion, max_depth=max_depth,
                         min_samples_split=min_samples_split, min_samples_leaf=min_samples_leaf,
                         max_features=max_features, bootstrap=bootstrap, max_bins=max_bins,
                         random_state=random_state, comm=comm, verbose=verbose,
                         oob_score=oob_score, n_jobs=n_jobs, trees_per_batch=trees_per_batch,
                         local_threshold=local_threshold)

    def _encode_targets(self, data, y, ctx, first):
        if first:
            self.classes_ = data.classes()
            if len(self.classes_) < 2:
                raise mark_raised_on_every_rank(InvalidArgumentError(
                    f"{self._name()}.fit: all ranks together have only one class "
                    f"({self.classes_.tolist()}); need at least 2 classes"))
        else:
            unknown = {r: np.setdiff1d(labels, self.classes_).tolist()
                       for r, labels in enumerate(data.labels)
                       if np.setdiff1d(labels, self.classes_).size}
            if unknown:
                raise mark_raised_on_every_rank(InvalidArgumentError(
                    f"{self._name()}: labels {unknown} (by rank) are not among the "
                    f"classes {self.classes_.tolist()} fixed by the first call; pass "
                    "every label in the first call to fit/train_epoch on some rank"))
        return np.searchsorted(self.classes_, y).astype(np.int64)

    def _channels(self):
        return len(self.classes_)

    def _n_values(self):
        return len(self.classes_)

    def _to_values(self, stats):
        return class_fractions(stats)

    @accepts_local_keywords
    def predict_proba(self, X):
        """Class probabilities of the rows given: the mean of the trees' leaf class fractions.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
        """
        return self._mean_values(X)

    def _class_scores(self, X):
        return self._mean_values(X)  # the class of highest mean probability is predicted

    def _set_oob(self, prepared, ctx):
        sums, counts = self._oob_sums(prepared)
        seen = counts > 0
        proba = np.full_like(sums, np.nan)
        proba[seen] = sums[seen] / counts[seen, None]
        self.oob_decision_function_ = proba
        labels = self.classes_[np.argmax(proba[seen], axis=1)]
        local = np.array([float(np.sum(labels == np.asarray(prepared.y)[seen])),
                          float(seen.sum()), float((~seen).sum())])
        totals = allreduce(local, ctx=ctx) if ctx.size > 1 else local
        self._warn_if_no_oob(int(totals[2]), ctx)
        self.oob_score_ = float(totals[0] / totals[1]) if totals[1] else float("nan")

    def _extra_state(self):
        classes = np.asarray(self.classes_)
        if classes.dtype == object:
            classes = classes.astype(str)
        return {"classes": classes}

    def _load_extra_state(self, state):
        self.classes_ = np.asarray(state["classes"])


class RandomForestRegressor(RegressorMixin, _BaseForest):
    __doc__ = """Random forest regressor over rows partitioned across MPI ranks.

    As :class:`RandomForestClassifier`, with squared-error splits found from
    exact fixed-point target sums (see :mod:`hpcdist.ml.forest.targets`);
    ``predict`` averages the trees' leaf means and ``score`` is the global R^2.

    Parameters
    ----------""" + _DOC_PARAMETERS.format(criteria='{"squared_error"}',
                                            criterion="squared_error",
                                            max_features="1.0") + """
    Attributes
    ----------
    n_features_in_ : int
    forest_ : Forest
    bin_edges_ : BinEdges
    feature_importances_ : ndarray of shape (n_features,)
    oob_score_ : float
        Global out-of-bag R^2 (with ``oob_score=True``).
    oob_prediction_ : ndarray of shape (n_local,)
        Out-of-bag predictions of this rank's rows (NaN where there are none).
    """

    _criteria = ("squared_error",)
    _state_keys = _BaseForest._state_keys + ("target",)

    def __init__(self, n_estimators=100, *, criterion="squared_error", max_depth=None,
                 min_samples_split=2, min_samples_leaf=1, max_features=1.0, bootstrap=True,
                 max_bins=256, random_state=None, comm=None, verbose=0, oob_score=False,
                 n_jobs=None, trees_per_batch=16, local_threshold=None):
        super().__init__(n_estimators, criterion=criterion, max_depth=max_depth,
                         min_samples_split=min_samples_split, min_samples_leaf=min_samples_leaf,
                         max_features=max_features, bootstrap=bootstrap, max_bins=max_bins,
                         random_state=random_state, comm=comm, verbose=verbose,
                         oob_score=oob_score, n_jobs=n_jobs, trees_per_batch=trees_per_batch,
                         local_threshold=local_threshold)

    def _encode_targets(self, data, y, ctx, first):
        if first:
            max_weight = MAX_BOOTSTRAP_WEIGHT if self.bootstrap else 1
            self._target = FixedPointTarget.fit(ctx, y, data.n_global, max_weight)
        return self._target.encode(y)

    def _channels(self):
        return 2

    def _n_values(self):
        return 1

    def _to_values(self, stats):
        return self._target.values(stats)

    @accepts_local_keywords
    def predict(self, X):
        """Predictions of the rows given (mean of the trees' leaf means), shape (n_rows,)."""
        return self._mean_values(X)[:, 0]

    @accepts_local_keywords
    def score(self, X, y, sample_weight=None):
        """Global (weighted) coefficient of determination R^2 over the rows of all ranks
        (collective); ``sample_weight``: this rank's rows' weights."""
        ctx = self._context()
        with validated_on_every_rank(ctx):
            predicted = self._mean_values(X)[:, 0]
            y = one_target_per_row(y, predicted)
            weights = row_weights(sample_weight, len(y), f"{type(self).__name__}.score")
        return global_r2(y, predicted, ctx, weights)

    def _set_oob(self, prepared, ctx):
        sums, counts = self._oob_sums(prepared)
        seen = counts > 0
        prediction = np.full(len(counts), np.nan)
        prediction[seen] = sums[seen, 0] / counts[seen]
        self.oob_prediction_ = prediction
        missing = allreduce(int((~seen).sum()), ctx=ctx) if ctx.size > 1 else int((~seen).sum())
        self._warn_if_no_oob(int(missing), ctx)
        y = np.asarray(prepared.y, dtype=np.float64)
        self.oob_score_ = global_r2(y[seen], prediction[seen], ctx)

    def _extra_state(self):
        return {"target": self._target.state()}

    def _load_extra_state(self, state):
        self._target = FixedPointTarget.from_state(state["target"])
