"""Distributed random forests: histogram trees over row-partitioned data.

The same ``random_state`` gives the same forest whatever the number of
ranks. How:

* Bin edges come from a sample of rows chosen by a hash of the global row
  index (:mod:`.binning`); the data is binned to uint8 once.
* Bootstrap weights and per-node feature draws are counter-based hashes of
  ``(seed, tree, global row)`` and ``(seed, tree, node path)``
  (:mod:`.sampling`).
* Split statistics are integers: class counts, or fixed-point regression
  sums (:mod:`.targets`), so sums over ranks are exact and every rank picks
  the same split (:mod:`.histograms`).
* On few ranks each tree grows whole on one rank from every rank's rows,
  gathered once; otherwise large nodes grow level-wise with one allreduce
  of histograms per level for a batch of trees, and small ones are finished
  on one rank from their gathered rows. Every path uses the same split
  function (:mod:`.grow`, :mod:`._split_kernels`).
* Trees are flat arrays; prediction is a Numba traversal (:mod:`.tree`).
"""
from .binning import BinEdges
from .estimators import RandomForestClassifier, RandomForestRegressor
from .tree import Forest

__all__ = ["RandomForestClassifier", "RandomForestRegressor", "Forest", "BinEdges"]
