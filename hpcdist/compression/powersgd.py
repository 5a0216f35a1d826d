"""PowerSGD: rank-r factors of the gradient matrix, in two allreduce rounds.

Protocol (Vogels et al., 2019), one power iteration per call, for a tensor
reshaped to ``M`` of shape (n, m) (first dimension by the rest):

1. ``compress``: ``M = G + E`` (this rank's error), ``P = M @ Q`` with ``Q``
   of shape (m, r) the warm start of the name (the previous call's reduced
   ``Q``, at first a Gaussian matrix from the seed, the same on every rank).
   Payload ``(P,)``, ``meta["stage"] == "P"``.
2. the caller allreduces (sums) ``P``.
3. ``next_round(payload, meta)``: orthonormalize the columns of the reduced
   ``P`` (Gram-Schmidt; identical on every rank), ``Q = M.T @ P``, and the
   error ``E = M - P @ Q.T`` of this rank is kept for the next call.
   Returns payload ``(Q,)`` with ``meta["stage"] == "Q"``.
4. the caller allreduces (sums) ``Q``.
5. ``decompress``: ``P @ Q.T`` (the sum over ranks of each rank's projection
   ``P P^T M_i``), reshaped; the reduced ``Q`` becomes the warm start.
   :func:`~hpcdist.compression.compressed_allreduce` divides by the size for
   ``op="mean"``.

``next_round`` returns None when no further round is needed, which is how
:func:`compressed_allreduce` drives any multi-round compressor. Calling
``decompress`` on a stage-"P" payload runs step 3 locally (what one rank
alone would get). 1-D tensors and matrices too small to gain
(``(n + m) * r >= n * m``) are sent uncompressed (``meta["stage"] ==
"dense"``).
"""
import numpy as np

from .base import Compressor, call_seed, finish, kernel_dtype, validate_positive_int

__all__ = ["PowerSGDCompressor", "orthogonalize", "initial_q"]


def orthogonalize(p):
    """Orthonormalize the columns of ``p`` in place (modified Gram-Schmidt).

    A column that becomes zero (rank-deficient input) stays zero.

    Parameters
    ----------
    p : ndarray of shape (n, r)

    Returns
    -------
    ndarray of shape (n, r)
        ``p`` itself.
    """
    for i in range(p.shape[1]):
        col = p[:, i]
        for j in range(i):
            col -= np.dot(p[:, j], col) * p[:, j]
        norm = np.linalg.norm(col)
        if norm > 0:
            col /= norm
        else:
            col[:] = 0
    return p


def initial_q(seed, name, m, rank, dtype):
    """The first warm start of tensor ``name``: standard normal (m, rank) from
    ``call_seed(seed, name, 0)``, the same on every rank."""
    rng = np.random.default_rng(call_seed(seed, name, 0))
    return rng.standard_normal((m, rank)).astype(dtype)


class PowerSGDCompressor(Compressor):
    """Low-rank compression by one warm-started power iteration per call.

    Sends ``(n + m) * rank`` numbers instead of ``n * m``, in two summed
    rounds (``collective = "allreduce"``; see the module docstring for the
    protocol that :func:`~hpcdist.compression.compressed_allreduce` runs).
    Keeps its own error feedback: do not wrap it in ``ErrorFeedback``.

    Parameters
    ----------
    rank : int >= 1, default=1
        Rank of the approximation.
    seed : int, default=0
        Seed of the initial ``Q``; must be the same on every rank.
    """

    collective = "allreduce"

    def __init__(self, rank=1, *, seed=0):
        super().__init__()
        self.rank = validate_positive_int(rank, "rank", "PowerSGDCompressor")
        self.seed = int(seed)
        self._q = {}
        self._error = {}

    def __repr__(self):
        return f"PowerSGDCompressor(rank={self.rank!r})"

    def matrix_shape(self, shape):
        """(n, m) of the matrix for ``shape``, or None when sent uncompressed."""
        if len(shape) < 2:
            return None
        n = int(shape[0])
        m = int(np.prod(shape[1:], dtype=np.int64))
        if (n + m) * self.rank >= n * m:
            return None
        return n, m

    def residual(self, name):
        """The error kept for ``name`` (None before its first compressed call)."""
        return self._error.get(name)

    def compress(self, x, name):
        """First round: return ``((P,), meta)`` (or ``((x.ravel(),), meta)`` dense)."""
        flat, meta = self._prepare(x, name)
        shape = self.matrix_shape(meta["shape"])
        if shape is None:
            meta["stage"] = "dense"
            return (flat,), meta
        dtype = kernel_dtype(flat.dtype)
        m_mat = flat.astype(dtype).reshape(shape)
        error = self._error.get(name)
        if error is not None:
            m_mat = m_mat + error
        q = self._q.get(name)
        if q is None:
            q = initial_q(self.seed, name, shape[1], self.rank, dtype)
        p = m_mat @ q
        meta.update(stage="P", matrix=m_mat)
        return (p,), meta

    def next_round(self, payload, meta):
        """Second round from the reduced ``P``: ``((Q,), meta)``, or None when done."""
        if meta.get("stage") != "P":
            return None
        p = orthogonalize(np.array(payload[0], dtype=meta["matrix"].dtype))
        m_mat = meta["matrix"]
        q = m_mat.T @ p
        self._error[meta["name"]] = m_mat - p @ q.T
        new = {k: v for k, v in meta.items() if k != "matrix"}
        new.update(stage="Q", p=p)
        return (q,), new

    def decompress(self, payload, meta):
        """``P @ Q.T`` in the original shape and dtype (the dense payload as is)."""
        stage = meta.get("stage")
        if stage == "dense":
            return finish(np.asarray(payload[0]), meta)
        if stage == "P":
            return self.decompress(*self.next_round(payload, meta))
        q = np.array(payload[0], dtype=meta["p"].dtype)
        self._q[meta["name"]] = q
        return finish((meta["p"] @ q.T).reshape(-1), meta)
