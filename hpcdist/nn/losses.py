"""Losses: CrossEntropyLoss and MSELoss.

A loss is a :class:`~hpcdist.nn.module.Module` whose ``forward(pred, target)``
returns the loss and whose ``backward(grad_output=1.0)`` returns
dLoss/dpred times ``grad_output``::

    loss = criterion(model(x), y)
    model.backward(criterion.backward())

With ``reduction="mean"`` or ``"sum"`` the loss is a Python float for NumPy
inputs and a 0-d array for CuPy inputs (no device synchronisation; use
``float(loss)`` to read it). ``reduction="none"`` returns the per-sample
(CrossEntropyLoss) or per-element (MSELoss) losses as an array. float16
inputs compute in float32; gradients come back in the input's dtype.
"""
import math

import numpy as np

from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from ._softmax_kernels import softmax_cross_entropy, softmax_cross_entropy_grad
from .layers import cached, compute_dtype, float_input
from .module import Module, array_module

__all__ = ["CrossEntropyLoss", "MSELoss"]

_REDUCTIONS = ("mean", "sum", "none")


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise InvalidArgumentError(
                f"{type(self).__name__}: reduction={reduction!r} should be one of "
                f"{', '.join(map(repr, _REDUCTIONS))}")
        self.reduction = reduction

    def _reduce(self, losses, xp):
        if self.reduction == "none":
            return losses
        total = losses.sum()
        if self.reduction == "mean":
            total = total / losses.size if losses.size else total * np.nan
        return float(total) if xp is np else total

    def _grad_scale(self, grad_output, shape, xp):
        """``grad_output`` (times 1/n for "mean"), shaped to broadcast over ``shape``."""
        name = type(self).__name__
        if self.reduction == "none":
            if np.ndim(grad_output) == 0:
                return grad_output
            grad_output = _as_array(grad_output, xp)
            if tuple(grad_output.shape) != tuple(shape):
                raise InvalidArgumentError(
                    f"{name}.backward: grad_output has shape "
                    f"{tuple(grad_output.shape)}; with reduction='none' it must be "
                    f"a scalar or have the loss's shape {tuple(shape)}")
            return grad_output
        if np.ndim(grad_output) != 0:
            raise InvalidArgumentError(f"{name}.backward: grad_output should be a scalar with "
                                       f"reduction={self.reduction!r}, got shape "
                                       f"{tuple(np.shape(grad_output))}")
        if self.reduction == "mean":
            n = math.prod(shape)
            return grad_output / n if n else grad_output
        return grad_output

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits against integer class labels.

    ``loss_i = logsumexp(logits[i]) - logits[i, target[i]]``, computed as a
    numerically stable log-softmax (the row maximum is subtracted first).

    Parameters
    ----------
    reduction : {"mean", "sum", "none"}, default="mean"
        Average or sum over samples, or the per-sample losses of shape
        (n_samples,). The mean of zero samples is NaN.

    Notes
    -----
    ``forward(logits, target)``: logits ndarray of shape (n_samples,
    n_classes), float; target ndarray of shape (n_samples,), integer in
    [0, n_classes). ``backward(grad_output=1.0)`` returns
    ``(softmax(logits) - onehot(target)) * grad_output`` (divided by
    n_samples for "mean"), of the logits' shape and dtype.
    """

    def forward(self, logits, target):
        """
        Parameters
        ----------
        logits : ndarray of shape (n_samples, n_classes)
        target : ndarray of shape (n_samples,), integer

        Returns
        -------
        float, 0-d array, or ndarray of shape (n_samples,) (reduction="none")
        """
        logits = float_input("CrossEntropyLoss", logits, what="logits")
        if logits.ndim != 2 or logits.shape[1] == 0:
            raise InvalidArgumentError(
                "CrossEntropyLoss expects logits of shape (n_samples, n_classes) "
                f"with n_classes >= 1, got shape {tuple(logits.shape)}")
        xp = array_module(logits)
        n, n_classes = logits.shape
        target = _as_array(target, xp)
        if target.dtype.kind not in "iu":
            raise InvalidArgumentTypeError(
                "CrossEntropyLoss: target must hold integer class indices, got "
                f"dtype {target.dtype}; convert it with target.astype(numpy.int64)")
        if tuple(target.shape) != (n,):
            raise InvalidArgumentError(
                f"CrossEntropyLoss: target has shape {tuple(target.shape)} but "
                f"logits have shape {tuple(logits.shape)}; expected target of "
                f"shape ({n},), one class index per sample")
        z = logits.astype(compute_dtype(logits.dtype), copy=False)
        if xp is np:  # one Numba pass (the array calls below cost more for small batches)
            z, target = np.ascontiguousarray(z), np.ascontiguousarray(target)
            probs, losses = np.empty_like(z), np.empty(n, dtype=z.dtype)
            if softmax_cross_entropy(z, target, probs, losses) >= 0:
                _out_of_range(target, n_classes)
            self._cache = (logits.dtype, probs, target)  # backward's kernel takes both
            return self._reduce(losses, xp)
        if n:
            low, high = int(target.min()), int(target.max())
            if low < 0 or high >= n_classes:
                _out_of_range(target, n_classes)
        probs, losses = softmax_cross_entropy_arrays(z, target, xp)
        self._cache = (logits.dtype, probs, target)
        return self._reduce(losses, xp)

    def backward(self, grad_output=1.0):
        """
        Parameters
        ----------
        grad_output : float, or ndarray of shape (n_samples,) for reduction="none"

        Returns
        -------
        ndarray of shape (n_samples, n_classes)
            dLoss/dlogits times ``grad_output``, in the logits' dtype.
        """
        dtype, probs, target = cached(self, "_cache")
        xp = array_module(probs)
        n = probs.shape[0]
        scale = self._grad_scale(grad_output, (n,), xp)
        if xp is np:
            grad = np.empty_like(probs)
            softmax_cross_entropy_grad(probs, target,
                                       np.asarray(scale, dtype=probs.dtype).reshape(-1), grad)
            return grad.astype(dtype, copy=False)
        return softmax_cross_entropy_grad_arrays(probs, target, scale, xp).astype(dtype,
                                                                                  copy=False)


def softmax_cross_entropy_arrays(z, target, xp):
    """``(softmax(z), per-row losses)`` as array expressions of ``xp`` (CuPy's path; NumPy
    arrays take the one-pass kernel)."""
    z = z - z.max(axis=1, keepdims=True)
    log_probs = z - xp.log(xp.exp(z).sum(axis=1, keepdims=True))
    return xp.exp(log_probs), -log_probs[xp.arange(z.shape[0]), target]


def softmax_cross_entropy_grad_arrays(probs, target, scale, xp):
    """``(probs - onehot(target)) * scale`` (one scale, or one per row) as array
    expressions of ``xp``."""
    grad = probs.copy()
    grad[xp.arange(probs.shape[0]), target] -= 1
    if np.ndim(scale):
        scale = xp.asarray(scale, dtype=grad.dtype)[:, None]
    grad *= scale
    return grad


def _out_of_range(target, n_classes):
    low, high = int(target.min()), int(target.max())
    raise InvalidArgumentError(
        f"CrossEntropyLoss: target value {low if low < 0 else high} is out of range: class "
        f"indices must be in [0, {n_classes}) for {n_classes} classes (target values range "
        f"over [{low}, {high}])")


class MSELoss(_Loss):
    """Mean squared error ``(pred - target) ** 2``, averaged or summed over all elements.

    Parameters
    ----------
    reduction : {"mean", "sum", "none"}, default="mean"
        Average or sum over every element, or the elementwise losses of
        ``pred``'s shape.

    Notes
    -----
    ``target`` must have ``pred``'s shape, with one exception: a target of
    shape (n_samples,) for a prediction of shape (n_samples, 1) (a single
    output column), or the reverse, is taken as the same column. Any other
    mismatch raises ValueError rather than broadcasting. ``backward``
    returns ``2 * (pred - target) * grad_output`` (divided by ``pred.size``
    for "mean") of ``pred``'s shape and dtype.
    """

    def forward(self, pred, target):
        """
        Parameters
        ----------
        pred : ndarray of any shape, float
        target : ndarray of ``pred``'s shape (see the shape rule above), numeric

        Returns
        -------
        float, 0-d array, or ndarray of ``pred``'s shape (reduction="none")
        """
        pred = float_input("MSELoss", pred, what="pred")
        xp = array_module(pred)
        target = _as_array(target, xp)
        if target.dtype.kind not in "iuf":
            raise InvalidArgumentTypeError(
                f"MSELoss: target must be numeric, got dtype {target.dtype}")
        if tuple(target.shape) != tuple(pred.shape):
            column = ((pred.ndim == 2 and pred.shape[1] == 1 and target.shape == pred.shape[:1])
                      or (target.ndim == 2 and target.shape[1] == 1
                          and pred.shape == target.shape[:1]))
            if not column:
                raise InvalidArgumentError(
                    f"MSELoss: target has shape {tuple(target.shape)} but pred has "
                    f"shape {tuple(pred.shape)}; they must be equal (only (n,) "
                    "against (n, 1) is accepted); reshape one of them, no "
                    "broadcasting is done")
            target = target.reshape(pred.shape)
        dtype = compute_dtype(pred.dtype)
        diff = pred.astype(dtype, copy=False) - target.astype(dtype, copy=False)
        self._cache = (pred.dtype, diff)
        return self._reduce(diff * diff, xp)

    def backward(self, grad_output=1.0):
        """
        Parameters
        ----------
        grad_output : float, or ndarray of ``pred``'s shape for reduction="none"

        Returns
        -------
        ndarray of ``pred``'s shape and dtype
        """
        dtype, diff = cached(self, "_cache")
        xp = array_module(diff)
        scale = self._grad_scale(grad_output, diff.shape, xp)
        return (2 * diff * scale).astype(dtype, copy=False)


def _as_array(value, xp):
    """``value`` as an array of ``xp`` (lists, NumPy arrays for CuPy inputs)."""
    if hasattr(value, "shape") and hasattr(value, "dtype") and array_module(value) is xp:
        return value
    return xp.asarray(value)
