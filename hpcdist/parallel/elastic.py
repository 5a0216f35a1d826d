"""Elastic averaging SGD: replicas tied to a center variable by an elastic force.

Synchronous EASGD (Zhang, Choromanska and LeCun, 2015). Every rank keeps
the center ``c`` (the same on every rank). Every ``period`` local steps,
with ``d_i = x_i - c`` taken after the step, one allreduce gives
``sum_i d_i`` and then

    x_i <- x_i - alpha * d_i,        c <- c + alpha * sum_i d_i

so each replica is pulled toward the center and the center toward the
replicas. The paper's ``beta = size * alpha = 0.9`` gives the default alpha.
"""

from .._arrays import array_module
from ..comm import allreduce
from ..exceptions import InvalidArgumentError
from .averaging import ModelAveraging, checked_fraction, checked_int
from .enums import AggregationMethod

__all__ = ["ElasticAveraging"]

_BETA = 0.9


class ElasticAveraging(ModelAveraging):
    """Synchronous elastic averaging (EASGD).

    Parameters
    ----------
    module, optimizer
        As for :class:`~hpcdist.parallel.LocalSGD`.
    alpha : float, optional
        The elastic coefficient, in (0, 1); default ``0.9 / size`` (the
        paper's ``beta = 0.9``).
    period : int, default=4
        Local steps between two elastic updates (the paper's ``tau``).
    aggregation : {"sync"} or AggregationMethod, default="sync"
        Only the synchronous form is implemented here.
    ctx : Context, optional

    Attributes
    ----------
    center : list of array or None
        The center variable as flat buffers (one per dtype), set at the
        first step; part of :meth:`state_dict`.

    Raises
    ------
    InvalidArgumentError
        ``alpha`` outside (0, 1), ``period < 1``, an aggregation other than
        ``"sync"``.
    """

    def __init__(self, module, optimizer, *, alpha=None, period=4, aggregation="sync",
                 ctx=None):
        self.period = checked_int("ElasticAveraging", "period", period, 1,
                                  hint=" (local steps between two elastic updates)")
        try:
            method = AggregationMethod(aggregation)
        except ValueError:
            method = None
        if method is not AggregationMethod.SYNCHRONOUS:
            raise InvalidArgumentError(
                f"ElasticAveraging: aggregation={aggregation!r} is not supported; use "
                "aggregation='sync' (synchronous EASGD)")
        self.aggregation = method.value
        super().__init__(module, optimizer, ctx, {})
        self.alpha = (_BETA / self.ctx.size if alpha is None else
                      checked_fraction("ElasticAveraging", "alpha", alpha,
                                       hint=" (the pull toward the center per update)"))
        self._options.update(alpha=self.alpha, period=self.period, aggregation=self.aggregation)
        self.center = None

    def _on_start(self):
        flats = self._buffers.pack(self.replica.arrays())
        if self.center is None:  # not restored by load_state_dict: the initial parameters
            self.center = [flat.copy() for flat in flats]
        else:
            self.center = [array_module(flat).asarray(center, dtype=flat.dtype).copy()
                           for center, flat in zip(self.center, flats)]

    def step(self):
        """The optimizer's step, and every ``period`` steps the elastic update (collective)."""
        self._start("step")
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.period == 0:
            self._elastic_update()

    def _elastic_update(self):
        flats = self._buffers.pack(self.replica.arrays())
        differences = [flat - center for flat, center in zip(flats, self.center)]
        totals = [allreduce(d, op="sum", ctx=self.ctx) for d in differences]
        self._counted(sum(d.nbytes for d in differences))
        for flat, difference, center, total in zip(flats, differences, self.center, totals):
            flat -= self.alpha * difference
            center += self.alpha * total
        self._check_finite(self.center, f"step {self.steps}")
        self._buffers.unpack(self.replica.arrays())

    def _on_finalize(self):
        self.center = [flat.copy() for flat in self._buffers.pack(self.replica.arrays())]

    def state_dict(self):
        state = super().state_dict()
        if self.center is not None:
            state["center"] = {str(index): flat.copy() for index, flat in enumerate(self.center)}
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if "center" in state:
            self.center = [state["center"][str(index)] for index in range(len(state["center"]))]
        return self
