"""Targets as integers, so that histogram sums are exact at any number of ranks.

Classification targets are class codes (indices into ``classes_``); the
histograms hold integer (bootstrap-weighted) class counts.

Regression targets are fixed-point integers. Floating-point sums depend on
the order of the additions, so sums over rows split differently between
ranks would differ in the last bits and could flip a split decision.
Instead, ``y`` is mapped to ``q = round((y - center) / half_range * 2**bits)``
with ``center`` and ``half_range`` from the global minimum and maximum of
``y``, and ``bits = 52 - bit_length(n_samples * max_bootstrap_weight)``
(30 bits for 200,000 rows): every sum of ``w * q`` over any set of rows is
an exact int64 below ``2**53``, hence also exact in float64. Leaf values are
``center + half_range * (sum / weight) / 2**bits``; the rounding of ``y`` is
at most ``half_range / 2**(bits + 1)`` (about 5e-10 of the range at 30 bits).
A node whose targets are all equal gets a split score of exactly 0 and
stays a leaf.
"""
import numpy as np

from ...comm import allreduce

__all__ = ["FixedPointTarget", "class_fractions"]


def class_fractions(stats):
    """Class counts (n, n_classes) to fractions (rows summing to 1; empty rows stay 0)."""
    stats = np.asarray(stats, dtype=np.float64)
    total = stats.sum(axis=1, keepdims=True)
    return np.divide(stats, total, out=np.zeros_like(stats), where=total > 0)


class FixedPointTarget:
    """The fixed-point coding of regression targets (see the module docstring).

    Parameters
    ----------
    center, half_range : float
    bits : int
    """

    def __init__(self, center, half_range, bits):
        self.center = float(center)
        self.half_range = float(half_range)
        self.bits = int(bits)

    @classmethod
    def fit(cls, ctx, y, n_global, max_weight):
        """The coding of every rank's ``y`` (collective: one allreduce of the extremes)."""
        y = np.asarray(y, dtype=np.float64)
        extremes = np.array([y.max() if len(y) else -np.inf, -y.min() if len(y) else -np.inf])
        if ctx.size > 1:
            extremes = allreduce(extremes, op="max", ctx=ctx)
        high, low = extremes[0], -extremes[1]
        bits = max(8, 52 - int(n_global * max_weight).bit_length())
        return cls(0.5 * high + 0.5 * low, 0.5 * high - 0.5 * low, bits)

    def encode(self, y):
        """int64 fixed-point targets (values outside the fitted range are clipped)."""
        y = np.asarray(y, dtype=np.float64)
        limit = 2.0 ** self.bits
        if self.half_range == 0:
            return np.zeros(len(y), dtype=np.int64)
        q = np.rint((y - self.center) / self.half_range * limit)
        return np.clip(q, -limit, limit).astype(np.int64)

    def values(self, stats):
        """Mean target of nodes with stats ``(sum q, weight)``: shape (n, 1)."""
        stats = np.asarray(stats)
        mean = stats[:, 0].astype(np.float64) / np.maximum(stats[:, 1], 1).astype(np.float64)
        return (self.center + self.half_range * (mean / 2.0 ** self.bits))[:, None]

    def state(self):
        return {"center": self.center, "half_range": self.half_range, "bits": self.bits}

    @classmethod
    def from_state(cls, state):
        return cls(float(state["center"]), float(state["half_range"]), int(state["bits"]))
