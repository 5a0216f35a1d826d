"""Multi-layer perceptrons trained data-parallel: MLPClassifier and MLPRegressor.

Each rank passes its own rows to ``fit(X, y)``. Every rank holds the whole
model; a step runs forward and backward on a local batch (this rank's share
of the global ``batch_size``, see :mod:`hpcdist.ml._batches`) and
:class:`hpcdist.DistributedDataParallel` averages the gradients, so N ranks
train like one rank with the global batch. The data-parallel wrapper is made
when training starts (after a fit, a load or unpickling alike): a pickled
estimator holds the network without it.
With ``strategy=`` other than ``"data_parallel"`` (or ``adaptive_batch=``),
:mod:`hpcdist.ml._mlp_strategies` drives the training instead.
"""

import warnings

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_consistent_length
from tqdm.auto import tqdm

from .. import nn
from .._checks import is_integer
from ..comm import allreduce
from ..comm.checks import agree, mark_raised_on_every_rank, validated_on_every_rank
from ..compression.collective import checked_compression
from ..exceptions import InvalidArgumentError
from ..nn.optim import SGD, Adam
from ..parallel import DistributedDataParallel, TrainingStrategy
from ..parallel._checks import checked_bucket_size
from ._base import (
    DistributedClassifierMixin,
    DistributedEstimator,
    accepts_local_keywords,
    random_state_of,
)
from ._batches import batch_shares, global_batch_size
from ._checkpointing import optimizer_from_tree, optimizer_to_tree
from ._mlp_strategies import StrategyTraining, checked_strategy, own_rank_state, per_rank_state
from ._scores import global_r2, row_weights
from ._validation import check_local_data

__all__ = ["MLPClassifier", "MLPRegressor"]

_ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU}
_SOLVERS = ("adam", "sgd")
_PREDICT_CHUNK = 4096


