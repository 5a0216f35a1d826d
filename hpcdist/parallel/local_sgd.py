"""Local SGD: replicas step on their own gradients and average parameters every few steps.

Post-local SGD (Lin et al., 2020), as torch's ``PeriodicModelAverager``:
during the first ``warmup_steps`` steps the gradients are averaged every step
(as data parallelism does); afterwards every rank steps on its own gradient
and all parameters are averaged, in one coalesced allreduce, every
``period`` steps. ``period=1`` with plain SGD trains exactly like
:class:`~hpcdist.parallel.DistributedDataParallel`.

Examples
--------
>>> s = hpcdist.parallel.LocalSGD(model, optimizer, period=8)      # doctest: +SKIP
>>> for x, y in batches:                                            # doctest: +SKIP
...     optimizer.zero_grad(); criterion(model(x), y)
...     model.backward(criterion.backward()); s.step()
>>> s.finalize()                                                    # doctest: +SKIP
"""

from ..comm import allreduce
from .averaging import ModelAveraging, checked_int
from .replica import FlatBuffers

__all__ = ["LocalSGD"]


class LocalSGD(ModelAveraging):
    """Periodic model averaging (post-local SGD).

    Parameters
    ----------
    module, optimizer
        The model (an hpcdist.nn or torch module, not DDP-wrapped, the same on
        every rank) and its optimizer (hpcdist.nn.optim or torch.optim), whose
        ``step()`` :meth:`step` calls.
    period : int, default=8
        Local steps between two averages of the parameters (>= 1).
    warmup_steps : int, default=0
        Steps at the start whose gradients are averaged before the step.
    ctx : Context, optional

    Raises
    ------
    InvalidArgumentError
        ``period < 1`` or ``warmup_steps < 0``.
    ConfigMismatchError
        At the first :meth:`step`, on every rank, when options or the model
        differ between ranks.
    DivergenceError
        NaN or infinity in the parameters after an average (every rank).
    """

    def __init__(self, module, optimizer, *, period=8, warmup_steps=0, ctx=None):
        self.period = checked_int("LocalSGD", "period", period, 1,
                                  hint=" (local steps between two averages)")
        self.warmup_steps = checked_int("LocalSGD", "warmup_steps", warmup_steps, 0)
        super().__init__(module, optimizer, ctx,
                         {"period": self.period, "warmup_steps": self.warmup_steps})
        self._gradients = None

    def step(self):
        """The optimizer's step; gradients averaged first during the warm-up, parameters
        averaged after it every ``period`` steps (collective)."""
        self._start("step")
        if self.steps < self.warmup_steps and self.ctx.size > 1:
            self._average_gradients()
        self.optimizer.step()
        self.steps += 1
        after_warmup = self.steps - self.warmup_steps
        if after_warmup > 0 and after_warmup % self.period == 0 and self.ctx.size > 1:
            flats = self._allreduce_parameters()
            self._check_finite(flats, f"step {self.steps}")
            self._buffers.unpack(self.replica.arrays())

    def _average_gradients(self):
        gradients = self.replica.gradients()
        if self._gradients is None:
            self._gradients = FlatBuffers(gradients)
        flats = self._gradients.pack(gradients)
        for flat in flats:
            allreduce(flat, op="mean", out=flat, ctx=self.ctx)
        self._counted(self._gradients.nbytes)
        self._gradients.unpack(gradients)
