"""The base class of hpcdist's estimators: the trainer protocol and the shared opening.

Every estimator of :mod:`hpcdist.ml` is a scikit-learn estimator whose
``fit(X, y)`` takes this rank's rows, and a trainer (``train_epoch``,
``get_parameters``, ``set_parameters``, ``synchronize_model``,
``state_dict``, ``load_state_dict``) that training strategies and
checkpoints drive. :class:`DistributedEstimator` declares that protocol and
holds what each estimator used to repeat at the start of ``fit``,
``train_epoch``, ``predict`` and ``score``: resolving the context from
``comm``, checking the hyperparameters, forgetting a previous fit, checking
test rows against the fitted width, and the global accuracy. A fitted
estimator pickles without its communicator (:meth:`__getstate__`).
"""

import functools
import inspect
import math
import numbers
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Mapping

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted, validate_data

from .._arrays import is_cupy
from ..comm import allreduce, broadcast_object, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import mark_raised_on_every_rank, validated_on_every_rank
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError, StateDictKeyError
from ..parallel.averaging import checked_int
from ._checkpointing import FitCheckpointing
from ._scores import correct_rows, global_accuracy, row_weights
from ._validation import check_device_rows, sklearn_errors_named

__all__ = ["DistributedEstimator", "DistributedClassifierMixin", "accepts_local_keywords",
           "shared_seed", "random_state_of"]

#: the arguments' names before scikit-learn's ``X, y`` (still accepted, with a FutureWarning)
_RENAMED_ARGUMENTS = {"X_local": "X", "y_local": "y"}


def accepts_local_keywords(method):
    """Let ``method(X, y, ...)`` still be called with ``X_local=``/``y_local=`` (deprecated).

    The estimators' arguments were called ``X_local, y_local``; scikit-learn
    (pipelines, ``GridSearchCV``, keyword calls) expects ``X, y``. For one
    release the old keywords are renamed with a ``FutureWarning`` pointing at
    the caller. ``inspect.signature`` shows the method's own signature.
    """
    positions = {name: index for index, name in
                 enumerate(list(inspect.signature(method).parameters)[1:])}  # after self
    renamed = {old: new for old, new in _RENAMED_ARGUMENTS.items() if new in positions}

    @functools.wraps(method)
    def renaming(self, *args, **kwargs):
        for old, new in renamed.items():
            if old not in kwargs:
                continue
            where = f"{type(self).__name__}.{method.__name__}"
            if new in kwargs or positions[new] < len(args):
                raise InvalidArgumentTypeError(
                    f"{where}: got both {new} and its old name {old}=; pass {new}")
            warnings.warn(f"{where}: the keyword {old}= is renamed {new}= (this rank's rows, as "
                          f"before); {old}= will stop working in a future release",
                          FutureWarning, stacklevel=2)
            kwargs[new] = kwargs.pop(old)
        return method(self, *args, **kwargs)

    return renaming


def random_state_of(random_state):
    """scikit-learn's ``check_random_state``, which also takes a NumPy ``Generator``
    (drawing from its bit generator, so that the Generator advances as a
    ``RandomState`` would)."""
    if isinstance(random_state, np.random.Generator):
        return np.random.RandomState(random_state.bit_generator)
    return check_random_state(random_state)


def shared_seed(random_state, ctx, high):
    """An int seed in ``[0, high)``, the same on every rank, so that a fit is rank-invariant.

    An integer ``random_state`` (checked equal across ranks by the estimators)
    gives it everywhere without communication; None, a ``RandomState`` or a
    ``Generator`` draws on rank 0, which broadcasts it.
    """
    def draw():
        return int(random_state_of(random_state).randint(high))
    if isinstance(random_state, (int, np.integer)) or ctx.size == 1:
        return draw()
    return broadcast_object(draw() if ctx.rank == 0 else None, root=0, ctx=ctx)