class _BaseMLP(DistributedEstimator):
    """Shared machinery of the MLP estimators (see :class:`MLPClassifier`)."""

    _model_attribute = "model_"
    _fit_attributes = ("model_", "classes_", "_ddp", "_training", "_training_state")
    _state_keys = ("model", "optimizer", "loss_curve", "n_iter", "t", "best_loss",
                   "no_improvement", "n_features_in", "n_outputs", "dtype")

    def __init__(self, hidden_layer_sizes=(100,), *, activation="relu", solver="adam",
                 learning_rate_init=1e-3, batch_size="auto", max_iter=200, random_state=None,
                 strategy="data_parallel", compression=None, comm=None, verbose=0,
                 alpha=0.0, tol=1e-4, n_iter_no_change=10, bucket_size_mb=25.0,
                 strategy_options=None, adaptive_batch=None):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.solver = solver
        self.learning_rate_init = learning_rate_init
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.random_state = random_state
        self.strategy = strategy
        self.compression = compression
        self.comm = comm
        self.verbose = verbose
        self.alpha = alpha
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.bucket_size_mb = bucket_size_mb
        self.strategy_options = strategy_options
        self.adaptive_batch = adaptive_batch

    # -- subclass hooks -----------------------------------------------------------------
    _classification = False

    def _targets(self, data, first_call, ctx, classes=None):
        """Labels/targets as the loss expects them; sets up outputs on the first call."""
        raise NotImplementedError

    # -- validation -------------------------------------------------------------------
    def _check_params(self):
        name = type(self).__name__
        for option, value, choices in (("activation", self.activation, _ACTIVATIONS),
                                       ("solver", self.solver, _SOLVERS)):
            if not isinstance(value, str) or value not in choices:
                raise InvalidArgumentError(
                    f"{name}: {option}={value!r} is not supported; choose one "
                    f"of {sorted(choices)}")
        self._check_real("learning_rate_init", 0, strict=True)
        if not (isinstance(self.batch_size, str) and self.batch_size == "auto"):
            try:
                self._check_int("batch_size", 1)
            except InvalidArgumentError as error:
                raise InvalidArgumentError(f"{error} or 'auto'") from None
        for option in ("max_iter", "n_iter_no_change"):
            self._check_int(option, 1)
        for option in ("alpha", "tol"):
            self._check_real(option, 0)
        checked_bucket_size(name, self.bucket_size_mb)
        checked_compression(name, self.compression)
        checked_strategy(name, self.strategy, self.strategy_options, self.adaptive_batch)
        return self._hidden_layer_sizes()

    def _hidden_layer_sizes(self):
        """``hidden_layer_sizes`` as a non-empty tuple of ints >= 1 (an int: one layer)."""
        sizes = self.hidden_layer_sizes
        layers = (sizes,) if is_integer(sizes) else sizes
        if not (isinstance(layers, (tuple, list, np.ndarray)) and len(layers)
                and all(is_integer(width) and width >= 1 for width in layers)):
            raise InvalidArgumentError(
                f"{type(self).__name__}: hidden_layer_sizes={sizes!r} should be a non-empty "
                "tuple of integers >= 1 (the hidden layers' widths), e.g. (100,) or (64, 32)")
        return tuple(int(width) for width in layers)

    def _validate(self, X, y, ctx, fitted):
        """This rank's checked rows and its share of every step's global batch.

        Under plain data parallelism a rank may hold fewer rows than its share of
        the batch, or none (others take the rest); a strategy whose ranks train
        replicas between averages needs rows on every rank.
        """
        name = f"{type(self).__name__}.fit"
        own_rows = self._replicas_differ() or self.adaptive_batch is not None
        data = check_local_data(ctx, X, y, name=name, classification=self._classification,
                                multi_output=not self._classification, y_required=True,
                                n_features=self.n_features_in_ if fitted else None,
                                min_local_rows=1 if own_rows else 0)
        if data.n_global == 0:  # the counts are every rank's: all raise
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"{name}: Found array with 0 sample(s) over all {ctx.size} rank(s) while a "
                "minimum of 1 is required; pass some rows"))
        # the user's call: _validate < fit < the keyword renaming < the caller
        self._global_batch = global_batch_size(self.batch_size, data.n_global, name,
                                               stacklevel=4)
        return data, batch_shares(self._global_batch, data.counts)

    # -- model ------------------------------------------------------------------------
    def _network(self, architecture, dtype, seed):
        """A new network and its optimizer (local: no communication).

        ``architecture`` is ``(widths, activation, solver)``: the layer widths
        from input to output, the hidden layers' activation and the solver.
        """
        widths, activation, solver = architecture
        layers = []
        for index, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            layers.append(nn.Linear(fan_in, fan_out, dtype=dtype, random_state=seed + index))
            if index < len(widths) - 2:
                layers.append(_ACTIVATIONS[activation]())
        layers[0].needs_input_grad = False  # the input is data: no gradient needed
        model = nn.Sequential(*layers)
        parameters = list(model.parameters())
        if solver == "adam":
            optimizer = Adam(parameters, lr=self.learning_rate_init, weight_decay=self.alpha)
        else:
            optimizer = SGD(parameters, lr=self.learning_rate_init, momentum=0.9,
                            nesterov=True, weight_decay=self.alpha)
        return model, optimizer

    def _build(self, n_in, n_out, dtype):
        """A new model (``model_``) and optimizer; training starts over."""
        hidden = self._check_params()
        seed = self._seed()
        self._architecture = ((n_in, *hidden, n_out), self.activation, self.solver)
        self.model_, self._optimizer = self._network(self._architecture, dtype, seed)
        self.__dict__.pop("_ddp", None)  # made for this model when training starts
        self.__dict__.pop("_training", None)
        self.loss_curve_ = []
        self.n_iter_ = 0
        self.t_ = 0
        self._no_improvement = 0
        self.best_loss_ = np.inf

    def _data_parallel(self, ctx):
        """The data-parallel wrapper of ``model_`` on ``ctx``, made on first use (collective).

        It is made when training starts, after ``fit`` builds the model as
        after a load or unpickling; its gradient hooks sit on the parameters.
        """
        ddp = self.__dict__.get("_ddp")
        if ddp is None:
            ddp = self._ddp = DistributedDataParallel(
                self.model_, bucket_size_mb=self.bucket_size_mb, compression=self.compression,
                ctx=ctx)
        return ddp

    def _strategy_training(self, ctx):
        """The driver of a strategy other than plain data parallelism, made on first use
        (collective; None for plain data parallelism)."""
        training = self.__dict__.get("_training")
        if training is None and (self._replicas_differ() or self.adaptive_batch is not None):
            training = self._training = StrategyTraining(
                self, ctx, self.__dict__.pop("_training_state", None))
        return training

    def _replicas_differ(self):
        """Whether the ranks' networks may differ between averages (not data parallelism)."""
        return TrainingStrategy(self.strategy) is not TrainingStrategy.DATA_PARALLEL

    # -- pickling -----------------------------------------------------------------------
    def __getstate__(self):
        """The state without the data-parallel wrapper (it holds the context).

        The wrapper's gradient hooks sit on ``model_``'s parameters, so the
        state holds a copy of the network and optimizer made without them; the
        wrapper is made again when training goes on.
        """
        state = super().__getstate__()
        training = state.pop("_training", None)
        if training is not None:
            state["_training_state"] = training.state_dict()
        if state.pop("_ddp", None) is not None:
            model, optimizer = self._network(self._architecture, self._dtype, seed=0)
            model.load_state_dict(self.model_.state_dict())
            optimizer.load_state_dict(self._optimizer.state_dict())
            state["model_"], state["_optimizer"] = model, optimizer
        return state

    # -- training -----------------------------------------------------------------------
    @accepts_local_keywords
    def fit(self, X, y=None, *, checkpoint=None, checkpoint_every=None):
        """Train on this rank's rows for up to ``max_iter`` epochs.

        Parameters
        ----------
        X : array-like of shape (n_local, n_features)
            This rank's rows (ranks may hold different numbers of rows).
        y : array-like of shape (n_local,) or (n_local, n_outputs)
            This rank's targets.
        checkpoint : hpcdist.checkpoint.CheckpointManager, optional
            Save the full state there (and resume from it when it already
            holds a checkpoint). A stop signal (SIGUSR1, SIGTERM) then saves
            at the end of the epoch and exits with code 75.
        checkpoint_every : int, optional
            Epochs between checkpoints (default: only at the end).

        Returns
        -------
        self
        """
        _, ctx, saving = self._start_fit(X, checkpoint, checkpoint_every)
        converged = False
        with saving:
            resumed = saving.resume() is not None
            data, shares = self._validate(X, y, ctx, fitted=resumed)
            targets = self._targets(data, first_call=not resumed, ctx=ctx)
            converged = self._no_improvement >= self.n_iter_no_change
            progress = tqdm(range(self.n_iter_, int(self.max_iter)), desc=type(self).__name__,
                            unit="epoch", initial=self.n_iter_, total=int(self.max_iter),
                            disable=not (self.verbose and ctx.rank == 0))
            for _ in progress if not converged else ():
                loss = self._epoch(data.X, targets, shares, data.n_global, ctx)
                progress.set_postfix(loss=f"{loss:.4g}")
                converged = self._converged(loss)
                saving.end_of_epoch(self.n_iter_)
                if converged:
                    break
            saving.finish(self.n_iter_)  # the replicas as they are: a resumed fit goes on exactly
            self._finalize_replicas(ctx)
        if not converged and ctx.rank == 0 and self.tol > 0:
            warnings.warn(f"{type(self).__name__}: max_iter={self.max_iter} epochs reached "
                          "before the loss stopped improving", ConvergenceWarning,
                          stacklevel=3)  # the caller of fit (past the keyword renaming)
        return self

    @accepts_local_keywords
    def train_epoch(self, X, y=None):
        """One epoch over this rank's rows (starts a model on the first call).

        Returns
        -------
        self
        """
        return self.partial_fit(X, y)

    @accepts_local_keywords
    def partial_fit(self, X, y, classes=None):
        """One epoch over this rank's rows, as :meth:`train_epoch` (scikit-learn's name).

        Parameters
        ----------
        X : array-like of shape (n_local, n_features)
        y : array-like of shape (n_local,) or (n_local, n_outputs)
        classes : array-like of shape (n_classes,), optional
            Classifiers: every label of all calls, the same on every rank. The
            first call fixes ``classes_`` to it (by default: the union of the
            labels of all ranks in that call); later calls may repeat it.

        Returns
        -------
        self
        """
        fitted, ctx = self._start_epoch(X, "partial_fit")
        data, shares = self._validate(X, y, ctx, fitted=fitted)
        targets = self._targets(data, first_call=not fitted, ctx=ctx, classes=classes)
        loss = self._epoch(data.X, targets, shares, data.n_global, ctx)
        self._finalize_replicas(ctx)
        self._converged(loss)
        return self

    def _finalize_replicas(self, ctx):
        """Under a model-averaging strategy, one exact average: the same network everywhere."""
        training = self._strategy_training(ctx)
        if training is not None:
            training.finalize()

    def _converged(self, loss):
        """sklearn's rule: stop after n_iter_no_change epochs without a tol improvement."""
        if loss > self.best_loss_ - self.tol:
            self._no_improvement += 1
        else:
            self._no_improvement = 0
        self.best_loss_ = min(self.best_loss_, loss)
        return self._no_improvement >= self.n_iter_no_change

    def _epoch(self, X, targets, shares, n_global, ctx):
        """Shuffle this rank's rows, run the steps of one global epoch, return the global loss.

        Every rank runs ``ceil(n_global / batch_size)`` steps of its share of
        the batch, cycling through its (reshuffled) rows as often as needed.
        """
        training = self._strategy_training(ctx)
        seed = (self._seed(), self.n_iter_, ctx.rank)
        if training is not None and training.own_loop:  # federated rounds, adaptive batches
            self.model_.train()
            return self._epoch_done(training.epoch(X, targets, n_global, seed))
        local_batch = shares[ctx.rank]
        steps = -(-n_global // self._global_batch)
        rng = np.random.default_rng(seed)
        needed = steps * local_batch
        order = np.concatenate([rng.permutation(len(X)) for _ in range(-(-needed // len(X)))]
                               if needed else [np.zeros(0, dtype=np.intp)])[:needed]
        # weight so that the average over ranks is the mean over the global batch
        weight = local_batch * ctx.size / self._global_batch
        optimizer, criterion = self._optimizer, self._criterion
        network, step_function = ((self.model_, training.step_function()) if training else
                                  (self._data_parallel(ctx), optimizer.step))
        self.model_.train()
        loss_sum = 0.0
        for step in range(steps):
            rows = order[step * local_batch:(step + 1) * local_batch]
            optimizer.zero_grad()
            with np.errstate(invalid="ignore", divide="ignore"):  # no row here: a NaN mean
                loss = float(criterion(network(X[rows]), targets[rows]))
            loss_sum += loss * local_batch if local_batch else 0.0
            network.backward(criterion.backward() * weight)
            step_function()
            self.t_ += 1
        totals = allreduce(np.array([loss_sum, float(steps * local_batch)]), ctx=ctx)
        return self._epoch_done(float(totals[0] / totals[1]))

    def _epoch_done(self, loss):
        """Record an epoch's global loss; returns it."""
        self.loss_curve_.append(loss)
        self.loss_ = loss
        self.n_iter_ += 1
        return loss

    def _seed(self):
        return random_state_of(self.random_state).randint(np.iinfo(np.int32).max)

    # -- inference --------------------------------------------------------------------
    def _forward(self, X):
        self._check_fitted()
        X = self._check_rows(X, dtype=self._dtype, ensure_min_samples=0)
        self.model_.eval()
        outputs = [self.model_(X[start:start + _PREDICT_CHUNK])
                   for start in range(0, len(X), _PREDICT_CHUNK)]
        self.model_.train()
        width = self.model_[-1].out_features
        return np.concatenate(outputs) if outputs else np.empty((0, width), dtype=self._dtype)

    # -- trainer protocol ----------------------------------------------------------------
    def get_parameters(self):
        """All weights and biases as one 1-D float64 vector (layer order)."""
        self._check_fitted()
        return np.concatenate([p.data.ravel() for p in self.model_.parameters()]).astype(
            np.float64)

    def set_parameters(self, vector):
        """Load weights from a vector made by :meth:`get_parameters`."""
        self._check_fitted()
        vector = self._parameter_vector(vector, sum(p.size for p in self.model_.parameters()),
                                        "parameters")
        offset = 0
        for parameter in self.model_.parameters():
            parameter.data[...] = vector[offset:offset + parameter.size].reshape(parameter.shape)
            offset += parameter.size
        return self

    def synchronize_model(self):
        """Average the weights over ranks (model averaging; a no-op for replicas
        that are already identical, as after data-parallel steps)."""
        self._check_fitted()
        ctx = self._context()
        if ctx.size > 1:
            for parameter in self.model_.parameters():
                allreduce(parameter.data, op="mean", out=parameter.data, ctx=ctx)
        return self

    def state_dict(self):
        """Everything needed to resume: weights, optimizer state, progress (no pickles)."""
        self._check_fitted()
        state = {
            "model": dict(self.model_.state_dict()),
            "optimizer": optimizer_to_tree(self._optimizer.state_dict()),
            "loss_curve": np.asarray(self.loss_curve_, dtype=np.float64),
            "n_iter": int(self.n_iter_), "t": int(self.t_),
            "best_loss": float(self.best_loss_), "no_improvement": int(self._no_improvement),
            "n_features_in": int(self.n_features_in_),
            "n_outputs": int(self.model_[-1].out_features),
            "dtype": np.dtype(self._dtype).str,
        }
        state.update(self._extra_state())
        training = self.__dict__.get("_training")
        training_state = (training.state_dict() if training is not None
                          else self.__dict__.get("_training_state"))
        if training_state:
            state["training"] = training_state
        if self._replicas_differ():  # each rank saves its own network and optimizer state
            state["model"] = per_rank_state(state["model"])
            state["optimizer"]["state"] = per_rank_state(state["optimizer"]["state"])
            state["world_size"] = int(self._context().size)
        return state

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict` (rebuilds the model when needed)."""
        self._check_state(state)
        self._load_extra_state(state)
        self.n_features_in_ = int(state["n_features_in"])
        self._dtype = np.dtype(state["dtype"])
        self._build(self.n_features_in_, int(state["n_outputs"]), self._dtype)
        model_state, optimizer_state = state["model"], dict(state["optimizer"])
        if "world_size" in state:  # one network per rank (see state_dict)
            saved, size = int(state["world_size"]), self._context().size
            if saved != size:
                raise InvalidArgumentError(
                    f"{type(self).__name__}.load_state_dict: the state holds {saved} networks, "
                    f"one per rank of a strategy={self.strategy!r} fit, but {size} ranks "
                    f"load it; resume at {saved} ranks")
            model_state = own_rank_state(model_state)
            optimizer_state["state"] = own_rank_state(optimizer_state["state"])
        self.model_.load_state_dict(model_state)
        self._optimizer.load_state_dict(optimizer_from_tree(optimizer_state))
        self._training_state = state.get("training")
        self.loss_curve_ = [float(v) for v in np.asarray(state["loss_curve"])]
        self.n_iter_, self.t_ = int(state["n_iter"]), int(state["t"])
        self.best_loss_ = float(state["best_loss"])
        self._no_improvement = int(state["no_improvement"])
        if self.loss_curve_:
            self.loss_ = self.loss_curve_[-1]
        return self


class MLPClassifier(DistributedClassifierMixin, _BaseMLP):
    """Multi-layer perceptron classifier trained data-parallel over MPI ranks.

    Parameters
    ----------
    hidden_layer_sizes : tuple of int, default=(100,)
        Width of each hidden layer.
    activation : {"relu", "tanh", "gelu"}, default="relu"
    solver : {"adam", "sgd"}, default="adam"
        ``"sgd"`` uses momentum 0.9 with Nesterov, like scikit-learn.
    learning_rate_init : float, default=1e-3
    batch_size : int or "auto", default="auto"
        The *global* batch: ``"auto"`` is ``min(200, n_samples)`` over all ranks
        (scikit-learn's rule), and a larger ``batch_size`` than all ranks' rows
        is clipped to them with a warning. Each rank takes its balanced share
        per step, never more than its rows (ranks with rows to spare take the
        rest); gradients are weighted by the shares, so a step follows the mean
        over the global batch.
    max_iter : int, default=200
        Epochs (over the global data).
    random_state : int in [0, 2**32 - 1], RandomState, Generator or None
        Seeds the weights (identical on all ranks) and the shuffling.
    strategy : str or TrainingStrategy, default="data_parallel"
        How the ranks' networks train together: ``"data_parallel"``
        (gradients averaged every step), ``"local_sgd"``, ``"easgd"``,
        ``"gossip"`` or ``"federated"`` (parameters averaged by
        :mod:`hpcdist.parallel`'s strategies; each epoch of ``"federated"``
        is one round). The strategies' networks differ between averages;
        ``fit`` ends with one exact average, so the fitted network is the
        same on every rank, and checkpoints hold each rank's replica (resume
        at the same number of ranks).
    strategy_options : dict, optional
        Options of the strategy, e.g. ``{"period": 8}`` for ``"local_sgd"``
        (the strategy class's keyword arguments; ``"federated"``'s
        ``batch_size`` defaults to the global batch // n_ranks and its ``seed``
        to one drawn from ``random_state``).
    adaptive_batch : (int, int), optional
        ``(min_batch, max_batch)``: with ``"data_parallel"``, the global batch
        starts at ``min_batch`` and grows by the norm test
        (:class:`hpcdist.parallel.AdaptiveBatchSize`, needs 2 ranks or more);
        ``batch_size`` then only bounds the rows each rank needs.
    compression : hpcdist.compression.Compressor, optional
        Gradient compression per DDP bucket.
    comm : None, Context or mpi4py communicator
    verbose : int, default=0
        A tqdm progress bar on rank 0 when non-zero.
    alpha : float, default=0.0
        L2 penalty (weight decay).
    tol : float, default=1e-4
        Stop when the global loss has not improved by ``tol`` for
        ``n_iter_no_change`` epochs.
    n_iter_no_change : int, default=10
    bucket_size_mb : float, default=25.0
        DDP gradient bucket size.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        The union of the labels of all ranks.
    loss_curve_ : list of float
        Global mean training loss per epoch.
    n_iter_ : int
        Epochs run.
    model_ : hpcdist.nn.Sequential
        The network (identical on all ranks).
    n_features_in_ : int

    Examples
    --------
    >>> X, y = hpcdist.data.load_digits()                          # doctest: +SKIP
    >>> clf = MLPClassifier((64,), max_iter=50).fit(X, y)           # doctest: +SKIP
    >>> clf.score(X_test_local, y_test_local)  # global accuracy    # doctest: +SKIP
    """

    _classification = True
    _state_keys = _BaseMLP._state_keys + ("classes",)

    def _targets(self, data, first_call, ctx, classes=None):
        if classes is not None:
            classes = np.unique(np.asarray(classes))
            agree(ctx, "MLPClassifier.partial_fit", f"classes={classes.tolist()}")
        if first_call:
            self.classes_ = data.classes() if classes is None else classes
            if len(self.classes_) < 2:  # the classes of all ranks: all raise
                raise mark_raised_on_every_rank(InvalidArgumentError(
                    f"MLPClassifier.fit: all ranks together have only one class, "
                    f"{self.classes_.tolist()}, in n_samples={data.n_global} over all ranks; need "
                    "at least 2 classes"))
        elif classes is not None and not np.array_equal(classes, self.classes_):
            raise InvalidArgumentError(
                f"MLPClassifier.partial_fit: classes={classes.tolist()} is not "
                f"the classes_ {self.classes_.tolist()} fixed by the first call")
        unknown = {r: np.setdiff1d(labels, self.classes_).tolist()
                   for r, labels in enumerate(data.labels)
                   if np.setdiff1d(labels, self.classes_).size}
        if unknown:
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"MLPClassifier: labels {unknown} (by rank) are not among the classes "
                f"{self.classes_.tolist()} fixed by the first call; pass every label in the "
                "first call to fit/partial_fit on some rank, or all of them as classes="))
        if first_call:
            self.n_features_in_ = data.n_features
            self._dtype = data.X.dtype
            self._criterion = nn.CrossEntropyLoss()
            self._build(data.n_features, len(self.classes_), data.X.dtype)
        return np.searchsorted(self.classes_, data.y)

    @accepts_local_keywords
    def predict_proba(self, X):
        """Class probabilities for the rows given, shape (n_rows, n_classes)."""
        logits = self._forward(X)
        logits = logits - logits.max(axis=1, keepdims=True)
        probabilities = np.exp(logits)
        return probabilities / probabilities.sum(axis=1, keepdims=True)

    def _class_scores(self, X):
        return self._forward(X)  # logits: the highest is the most probable class

    def _extra_state(self):
        return {"classes": np.asarray(self.classes_)}

    def _load_extra_state(self, state):
        self.classes_ = np.asarray(state["classes"])
        self._criterion = nn.CrossEntropyLoss()


class MLPRegressor(RegressorMixin, _BaseMLP):
    """Multi-layer perceptron regressor trained data-parallel over MPI ranks.

    Parameters are those of :class:`MLPClassifier`; the loss is the mean
    squared error and ``score`` is the global R^2 (averaged over outputs).

    Attributes
    ----------
    n_outputs_ : int
    loss_curve_ : list of float
        Global mean squared error per epoch.
    """

    def _targets(self, data, first_call, ctx, classes=None):
        if classes is not None:
            raise InvalidArgumentError(
                f"MLPRegressor.partial_fit: classes={classes!r} is for classifiers; "
                "a regressor has none")
        y = (data.y[:, None] if data.y.ndim == 1 else data.y).astype(data.X.dtype, copy=False)
        if first_call:
            self.n_outputs_ = y.shape[1]
            self.n_features_in_ = data.n_features
            self._dtype = data.X.dtype
            self._criterion = nn.MSELoss()
            self._build(data.n_features, self.n_outputs_, data.X.dtype)
        elif y.shape[1] != self.n_outputs_:
            raise InvalidArgumentError(
                f"MLPRegressor: y has {y.shape[1]} outputs, the model was fitted "
                f"with {self.n_outputs_}")
        return y

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True  # y of shape (n_local, n_outputs) is fitted as is
        return tags

    @accepts_local_keywords
    def predict(self, X):
        """Predictions for the rows given, shape (n_rows,) or (n_rows, n_outputs)."""
        out = self._forward(X)
        return out.ravel() if self.n_outputs_ == 1 else out

    @accepts_local_keywords
    def score(self, X, y, sample_weight=None):
        """Global (weighted) coefficient of determination R^2, uniform average over
        outputs (collective); ``sample_weight``: this rank's rows' weights."""
        ctx = self._context()
        with validated_on_every_rank(ctx):  # a bad input on one rank fails all
            predicted = np.asarray(self._forward(X), dtype=np.float64)
            check_consistent_length(predicted, y)
            y = np.asarray(y, dtype=np.float64)
            y = y[:, None] if y.ndim == 1 else y
            if y.ndim != 2 or y.shape[1] != self.n_outputs_:
                raise InvalidArgumentError(
                    f"{type(self).__name__}.score: y of shape {y.shape} does not hold the "
                    f"model's {self.n_outputs_} output(s) a row; pass y of shape "
                    f"(n_rows, {self.n_outputs_})")
            weights = row_weights(sample_weight, len(y), f"{type(self).__name__}.score")
        return global_r2(y, predicted, ctx, weights)

    def _load_extra_state(self, state):
        self.n_outputs_ = int(state["n_outputs"])
        self._criterion = nn.MSELoss()
