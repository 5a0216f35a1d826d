"""Elastic averaging SGD: replicas tied to a center variable by an elastic force.

EASGD (Zhang, Choromanska and LeCun, 2015). Synchronous: every rank keeps
the center ``c`` (the same on every rank). Every ``period`` local steps,
with ``d_i = x_i - c`` taken after the step, one allreduce gives
``sum_i d_i`` and then

    x_i <- x_i - alpha * d_i,        c <- c + alpha * sum_i d_i

so each replica is pulled toward the center and the center toward the
replicas. The paper's ``beta = size * alpha = 0.9`` gives the default alpha.

Asynchronous: the center lives on a :class:`ParameterServer` (mode
``"async"``); every ``period`` steps a rank pulls ``c``, moves
``x_i <- x_i - alpha * (x_i - c)`` and pushes ``alpha * (x_i - c)`` to the
center, without waiting for the other ranks.
"""

from .._arrays import array_module
from ..comm import allreduce, broadcast
from ..exceptions import InvalidArgumentError
from .averaging import ModelAveraging, checked_fraction, checked_int
from .enums import AggregationMethod
from .parameter_server import ParameterServer

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
    aggregation : {"sync", "async"} or AggregationMethod, default="sync"
        ``"async"`` keeps the center on a parameter server (see above).
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
        ``"sync"`` or ``"async"``.
    """

    def __init__(self, module, optimizer, *, alpha=None, period=4, aggregation="sync",
                 ctx=None):
        self.period = checked_int("ElasticAveraging", "period", period, 1,
                                  hint=" (local steps between two elastic updates)")
        try:
            method = AggregationMethod(aggregation)
        except ValueError:
            method = None
        if method not in (AggregationMethod.SYNCHRONOUS, AggregationMethod.ASYNCHRONOUS):
            raise InvalidArgumentError(
                f"ElasticAveraging: aggregation={aggregation!r} is not supported; use "
                "aggregation='sync' (synchronous EASGD) or 'async' (the center on a parameter "
                "server)")
        self.aggregation = method.value
        super().__init__(module, optimizer, ctx, {})
        self.alpha = (_BETA / self.ctx.size if alpha is None else
                      checked_fraction("ElasticAveraging", "alpha", alpha,
                                       hint=" (the pull toward the center per update)"))
        self._options.update(alpha=self.alpha, period=self.period, aggregation=self.aggregation)
        self.center = None
        self.server = None
        self._center_from_rank_0 = False  # set by a recovery while a center was served
        if self.ctx.fault_tolerance is not None:
            self.ctx.on_recovery(self._after_recovery)

    def _after_recovery(self):
        """The context was recovered from a lost rank: an asynchronous center's server
        cannot go on (the lost rank held part of it); the next step serves the center
        (restored with the strategy's state, or this rank's) on a new one."""
        if self.server is not None:
            self.server._after_recovery()
            self.server = None
            self._buffers = None
            self._center_from_rank_0 = True

    def _on_start(self):
        flats = self._buffers.pack(self.replica.arrays())
        if self.center is None:  # not restored by load_state_dict: the initial parameters
            self.center = [flat.copy() for flat in flats]
        else:
            self.center = [array_module(flat).asarray(center, dtype=flat.dtype).copy()
                           for center, flat in zip(self.center, flats)]
        if self.aggregation == AggregationMethod.ASYNCHRONOUS.value:
            if self._center_from_rank_0:
                # after a recovery: an asynchronous center is each rank's last pull, so the
                # new server starts from rank 0's (the lowest survivor's)
                self.center = [broadcast(center, root=0, ctx=self.ctx) for center in self.center]
                self._center_from_rank_0 = False
            self.server = ParameterServer(mode="async", ctx=self.ctx)
            for index, center in enumerate(self.center):
                self.server.set_parameters(f"center{index}", center)

    def step(self):
        """The optimizer's step, and every ``period`` steps the elastic update (collective)."""
        self._start("step")
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.period == 0:
            if self.server is None:
                self._elastic_update()
            else:
                self._elastic_exchange()

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

    def _elastic_exchange(self):
        """Asynchronous: pull the center, move toward it, push the center's move."""
        flats = self._buffers.pack(self.replica.arrays())
        for index, (flat, center) in enumerate(zip(flats, self.center)):
            name = f"center{index}"
            center[...] = self.server.get_parameters(name)
            move = flat - center
            move *= self.alpha
            flat -= move
            self.server.accumulate_gradient(name, -move)
            self.server.apply_gradients(name, 1.0)
            center += move
            self._counted(2 * move.nbytes)
        self._check_finite(flats, f"step {self.steps}")
        self._buffers.unpack(self.replica.arrays())

    def _on_finalize(self):
        self.center = [flat.copy() for flat in self._buffers.pack(self.replica.arrays())]
        if self.server is not None:  # the next step serves the new center on a new server
            self.server.close()
            self.server = None
            self._buffers = None

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
