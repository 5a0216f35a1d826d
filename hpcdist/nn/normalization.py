"""Batch normalisation: BatchNorm1d, and SyncBatchNorm with statistics over all ranks.

In training mode (or without running statistics) the input is normalised with
the mean and biased variance of the batch, per feature; the running
statistics follow PyTorch's rule::

    running_mean = (1 - momentum) * running_mean + momentum * mean
    running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)

(the unbiased variance; ``momentum=None`` takes the cumulative average,
``momentum = 1 / num_batches_tracked``). Evaluation mode normalises with the
running statistics.
"""
import numbers

import numpy as np

from ..comm import allreduce, resolve_context
from ..exceptions import InvalidArgumentError
from .layers import (
    cached,
    check_float_dtype,
    check_grad_output,
    check_positive_int,
    compute_dtype,
    float_input,
)
from .module import Module, Parameter, array_module

__all__ = ["BatchNorm1d", "SyncBatchNorm"]


class BatchNorm1d(Module):
    """Normalise each feature over the batch, then scale and shift.

    ``y = (x - mean) / sqrt(var + eps) * weight + bias`` per feature.

    Parameters
    ----------
    num_features : int
        C, the size of axis 1 of the input.
    eps : float, default=1e-5
        Added to the variance for stability.
    momentum : float in [0, 1] or None, default=0.1
        Weight of the new batch in the running statistics; None gives the
        cumulative average over all batches.
    affine : bool, default=True
        Learn ``weight`` (initially ones) and ``bias`` (zeros).
    track_running_stats : bool, default=True
        Keep ``running_mean``, ``running_var`` and ``num_batches_tracked``
        buffers and use them in evaluation mode. Without them, batch
        statistics are used in both modes and the buffers are None.
    dtype : dtype, default=numpy.float32
        Dtype of parameters and running statistics.
    xp : module, default=numpy
        ``numpy`` or ``cupy``: where parameters and buffers live.

    Attributes
    ----------
    weight, bias : Parameter of shape (num_features,) or None
    running_mean : ndarray of shape (num_features,) or None
    running_var : ndarray of shape (num_features,) or None
    num_batches_tracked : 0-d int64 ndarray or None

    Notes
    -----
    Input: ndarray of shape (n_samples, C) or (n_samples, C, length);
    statistics are taken over every axis except axis 1. Output and input
    gradient have the input's shape and dtype; float16 inputs compute in
    float32. Training needs more than one value per feature.
    """

    _count_note = ""  # what the "more than one value" error adds about the count

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, dtype=np.float32, xp=np):
        super().__init__()
        name = type(self).__name__
        self.num_features = check_positive_int(name, "num_features", num_features)
        if (isinstance(eps, bool) or not isinstance(eps, numbers.Real)
                or not 0 <= eps < np.inf):
            raise InvalidArgumentError(f"{name}: eps={eps!r} should be a finite number >= 0")
        if momentum is not None and (isinstance(momentum, bool)
                                     or not isinstance(momentum, numbers.Real)
                                     or not 0 <= momentum <= 1):
            raise InvalidArgumentError(
                f"{name}: momentum={momentum!r} should be in [0, 1], or None for "
                "a cumulative average")
        dtype = check_float_dtype(name, dtype)
        self.eps = float(eps)
        self.momentum = None if momentum is None else float(momentum)
        self.affine = bool(affine)
        self.track_running_stats = bool(track_running_stats)
        if self.affine:
            self.weight = Parameter(xp.ones(self.num_features, dtype=dtype))
            self.bias = Parameter(xp.zeros(self.num_features, dtype=dtype))
        else:
            self.weight = None
            self.bias = None
        if self.track_running_stats:
            self.register_buffer("running_mean", xp.zeros(self.num_features, dtype=dtype))
            self.register_buffer("running_var", xp.ones(self.num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", xp.zeros((), dtype=np.int64))
        else:
            self.running_mean = None
            self.running_var = None
            self.num_batches_tracked = None

    def reset_running_stats(self):
        """Running mean 0, running variance 1, no batches tracked."""
        if self.track_running_stats:
            self.running_mean[...] = 0
            self.running_var[...] = 1
            self.num_batches_tracked[...] = 0

    # -- statistics (SyncBatchNorm overrides these two) --------------------------------
    def _batch_stats(self, x, axes):
        """Mean, biased variance (shape (C,), dtype of ``x``) and count of ``x``."""
        count = x.size // self.num_features
        mean = x.sum(axis=axes) / max(count, 1)
        centered = x - _per_feature(mean, x.ndim)
        var = (centered * centered).sum(axis=axes) / max(count, 1)
        return mean, var, count

    def _reduce_grad_sums(self, sums):
        """Sums over the whole batch of [sum(dy), sum(dy * xhat)] (stacked, shape (2, C))."""
        return sums

    # -- computation ----------------------------------------------------------------------
    def _check_input(self, x):
        name = type(self).__name__
        x = float_input(name, x)
        if x.ndim not in (2, 3) or x.shape[1] != self.num_features:
            raise InvalidArgumentError(
                f"{name}(num_features={self.num_features}) got input of shape "
                f"{tuple(x.shape)}; expected (n_samples, {self.num_features}) or "
                f"(n_samples, {self.num_features}, length)")
        return x

    def forward(self, x):
        """
        Parameters
        ----------
        x : ndarray of shape (n_samples, C) or (n_samples, C, length)

        Returns
        -------
        ndarray of the shape and dtype of ``x``
        """
        x = self._check_input(x)
        dtype = compute_dtype(x.dtype)
        xc = x.astype(dtype, copy=False)
        axes = (0,) if x.ndim == 2 else (0, 2)
        use_batch = self.training or not self.track_running_stats
        if use_batch:
            mean, var, count = self._batch_stats(xc, axes)
            if self.training and count <= 1:
                raise InvalidArgumentError(
                    f"{type(self).__name__}: training needs more than one value "
                    f"per feature, got input of shape {tuple(x.shape)}"
                    f"{self._count_note.format(count)}; use larger batches or "
                    "eval()")
            if self.training and self.track_running_stats:
                self._update_running_stats(mean, var, count)
        else:
            mean = self.running_mean.astype(dtype, copy=False)
            var = self.running_var.astype(dtype, copy=False)
            count = None
        xp = array_module(xc)
        invstd = 1 / xp.sqrt(var + dtype.type(self.eps))
        xhat = (xc - _per_feature(mean, x.ndim)) * _per_feature(invstd, x.ndim)
        out = xhat
        if self.affine:
            out = (xhat * _per_feature(self.weight.data.astype(dtype, copy=False), x.ndim)
                   + _per_feature(self.bias.data.astype(dtype, copy=False), x.ndim))
        self._cache = (x.dtype, xhat, invstd, count if use_batch else None, axes)
        return out.astype(x.dtype, copy=False)

    def _update_running_stats(self, mean, var, count):
        self.num_batches_tracked += 1
        if self.momentum is None:
            factor = 1.0 / float(self.num_batches_tracked)
        else:
            factor = self.momentum
        dtype = self.running_mean.dtype
        self.running_mean *= dtype.type(1 - factor)
        self.running_mean += (factor * mean).astype(dtype, copy=False)
        unbiased = var * (count / (count - 1))
        self.running_var *= dtype.type(1 - factor)
        self.running_var += (factor * unbiased).astype(dtype, copy=False)

    def backward(self, grad_output):
        """
        Parameters
        ----------
        grad_output : ndarray of the forward output's shape

        Returns
        -------
        ndarray
            The gradient with respect to the input, in the input's dtype.
            ``weight.grad`` (``sum(dy * xhat)``) and ``bias.grad``
            (``sum(dy)``) accumulate this rank's sums, in that order.
        """
        in_dtype, xhat, invstd, count, axes = cached(self, "_cache")
        xp = array_module(xhat)
        g = check_grad_output(type(self).__name__, grad_output, xhat.shape, xp)
        g = g.astype(xhat.dtype, copy=False)
        ndim = xhat.ndim
        local = xp.stack([g.sum(axis=axes), (g * xhat).sum(axis=axes)])
        total = self._reduce_grad_sums(local) if count is not None else None
        scale = invstd
        if self.affine:
            if self.weight.requires_grad:
                self.weight.accumulate_grad(local[1])
            if self.bias.requires_grad:
                self.bias.accumulate_grad(local[0])
            scale = scale * self.weight.data.astype(xhat.dtype, copy=False)
        if count is None:  # running statistics are constants
            grad_input = g * _per_feature(scale, ndim)
        else:
            mean_g = _per_feature(total[0] / count, ndim)
            mean_gx = _per_feature(total[1] / count, ndim)
            grad_input = (g - mean_g - xhat * mean_gx) * _per_feature(scale, ndim)
        return grad_input.astype(in_dtype, copy=False)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class SyncBatchNorm(BatchNorm1d):
    """BatchNorm1d whose batch statistics cover the batches of all ranks.

    In training mode (or without running statistics) ``forward`` makes one
    allreduce of [sum(x), sum(x**2), count] per feature, so every rank
    normalises with the mean and variance of the gathered batch, and
    ``backward`` makes one allreduce of [sum(dy), sum(dy * xhat)], so the
    input gradient on each rank is the gathered-batch BatchNorm gradient of
    its rows. Parameter gradients hold this rank's sums (data parallelism
    combines them). Ranks may have different batch sizes, including zero
    rows; every rank must call forward and backward the same number of
    times. A context of size 1 makes no MPI call and equals BatchNorm1d.

    Parameters
    ----------
    num_features, eps, momentum, affine, track_running_stats, dtype, xp
        As :class:`BatchNorm1d`.
    ctx : Context, optional
        The ranks to synchronise over; the default context when None
        (resolved at the first forward).

    Notes
    -----
    Local sums are accumulated in float64 (sums of squares around the local
    mean, then shifted), so the global variance does not lose precision to
    cancellation. Evaluation mode with running statistics communicates
    nothing.
    """

    _count_note = " ({} values over all ranks)"

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, *, ctx=None, dtype=np.float32, xp=np):
        super().__init__(num_features, eps, momentum, affine, track_running_stats,
                         dtype=dtype, xp=xp)
        self.ctx = ctx
        self._used_ctx = None

    def _context(self):
        return resolve_context(self.ctx)

    def _batch_stats(self, x, axes):
        ctx = self._used_ctx = self._context()
        if ctx.size == 1:
            return super()._batch_stats(x, axes)
        xp = array_module(x)
        count = x.size // self.num_features
        total = x.sum(axis=axes, dtype=np.float64)
        # sum(x**2) = sum(d**2) + 2 m sum(d) + n m**2 with d = x - m, for m the local
        # mean rounded to x's dtype (the same m on both sides keeps it exact)
        shift = (total / max(count, 1)).astype(x.dtype)
        centered = x - _per_feature(shift, x.ndim)
        shift = shift.astype(np.float64)
        squares = ((centered * centered).sum(axis=axes, dtype=np.float64)
                   + 2 * shift * centered.sum(axis=axes, dtype=np.float64)
                   + count * shift * shift)
        stats = xp.concatenate([total, squares, xp.full(1, count, dtype=np.float64)])
        stats = allreduce(stats, op="sum", ctx=ctx)
        c = self.num_features
        global_count = int(round(float(stats[2 * c])))
        mean = stats[:c] / max(global_count, 1)
        var = xp.maximum(stats[c:2 * c] / max(global_count, 1) - mean * mean, 0)
        return mean.astype(x.dtype), var.astype(x.dtype), global_count

    def _reduce_grad_sums(self, sums):
        ctx = self._used_ctx
        if ctx is None or ctx.size == 1:
            return sums
        return allreduce(sums, op="sum", ctx=ctx)

    @classmethod
    def convert_sync_batchnorm(cls, module, *, ctx=None):
        """Replace every BatchNorm1d in ``module`` by a SyncBatchNorm.

        The new layers share the old ones' Parameter objects and buffers (an
        optimizer built before the conversion keeps working) and their mode.

        Parameters
        ----------
        module : Module
        ctx : Context, optional

        Returns
        -------
        Module
            ``module`` with its BatchNorm1d children replaced, or a new
            SyncBatchNorm when ``module`` itself is a BatchNorm1d.
        """
        if isinstance(module, BatchNorm1d) and not isinstance(module, SyncBatchNorm):
            reference = module.weight.data if module.affine else module.running_mean
            dtype = reference.dtype if reference is not None else np.float32
            xp = array_module(reference) if reference is not None else np
            new = cls(module.num_features, module.eps, module.momentum, module.affine,
                      module.track_running_stats, ctx=ctx, dtype=dtype, xp=xp)
            if module.affine:
                new.weight, new.bias = module.weight, module.bias
            for name, buffer in module._buffers.items():
                new._buffers[name] = buffer
            new.train(module.training)
            return new
        for name, child in list(module._modules.items()):
            module._modules[name] = cls.convert_sync_batchnorm(child, ctx=ctx)
        return module


def _per_feature(values, ndim):
    """A (C,) array shaped to broadcast against (N, C) or (N, C, L)."""
    return values if ndim == 2 else values[:, None]
