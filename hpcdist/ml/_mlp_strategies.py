"""The MLP estimators' training strategies: options, the strategy objects and their epochs.

``MLPClassifier(strategy=..., strategy_options=..., adaptive_batch=...)``
trains with :mod:`hpcdist.parallel`'s strategies. This module checks those
parameters, makes the strategy for the estimator's network, runs the epochs
that differ from data parallelism's loop (a federated round, the growing
batches of :class:`~hpcdist.parallel.AdaptiveBatchSize`), and keeps the
replicas' state in checkpoints: under a model-averaging strategy the ranks'
networks and optimizer states differ between averages, so each rank saves
its own (``Sharded``, one row per rank) and the fit resumes exactly at the
same number of ranks.
"""

import numpy as np

from .._partition import balanced_counts
from ..checkpoint import Sharded
from ..comm import allreduce, broadcast
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ..parallel import (
    AdaptiveBatchSize,
    ElasticAveraging,
    FederatedAveraging,
    GossipSGD,
    LocalSGD,
    ParameterServerTraining,
    TrainingStrategy,
)
from ._base import shared_seed

__all__ = ["checked_strategy", "StrategyTraining", "per_rank_state", "own_rank_state"]

_CLASSES = {TrainingStrategy.LOCAL_SGD: LocalSGD,
            TrainingStrategy.ELASTIC_AVERAGING: ElasticAveraging,
            TrainingStrategy.DECENTRALIZED: GossipSGD,
            TrainingStrategy.FEDERATED: FederatedAveraging,
            TrainingStrategy.PARAMETER_SERVER: ParameterServerTraining}
#: the options each strategy takes through ``strategy_options``
OPTIONS = {TrainingStrategy.DATA_PARALLEL: (),
           TrainingStrategy.LOCAL_SGD: ("period", "warmup_steps"),
           TrainingStrategy.ELASTIC_AVERAGING: ("alpha", "period", "aggregation"),
           TrainingStrategy.DECENTRALIZED: ("topology",),
           TrainingStrategy.FEDERATED: ("clients_per_round", "local_epochs", "batch_size",
                                        "proximal_mu", "seed"),
           TrainingStrategy.PARAMETER_SERVER: ("mode", "staleness")}


def checked_strategy(owner, strategy, options, adaptive_batch):
    """The estimator's strategy parameters checked on the calling rank.

    Returns
    -------
    (TrainingStrategy, dict, tuple or None)

    Raises
    ------
    InvalidArgumentError
        An unknown strategy or option, an ``adaptive_batch`` that is not a
        pair or comes with a strategy other than data parallelism.
    """
    try:
        chosen = TrainingStrategy(strategy)
    except ValueError:
        chosen = None
    if chosen not in OPTIONS:
        raise InvalidArgumentError(f"{owner}: strategy={strategy!r} is not supported; choose one "
                                   f"of {[s.value for s in OPTIONS]}")
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise InvalidArgumentTypeError(f"{owner}: strategy_options={options!r} should be a dict "
                                       "of the strategy's options, e.g. {'period': 8}")
    unknown = sorted(set(map(str, options)) - set(OPTIONS[chosen]))
    if unknown:
        raise InvalidArgumentError(
            f"{owner}: strategy_options names {unknown}, which strategy={chosen.value!r} does "
            f"not take; it takes {list(OPTIONS[chosen]) or 'none'}")
    if adaptive_batch is not None:
        if chosen is not TrainingStrategy.DATA_PARALLEL:
            raise InvalidArgumentError(
                f"{owner}: adaptive_batch={adaptive_batch!r} works with "
                "strategy='data_parallel' only (the norm test needs every step's gradients "
                f"from all ranks, which strategy={chosen.value!r} does not exchange)")
        if not (isinstance(adaptive_batch, (tuple, list)) and len(adaptive_batch) == 2):
            raise InvalidArgumentError(f"{owner}: adaptive_batch={adaptive_batch!r} should be a "
                                       "pair (min_batch, max_batch) of global batch sizes")
        adaptive_batch = tuple(adaptive_batch)
    return chosen, dict(options), adaptive_batch


