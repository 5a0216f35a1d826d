"""Numba kernels of :class:`~hpcdist.nn.CrossEntropyLoss` for NumPy arrays (one pass each).

The NumPy expression of a softmax cross-entropy makes about a dozen array
calls; for the small batches of a pipeline's micro-batches or a small model
their fixed cost per call dominates, and one pass over the rows avoids it.
"""
import numpy as np

from .._numba import JIT, njit

__all__ = ["softmax_cross_entropy", "softmax_cross_entropy_grad"]


@njit(**JIT)
def softmax_cross_entropy(z, target, probs, losses):
    """Per row of logits ``z`` (n, C): ``losses[i] = logsumexp(z[i]) - z[i, target[i]]``
    and ``probs[i] = softmax(z[i])``, the row maximum subtracted first.

    Returns the first row whose target is outside ``[0, C)``, or -1; rows after
    it are not computed.
    """
    n, classes = z.shape
    for i in range(n):
        t = target[i]
        if t < 0 or t >= classes:
            return i
        top = z[i, 0]
        for c in range(1, classes):
            if z[i, c] > top:
                top = z[i, c]
        total = 0.0
        for c in range(classes):
            e = np.exp(z[i, c] - top)
            probs[i, c] = e
            total += e
        for c in range(classes):
            probs[i, c] /= total
        losses[i] = np.log(total) - (z[i, t] - top)
    return -1


@njit(**JIT)
def softmax_cross_entropy_grad(probs, target, scale, grad):
    """``grad = (probs - onehot(target)) * scale``; ``scale`` has one value, or one per
    row."""
    n, classes = probs.shape
    per_row = scale.shape[0] > 1
    for i in range(n):
        s = scale[i] if per_row else scale[0]
        t = target[i]
        for c in range(classes):
            g = probs[i, c]
            if c == t:
                g -= 1
            grad[i, c] = g * s