class DistributedEstimator(BaseEstimator, metaclass=ABCMeta):
    """Base of the estimators trained over MPI ranks.

    A subclass takes ``comm`` (None, an hpcdist Context or an mpi4py
    communicator) among its parameters, names the fitted attribute that
    holds its model in ``_model_attribute``, lists in ``_fit_attributes``
    what a new ``fit`` forgets, checks its hyperparameters in
    :meth:`_check_params` and implements the trainer protocol.

    The context is never stored on the estimator: :meth:`_context` resolves
    ``comm`` whenever a method communicates (a raw communicator's context is
    made once and cached with that communicator), so a fitted estimator
    holds no communicator of its own. A pickled (or copied) estimator leaves
    ``comm`` behind: restored, in this process or another with any number of
    ranks, it has ``comm=None`` and communicates on the default context.
    """

    #: the fitted attribute holding the model: the estimator is fitted when it exists
    _model_attribute = None
    #: attributes a new ``fit`` removes before it starts
    _fit_attributes = ()
    #: parameters that may differ between ranks (they do not change the model)
    _per_rank_params = ("comm", "verbose", "n_jobs")

    # -- pickling --------------------------------------------------------------------------
    def __getstate__(self):
        """The estimator's state without its communicator (``comm`` becomes None).

        A communicator cannot travel to another process and a context cannot be
        copied; the restored estimator re-attaches to the default context when
        it next communicates. Subclasses drop what holds a context too.
        """
        state = dict(super().__getstate__())  # Python >= 3.11 returns __dict__ itself
        state["comm"] = None
        return state

    # -- the opening of fit, train_epoch, predict and score --------------------------------
    @abstractmethod
    def _check_params(self):
        """Check the hyperparameters; they are the same on every rank, so every rank raises
        the same error. Returns what the estimator derives from them (or None)."""

    def _context(self):
        """The Context this estimator communicates on: ``comm`` as
        :func:`hpcdist.comm.resolve_context` resolves it (None: the default context; an
        mpi4py communicator: the one context owned for it, created on first use)."""
        return resolve_context(self.comm)

    def _agree_across_ranks(self, ctx, where, X):
        """Collective: raise ``ConfigMismatchError`` on every rank unless every rank has
        the same parameters (all but :attr:`_per_rank_params`), input dtype and width.

        A ``random_state`` that is not an integer is left out: the seed is then
        drawn on rank 0 and broadcast (:func:`shared_seed`).
        """
        settings = {name: value for name, value in self.get_params(deep=False).items()
                    if name not in self._per_rank_params}
        if not isinstance(settings.get("random_state", 0), (int, np.integer)):
            del settings["random_state"]
        shape = getattr(X, "shape", (None, None))
        settings["X.dtype"] = getattr(X, "dtype", type(X).__name__)
        settings["n_features"] = shape[1] if len(shape) == 2 else shape[1:]
        agree_config(ctx, f"{type(self).__name__}.{where}", settings)

    def _checked_params(self):
        """``random_state`` and :meth:`_check_params` right after the agreement check: the
        parameters are the same everywhere, so an error is raised on every rank (and marked
        so)."""
        try:
            self._check_random_state()
            return self._check_params()
        except (ValueError, TypeError) as error:
            raise mark_raised_on_every_rank(error)

    def _check_random_state(self):
        """Raise unless ``random_state`` is None, an int in ``[0, 2**32 - 1]`` (NumPy's seeds),
        a ``RandomState`` or a ``Generator``."""
        value = self.random_state
        if value is None or isinstance(value, (np.random.RandomState, np.random.Generator)):
            return
        checked_int(type(self).__name__, "random_state", value, 0, 2 ** 32 - 1,
                    hint=", None, or a numpy RandomState or Generator")

    def _check_int(self, option, minimum, allow_none=False, allow_fraction=None):
        """The hyperparameter ``option`` as an int >= ``minimum`` (or None, or a float in
        ``allow_fraction=(low, high]``), or an error naming it."""
        value = getattr(self, option)
        name = type(self).__name__
        if value is None and allow_none:
            return None
        if allow_fraction and isinstance(value, (float, np.floating)) and not isinstance(
                value, bool):
            low, high = allow_fraction
            if not low < value <= high:
                raise InvalidArgumentError(
                    f"{name}: {option}={value!r} should be an int >= "
                    f"{minimum} or a float in ({low}, {high}]")
            return float(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or value < minimum:
            raise InvalidArgumentError(
                f"{name}: {option}={value!r} should be an int >= {minimum}"
                + (" or None" if allow_none else ""))
        return int(value)

    def _check_real(self, option, minimum, strict=False):
        """The hyperparameter ``option`` as a finite float >= ``minimum`` (> with
        ``strict``), or an error naming it."""
        value = getattr(self, option)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) \
                or not math.isfinite(value) or value < minimum or (strict and value == minimum):
            raise InvalidArgumentError(f"{type(self).__name__}: {option}={value!r} should be a "
                                       f"finite number {'>' if strict else '>='} {minimum}")
        return float(value)

    def _start_fit(self, X, checkpoint, checkpoint_every):
        """The opening of ``fit``: settings agreed across ranks, hyperparameters, context,
        checkpointing, no old fit.

        Parameters
        ----------
        X : array-like
            This rank's rows (their dtype and width must agree across ranks).
        checkpoint : hpcdist.checkpoint.CheckpointManager or None
        checkpoint_every : int or None
            ``fit``'s arguments of the same names.

        Returns
        -------
        params : object
            What :meth:`_check_params` returns.
        ctx : Context
        saving : FitCheckpointing
            The checkpoints and stop signals of this call (a context manager).
        """
        ctx = self._context()
        self._agree_across_ranks(ctx, "fit", X)
        params = self._checked_params()
        saving = FitCheckpointing(self, checkpoint, checkpoint_every, ctx)
        for attribute in self._fit_attributes:
            self.__dict__.pop(attribute, None)
        return params, ctx, saving

    def _start_epoch(self, X, where="train_epoch"):
        """The opening of ``train_epoch``: settings agreed across ranks, the
        hyperparameters checked on the first call.

        Parameters
        ----------
        X : array-like
            This rank's rows.
        where : str
            The method, for messages.

        Returns
        -------
        fitted : bool
            Whether a model exists already (an earlier ``fit`` or ``train_epoch``).
        ctx : Context
        """
        fitted = hasattr(self, self._model_attribute)
        ctx = self._context()
        self._agree_across_ranks(ctx, where, X)
        if not fitted:
            self._checked_params()
        return fitted, ctx

    def _check_fitted(self):
        """Raise scikit-learn's ``NotFittedError`` unless the estimator holds a model."""
        check_is_fitted(self, self._model_attribute)

    def _check_rows(self, X, **options):
        """Rows given to a fitted model: checked like the training rows, of the fitted width.

        The width (``n_features_in_``) and feature names are checked by
        scikit-learn's ``validate_data``, as its own estimators do.

        Parameters
        ----------
        X : array-like or cupy.ndarray of shape (n_rows, n_features)
            CuPy rows are checked on their device (:func:`check_device_rows`).
        **options
            ``check_array``'s options for host rows (dtype, order, ...).

        Returns
        -------
        ndarray or cupy.ndarray of shape (n_rows, n_features)
        """
        self._check_fitted()
        with sklearn_errors_named(type(self).__name__):
            if not is_cupy(X):
                return validate_data(self, X, reset=False, **options)
            X = check_device_rows(X, type(self).__name__)
            validate_data(self, X, reset=False, skip_check_array=True)
        return X

    def _parameter_vector(self, vector, expected=None, what=""):
        """``vector`` as a 1-D float64 array of finite values, checked to hold ``expected``
        values (when given).

        ``what`` says what the model's values are, for the message (e.g. ``"parameters"``).
        """
        where = f"{type(self).__name__}.set_parameters"
        try:
            vector = np.asarray(vector, dtype=np.float64).ravel()
        except (TypeError, ValueError) as error:
            raise InvalidArgumentTypeError(f"{where}: the vector is not numbers ({error}); pass "
                                           "a 1-D float array made by get_parameters()") from None
        if expected is not None and vector.size != expected:
            raise InvalidArgumentError(f"{where}: got {vector.size} values, the model has "
                                       f"{expected} {what}")
        bad = np.flatnonzero(~np.isfinite(vector))
        if bad.size:
            raise InvalidArgumentError(
                f"{where}: the vector holds NaN or infinity at {bad.size} of its {vector.size} "
                f"positions (the first at index {bad[0]}); pass finite values, as "
                "get_parameters() makes them")
        return vector

    #: the top-level keys every :meth:`state_dict` of this estimator holds
    _state_keys = ()

    def _check_state(self, state):
        """Raise unless ``state`` is a dict with :attr:`_state_keys`, naming the first missing
        key and whose state it looks like."""
        name = type(self).__name__
        if not isinstance(state, Mapping):
            raise InvalidArgumentTypeError(
                f"{name}.load_state_dict: state is a {type(state).__name__}, not a dict; pass "
                f"what {name}.state_dict() returned")
        missing = [key for key in self._state_keys if key not in state]
        if missing:
            others = f" (nor {len(missing) - 1} more of the keys needed)" if missing[1:] else ""
            raise StateDictKeyError(
                f"{name}.load_state_dict: the state has no {missing[0]!r}{others}; it looks like "
                f"{_state_source(state)}; pass what {name}.state_dict() returned")

    # -- trainer protocol ------------------------------------------------------------------
    @abstractmethod
    def train_epoch(self, X, y=None):
        """One pass of training over this rank's rows (starts a model on the first call).

        Returns
        -------
        self
        """

    @abstractmethod
    def get_parameters(self):
        """The model as one 1-D float64 vector (the same layout on every rank)."""

    @abstractmethod
    def set_parameters(self, vector):
        """Load the model from a vector made by :meth:`get_parameters`; returns self."""

    def synchronize_model(self):
        """Average the parameter vectors over ranks, so that every rank holds the same model.

        Returns
        -------
        self
        """
        self._check_fitted()
        ctx = self._context()
        if ctx.size > 1:
            self.set_parameters(allreduce(self.get_parameters(), op="mean", ctx=ctx))
        return self

    @abstractmethod
    def state_dict(self):
        """Everything needed to resume, as a nested dict of arrays and scalars (no pickles)."""

    @abstractmethod
    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`; returns self."""

    def _extra_state(self):
        """Entries a subclass adds to its family's :meth:`state_dict` (e.g. its classes)."""
        return {}

    def _load_extra_state(self, state):
        """Restore the entries of :meth:`_extra_state` from ``state``."""


def _estimator_classes(cls=DistributedEstimator):
    """Every subclass of ``cls`` (recursively)."""
    for subclass in cls.__subclasses__():
        yield subclass
        yield from _estimator_classes(subclass)


def _state_source(state):
    """Whose state ``state`` looks like: the public estimator with the most
    :attr:`_state_keys` that it holds all of (for messages)."""
    matches = [cls for cls in _estimator_classes() if not cls.__name__.startswith("_")
               and cls._state_keys and all(key in state for key in cls._state_keys)]
    if not matches:
        return f"no hpcdist estimator's state (its keys: {sorted(map(str, state))[:8]})"
    return f"the state of {max(matches, key=lambda cls: len(cls._state_keys)).__name__}"


class DistributedClassifierMixin(ClassifierMixin):
    """``predict`` and the global ``score`` of the classifiers.

    A classifier has ``classes_`` and implements :meth:`_class_scores`, one
    score per class and row (probabilities, logits), highest for the
    predicted class.
    """

    def _class_scores(self, X):
        """Scores of shape (n_rows, n_classes) for the rows given (local; checks them)."""
        raise NotImplementedError

    @accepts_local_keywords
    def predict(self, X):
        """Predicted labels of the rows given (local): the class of the highest score.

        Returns
        -------
        ndarray of shape (n_rows,)
        """
        scores = self._class_scores(X)
        return self.classes_[np.argmax(scores, axis=1)]

    @accepts_local_keywords
    def score(self, X, y, sample_weight=None):
        """Global accuracy: the (weighted) share of the rows of all ranks labelled right
        (collective).

        Parameters
        ----------
        X : array-like of shape (n_local, n_features)
        y : array-like of shape (n_local,)
        sample_weight : array-like of shape (n_local,), optional
            This rank's rows' weights (default: all 1).

        Returns
        -------
        float
            NaN when no rank has a row.
        """
        ctx = self._context()
        with validated_on_every_rank(ctx):  # a bad input on one rank fails all
            correct = correct_rows(self.predict(X), y)
            weights = row_weights(sample_weight, len(correct), f"{type(self).__name__}.score")
        return global_accuracy(correct, weights, ctx)
