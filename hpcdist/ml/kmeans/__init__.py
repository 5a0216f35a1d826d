"""Distributed K-means: the estimator and, beside it, everything only it uses.

* :mod:`.estimator`: :class:`KMeans`, validation, the ``n_init`` runs,
  checkpoints and the trainer protocol.
* :mod:`.initialization`: k-means++, k-means|| and random rows over ranks.
* :mod:`.lloyd`: the distributed Lloyd loop (one packed allreduce per
  iteration).
* :mod:`.kernels`: the Numba (and CuPy) kernels over this rank's rows, built
  on the register-tile micro-kernels of :mod:`._simd` (LLVM vector IR).
"""
from .estimator import KMeans

__all__ = ["KMeans"]