class StrategyTraining:
    """An estimator's network trained by a strategy other than plain data parallelism.

    Parameters
    ----------
    estimator : _BaseMLP
        Fitted far enough to hold ``model_``, ``_optimizer`` and ``_criterion``.
    ctx : Context
    state : dict, optional
        What :meth:`state_dict` returned, when resuming.
    """

    def __init__(self, estimator, ctx, state=None):
        owner = type(estimator).__name__
        strategy, options, adaptive = checked_strategy(
            owner, estimator.strategy, estimator.strategy_options, estimator.adaptive_batch)
        self.estimator, self.ctx, self.kind = estimator, ctx, strategy
        if state is None and ctx.size > 1 and not isinstance(estimator.random_state,
                                                                (int, np.integer)):
            for parameter in estimator.model_.parameters():  # rank 0's initialisation
                broadcast(parameter.data, root=0, ctx=ctx, shape_known=True)
        self.strategy = self.adaptive = None
        try:
            if adaptive is not None:
                self.adaptive = AdaptiveBatchSize(*adaptive, ctx=ctx)
            if strategy is TrainingStrategy.FEDERATED:
                options.setdefault("batch_size", max(1, estimator._global_batch // ctx.size))
                options.setdefault("seed", shared_seed(estimator.random_state, ctx, 2 ** 31))
            if strategy in _CLASSES:
                self.strategy = _CLASSES[strategy](estimator.model_, estimator._optimizer,
                                                   ctx=ctx, **options)
        except (ValueError, TypeError) as error:  # options agreed: every rank raises it
            raise type(error)(f"{owner}: {error}") from None
        if state is not None:
            if self.strategy is not None:
                self.strategy.load_state_dict(state["strategy"])
            if self.adaptive is not None:
                self.adaptive.load_state_dict(state["adaptive_batch"])

    def step_function(self):
        """What replaces ``optimizer.step`` in the estimator's loop."""
        return self.strategy.step

    @property
    def own_loop(self):
        """Whether an epoch runs here (federated rounds, adaptive batches) rather than in the
        estimator's data-parallel loop."""
        return self.strategy is None or isinstance(self.strategy, FederatedAveraging)

    def epoch(self, X, targets, n_global, order_seed):
        """One epoch of a federated round or adaptive batches; returns the global loss."""
        if self.adaptive is not None:
            return self._adaptive_epoch(X, targets, n_global, order_seed)
        steps = self.strategy.steps
        loss = self.strategy.round(X, targets, self.estimator._criterion)
        self.estimator.t_ += self.strategy.steps - steps
        return loss

    def _adaptive_epoch(self, X, targets, n_global, order_seed):
        """Steps of a growing global batch until the epoch's rows are used; each step's one
        allreduce averages the gradients and measures their variance."""
        estimator, ctx, adaptive = self.estimator, self.ctx, self.adaptive
        model, optimizer, criterion = estimator.model_, estimator._optimizer, estimator._criterion
        rng = np.random.default_rng(order_seed)
        order, position = rng.permutation(len(X)), 0
        parameters = [p for p in model.parameters() if p.requires_grad]
        loss_sum = rows_done = seen = 0.0
        while seen < n_global:
            batch = adaptive.batch_size
            share = balanced_counts(batch, ctx.size)[ctx.rank]
            while position + share > len(order):  # cycle through reshuffled rows
                order, position = np.concatenate([order[position:], rng.permutation(len(X))]), 0
            rows = order[position:position + share]
            position += share
            optimizer.zero_grad()
            loss_sum += float(criterion(model(X[rows]), targets[rows])) * share
            model.backward(criterion.backward())
            adaptive.update([p.grad for p in parameters], local_batch=share, average=True)
            optimizer.step()
            rows_done += share
            seen += batch
            estimator.t_ += 1
        totals = allreduce(np.array([loss_sum, rows_done]), ctx=ctx)
        return float(totals[0] / totals[1])

    def finalize(self):
        """Every rank ends with the same network (a no-op for data parallelism)."""
        if self.strategy is not None:
            self.strategy.finalize()

    def state_dict(self):
        state = {}
        if self.strategy is not None:
            state["strategy"] = self.strategy.state_dict()
        if self.adaptive is not None:
            state["adaptive_batch"] = self.adaptive.state_dict()
        return state


def per_rank_state(tree):
    """``tree`` with every leaf as this rank's row of a ``Sharded`` array (one row per rank)."""
    if isinstance(tree, dict):
        return {key: per_rank_state(value) for key, value in tree.items()}
    return Sharded(np.asarray(tree)[None])


def own_rank_state(tree):
    """Inverse of :func:`per_rank_state` on what a restore hands back (this rank's row)."""
    if isinstance(tree, dict):
        return {key: own_rank_state(value) for key, value in tree.items()}
    value = np.asarray(tree.array if isinstance(tree, Sharded) else tree)[0]
    return value.item() if isinstance(value, np.generic) else value
