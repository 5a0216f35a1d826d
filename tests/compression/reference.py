"""NumPy references and deterministic inputs for the compression tests.

Every rank regenerates every other rank's input from ``(seed, rank)``, so the
expected result of a compressed allreduce is computed locally with plain
NumPy, without communication.
"""
import numpy as np

__all__ = ["rank_input", "integer_input", "topk_dense", "gram_schmidt", "PowerSGDReference"]


def rank_input(rank, shape, dtype=np.float32, seed=0):
    """Standard normal values of ``shape`` for ``rank`` (no ties, no zeros)."""
    rng = np.random.default_rng([seed, rank])
    return rng.standard_normal(shape).astype(dtype)


def integer_input(rank, shape, dtype=np.float32, seed=0):
    """Small integer values (sums and means by powers of two are exact)."""
    rng = np.random.default_rng([seed, rank, 7])
    return rng.integers(-16, 17, size=shape).astype(dtype)


def topk_dense(x, k):
    """Dense array keeping the k largest |x| (sorting, not selection)."""
    flat = x.reshape(-1)
    keep = np.argsort(-np.abs(flat), kind="stable")[:k]
    out = np.zeros_like(flat)
    out[keep] = flat[keep]
    return out.reshape(x.shape)


def gram_schmidt(p):
    """Orthonormal columns by classical Gram-Schmidt with projection on the
    already orthonormal columns (a copy)."""
    q = np.array(p, dtype=np.float64)
    for i in range(q.shape[1]):
        for j in range(i):
            q[:, i] -= (q[:, j] @ q[:, i]) * q[:, j]
        norm = np.linalg.norm(q[:, i])
        q[:, i] = q[:, i] / norm if norm > 0 else 0.0
    return q


class PowerSGDReference:
    """PowerSGD over all ranks at once: one power iteration per call, warm
    start, per-rank error feedback; returns the sum over ranks."""

    def __init__(self, q0, size):
        self.q = np.array(q0, dtype=np.float64)
        self.errors = [0.0] * size

    def step(self, matrices):
        ms = [np.asarray(m, dtype=np.float64) + e for m, e in zip(matrices, self.errors)]
        p = gram_schmidt(sum(m @ self.q for m in ms))
        qs = [m.T @ p for m in ms]
        self.errors = [m - p @ q.T for m, q in zip(ms, qs)]
        self.q = sum(qs)
        return p @ self.q.T
