"""The base class of hpcdist's estimators: the trainer protocol and the shared opening.

Every estimator of :mod:`hpcdist.ml` is a scikit-learn estimator whose
``fit`` takes this rank's rows, and a trainer (``train_epoch``,
``get_parameters``, ``set_parameters``, ``synchronize_model``,
``state_dict``, ``load_state_dict``) that training strategies and
checkpoints drive. :class:`DistributedEstimator` declares that protocol and
holds what each estimator used to repeat at the start of ``fit``,
``train_epoch``, ``predict`` and ``score``: resolving the context from
``comm``, checking the hyperparameters, forgetting a previous fit, checking
test rows against the fitted width, and the global accuracy.
"""

from abc import ABCMeta, abstractmethod

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_array
from sklearn.utils.validation import check_is_fitted

from .._arrays import is_cupy
from ..comm import allreduce, resolve_context
from ..comm.checks import validated_on_every_rank
from ._checkpointing import FitCheckpointing
from ._validation import check_device_rows

__all__ = ["DistributedEstimator"]


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
    holds no communicator of its own.
    """

    #: the fitted attribute holding the model: the estimator is fitted when it exists
    _model_attribute = None
    #: attributes a new ``fit`` removes before it starts
    _fit_attributes = ()

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

    def _start_fit(self, checkpoint, checkpoint_every):
        """The opening of ``fit``: hyperparameters, context, checkpointing, no old fit.

        Parameters
        ----------
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
        params = self._check_params()
        ctx = self._context()
        saving = FitCheckpointing(self, checkpoint, checkpoint_every, ctx)
        for attribute in self._fit_attributes:
            self.__dict__.pop(attribute, None)
        return params, ctx, saving

    def _start_epoch(self):
        """The opening of ``train_epoch``: the hyperparameters are checked on the first call.

        Returns
        -------
        fitted : bool
            Whether a model exists already (an earlier ``fit`` or ``train_epoch``).
        ctx : Context
        """
        fitted = hasattr(self, self._model_attribute)
        ctx = self._context()
        if not fitted:
            self._check_params()
        return fitted, ctx

    def _check_fitted(self):
        """Raise scikit-learn's ``NotFittedError`` unless the estimator holds a model."""
        check_is_fitted(self, self._model_attribute)

    def _check_rows(self, X, **options):
        """Rows given to a fitted model: checked like the training rows, of the fitted width.

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
        name = type(self).__name__
        if is_cupy(X):
            X = check_device_rows(X, name)
        else:
            X = check_array(X, input_name="X", **options)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X has {X.shape[1]} features, but {name} is expecting "
                             f"{self.n_features_in_} features as input (it was fitted with "
                             f"{self.n_features_in_}).")
        return X

    def _refuse_sample_weight(self, sample_weight):
        """``score`` weighs every row alike: a ``sample_weight`` raises."""
        if sample_weight is not None:
            raise NotImplementedError(f"{type(self).__name__}.score: sample_weight is not "
                                      "supported")

    def _global_accuracy(self, X_local, y_local, sample_weight=None):
        """The share of rows of all ranks that :meth:`predict` labels right (collective).

        Returns
        -------
        float
            NaN when no rank has a row.
        """
        self._refuse_sample_weight(sample_weight)
        ctx = self._context()
        with validated_on_every_rank(ctx):  # a bad input on one rank fails all
            correct = float(np.sum(self.predict(X_local) == np.asarray(y_local)))
        totals = allreduce(np.array([correct, float(len(X_local))]), ctx=ctx)
        return float(totals[0] / totals[1]) if totals[1] else float("nan")

    def _parameter_vector(self, vector, expected, what):
        """``vector`` as a 1-D float64 array, checked to hold ``expected`` values.

        ``what`` says what the model's values are, for the message (e.g. ``"parameters"``).
        """
        vector = np.asarray(vector, dtype=np.float64).ravel()
        if vector.size != expected:
            raise ValueError(f"{type(self).__name__}.set_parameters: got {vector.size} values, "
                             f"the model has {expected} {what}")
        return vector

    # -- trainer protocol ------------------------------------------------------------------
    @abstractmethod
    def train_epoch(self, X_local, y_local=None):
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
