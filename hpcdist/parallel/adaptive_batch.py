"""Adaptive batch size: grow the global batch when the gradient is too noisy.

The norm test (Byrd, Chin, Nocedal and Wu, 2012): with per-sample gradient
variance ``sigma^2`` (its trace) and mean gradient ``g``, a batch of ``B``
rows is large enough while ``sigma^2 / B <= theta * |g|^2``; otherwise the
next batch is ``sigma^2 / (theta * |g|^2)`` rows. The statistics come from
the ranks' own mini-batch gradients: rank ``r`` with ``b_r`` rows and mean
gradient ``g_r`` contributes ``b_r g_r``, ``b_r |g_r|^2`` and ``b_r`` to one
allreduce, which gives the global mean ``g`` and the unbiased estimate
``sigma^2 = (sum_r b_r |g_r - g|^2) / (size - 1)``. One rank alone has no
estimate and keeps its batch.
"""

import math
import numbers

import numpy as np

from .._arrays import array_module
from .._partition import balanced_counts
from ..comm import allreduce, resolve_context
from ..comm.agreement import agree_config
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .averaging import checked_int
from .errors import DivergenceError

__all__ = ["AdaptiveBatchSize"]


class AdaptiveBatchSize:
    """The global batch size, grown by the norm test from per-rank gradient statistics.

    Parameters
    ----------
    min_batch : int
        The first and smallest global batch (>= 1).
    max_batch : int
        The largest global batch (>= ``min_batch``).
    variance_threshold : float, default=0.01
        ``theta``: the largest allowed variance of the batch gradient relative
        to its squared norm (> 0).
    ctx : Context, optional

    Attributes
    ----------
    batch_size : int
        The current global batch; never shrinks, never exceeds ``max_batch``.
    last_ratio : float or None
        ``sigma^2 / (B |g|^2)`` measured by the last :meth:`update`.
    """

    def __init__(self, min_batch, max_batch, *, variance_threshold=0.01, ctx=None):
        name = "AdaptiveBatchSize"
        self.min_batch = checked_int(name, "min_batch", min_batch, 1)
        self.max_batch = checked_int(name, "max_batch", max_batch, self.min_batch,
                                     hint=f" (at least min_batch={self.min_batch})")
        if isinstance(variance_threshold, bool) or \
                not isinstance(variance_threshold, numbers.Real):
            raise InvalidArgumentTypeError(f"{name}: variance_threshold={variance_threshold!r} "
                                           "should be a number > 0")
        if not 0.0 < float(variance_threshold) < math.inf:
            raise InvalidArgumentError(f"{name}: variance_threshold={variance_threshold!r} should "
                                       "be a finite number > 0")
        self.variance_threshold = float(variance_threshold)
        self.ctx = resolve_context(ctx)
        self.batch_size = self.min_batch
        self.last_ratio = None
        self._agreed = False

    def local_batch(self):
        """This rank's balanced share of :attr:`batch_size`."""
        return balanced_counts(self.batch_size, self.ctx.size)[self.ctx.rank]

    def update(self, grads, *, local_batch=None, average=False):
        """Collective: the next global batch size, from this step's gradients.

        Parameters
        ----------
        grads : array or sequence of arrays
            This rank's mean gradient over its own rows of the step (e.g.
            ``[p.grad for p in model.parameters()]``), before any averaging.
        local_batch : int, optional
            The rows behind ``grads`` (default: :meth:`local_batch`).
        average : bool, default=False
            Write the global mean gradient (weighted by rows) into ``grads``:
            the same allreduce then serves data parallelism.

        Returns
        -------
        int
            The new :attr:`batch_size`.
        """
        if not self._agreed:
            agree_config(self.ctx, "AdaptiveBatchSize.update",
                         {"min_batch": self.min_batch, "max_batch": self.max_batch,
                          "variance_threshold": self.variance_threshold},
                         fix="create AdaptiveBatchSize with the same arguments on every rank")
            self._agreed = True
        grads = [grads] if hasattr(grads, "shape") else list(grads)
        if not grads or not all(hasattr(g, "shape") and hasattr(g, "dtype") for g in grads):
            raise InvalidArgumentTypeError(
                "AdaptiveBatchSize.update: grads should be an array or a non-empty sequence "
                "of arrays, e.g. [p.grad for p in model.parameters()]")
        rows = self.local_batch() if local_batch is None else checked_int(
            "AdaptiveBatchSize.update", "local_batch", local_batch, 0)
        xp = array_module(grads[0])
        dtype = np.promote_types(np.float32, grads[0].dtype)
        sizes = [g.size for g in grads]
        buffer = xp.empty(sum(sizes) + 2, dtype=dtype)
        offset = 0
        for grad, size in zip(grads, sizes):
            buffer[offset:offset + size] = grad.reshape(-1)
            offset += size
        own_norm2 = float((buffer[:-2] ** 2).sum())
        buffer[:-2] *= rows
        buffer[-2], buffer[-1] = rows * own_norm2, rows
        if self.ctx.size > 1:
            allreduce(buffer, op="sum", out=buffer, ctx=self.ctx)
        total = float(buffer[-1])
        if total <= 0:
            return self.batch_size
        if not math.isfinite(float(buffer[-2])):  # the same sum on every rank: all raise
            raise DivergenceError("AdaptiveBatchSize.update: the gradients hold NaN or "
                                  "infinity; lower the learning rate or check the loss")
        mean = buffer[:-2] / total
        if average:
            offset = 0
            for grad, size in zip(grads, sizes):
                grad[...] = mean[offset:offset + size].reshape(grad.shape)
                offset += size
        if self.ctx.size > 1:
            self._norm_test(float(buffer[-2]), float((mean ** 2).sum()), total)
        return self.batch_size

    def _norm_test(self, weighted_norm2, mean_norm2, total):
        variance = max(weighted_norm2 - total * mean_norm2, 0.0) / (self.ctx.size - 1)
        theta = self.variance_threshold
        self.last_ratio = variance / (total * mean_norm2) if mean_norm2 > 0 else math.inf
        if self.last_ratio > theta:
            wanted = variance / (theta * mean_norm2) if mean_norm2 > 0 else math.inf
            self.batch_size = int(min(self.max_batch, max(self.batch_size, math.ceil(wanted))))

    def state_dict(self):
        """``{"batch_size"}``: what resuming needs."""
        return {"batch_size": int(self.batch_size)}

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`; returns self."""
        self.batch_size = int(state["batch_size"])
        return self
