"""Sparsifying compressors: keep k of n elements (top-k by magnitude, or random)."""
import math

import numpy as np

from .. import kernels
from .base import Compressor, finish, kernel_dtype, kernel_input, validate_ratio

__all__ = ["TopKCompressor", "RandomKCompressor", "k_for_ratio"]


def k_for_ratio(n, ratio):
    """Number of elements kept of ``n`` at ``ratio``: ``ceil(ratio * n)``, at least
    1 for non-empty input (a tiny tolerance keeps ``0.01 * 1000`` at 10)."""
    if n == 0:
        return 0
    return min(n, max(1, math.ceil(ratio * n - 1e-9)))



def _scatter(indices, values, meta):
    dense = np.zeros(int(np.prod(meta["shape"], dtype=np.int64)), dtype=kernel_dtype(meta["dtype"]))
    if indices.size:
        kernels.scatter_add(dense, np.ascontiguousarray(indices, dtype=np.int64),
                            np.ascontiguousarray(values, dtype=dense.dtype))
    return finish(dense, meta)


class TopKCompressor(Compressor):
    """Keep the ``k = ceil(ratio * n)`` elements of largest magnitude.

    Payload ``(indices int64 of shape (k,), values of shape (k,))``; the index
    sets differ between ranks, so payloads are gathered
    (``collective = "allgather"``). Biased: combine with
    :class:`~hpcdist.compression.ErrorFeedback`.

    Parameters
    ----------
    ratio : float in (0, 1]
        Fraction of the elements kept.
    approximate : bool, default=False
        Use the threshold-sampled approximate top-k (Deep Gradient
        Compression) instead of the exact selection.
    sample_size : int, optional
        Sample size of the approximate threshold (the kernel's default when None).
    """

    collective = "allgather"

    def __init__(self, ratio, *, approximate=False, sample_size=None):
        super().__init__()
        self.ratio = validate_ratio(ratio, "TopKCompressor")
        self.approximate = bool(approximate)
        self.sample_size = sample_size

    def __repr__(self):
        return f"TopKCompressor(ratio={self.ratio!r})"

    def compress(self, x, name):
        """Return ``((indices, values), meta)``."""
        flat, meta = self._prepare(x, name)
        work = kernel_input(flat)
        k = k_for_ratio(work.size, self.ratio)
        if self.approximate:
            indices, values = kernels.topk_threshold(work, k, sample_size=self.sample_size)
        else:
            indices, values = kernels.topk(work, k)
        meta["k"] = k
        return (np.asarray(indices, dtype=np.int64), values), meta

    def decompress(self, payload, meta):
        """Dense array with the values at their indices and zeros elsewhere."""
        indices, values = payload
        return _scatter(indices, values, meta)

    def subtract_sent(self, residual, payload, meta):
        """``residual -= decompress(payload)``: only the kept entries change."""
        indices, values = payload
        residual[indices] -= values

    def decompress_add(self, out, payload, meta):
        """Add the decompressed payload into ``out`` (flat, float32/float64) in place."""
        indices, values = payload
        if indices.size:
            kernels.scatter_add(out, np.ascontiguousarray(indices, dtype=np.int64),
                                np.ascontiguousarray(values, dtype=out.dtype))
        return out


class RandomKCompressor(Compressor):
    """Keep ``k = ceil(ratio * n)`` elements at random indices shared by all ranks.

    The indices of call number ``t`` for tensor ``name`` come from
    ``randomk_indices(n, k, call_seed(seed, name, t))``: every rank draws the
    same indices as long as all ranks compress the same names equally often,
    so only the values travel and they are summed
    (``collective = "allreduce"``). Payload ``(values of shape (k,),)``; the
    indices stay in ``meta``. Values are not rescaled by ``n / k`` (biased,
    like top-k): combine with :class:`~hpcdist.compression.ErrorFeedback`.

    Parameters
    ----------
    ratio : float in (0, 1]
    seed : int, default=0
        Must be the same on every rank.
    """

    collective = "allreduce"

    def __init__(self, ratio, seed=0):
        super().__init__()
        self.ratio = validate_ratio(ratio, "RandomKCompressor")
        self.seed = int(seed)

    def __repr__(self):
        return f"RandomKCompressor(ratio={self.ratio!r}, seed={self.seed!r})"

    def compress(self, x, name):
        """Return ``((values,), meta)``; ``meta["indices"]`` holds the indices."""
        flat, meta = self._prepare(x, name)
        work = kernel_input(flat)
        k = k_for_ratio(work.size, self.ratio)
        seed = self._next_call_seed(name)
        indices = np.asarray(kernels.randomk_indices(work.size, k, seed), dtype=np.int64)
        meta.update(k=k, seed=seed, indices=indices)
        return (np.ascontiguousarray(work[indices]),), meta

    def decompress(self, payload, meta):
        """Dense array with the values at ``meta["indices"]`` and zeros elsewhere."""
        return _scatter(meta["indices"], payload[0], meta)

    def subtract_sent(self, residual, payload, meta):
        """``residual -= decompress(payload)``: only the drawn entries change."""
        residual[meta["indices"]] -= payload[0]
