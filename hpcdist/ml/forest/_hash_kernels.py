"""Counter-based random numbers of the forest: node keys, feature draws, row samples, bootstraps.

Every draw is a hash (SplitMix64's finaliser) of ``(seed, stream, tree,
global row or node key)``, never the output of a generator whose state
depends on how much was drawn before: the same seed gives the same draws
whichever rank holds a row and in whatever order rows and nodes are visited
(see :mod:`hpcdist.ml.forest.sampling`).
"""
import math

import numpy as np

from ..._numba import in_threads, njit
from ._kernel_flags import EXACT, HELPER

__all__ = ["MAX_BOOTSTRAP_WEIGHT", "LEFT", "RIGHT", "root_keys", "child_key", "child_keys",
           "draw_feature", "feature_orders", "hash_below", "bootstrap_weight", "bootstrap_weights"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
#: the sides of a node's children, as :func:`child_key` takes them (a uint64, not a
#: bool constant: each bool constant would compile ``child_key`` once more)
LEFT = np.uint64(1)
RIGHT = np.uint64(2)
#: stream constants: node keys, feature draws, bootstrap weights
_NODE_STREAM = np.uint64(0x6E6F646573747265)
_FEATURE_STREAM = np.uint64(0x6665617475726573)
_BOOTSTRAP_STREAM = np.uint64(0x626F6F7473747270)


def _poisson_table(limit=24):
    """Integer thresholds of Poisson(1) on 53-bit uniforms: w = #{k: u >= T[k]}."""
    table, cdf, term = [], 0.0, math.exp(-1.0)
    for k in range(limit):
        cdf += term
        term /= k + 1
        table.append(min(int(cdf * 2.0 ** 53), 2 ** 53))
    return np.array(table, dtype=np.uint64)


_POISSON = _poisson_table()
#: the largest bootstrap weight a row can get in one tree
MAX_BOOTSTRAP_WEIGHT = int(np.searchsorted(_POISSON, 2 ** 53))


@njit(**HELPER)
def _mix(x):
    """SplitMix64's finaliser of ``x + golden``: a bijective 64-bit hash."""
    x = x + _GOLDEN
    x = (x ^ (x >> _S30)) * _MUL1
    x = (x ^ (x >> _S27)) * _MUL2
    return x ^ (x >> _S31)


@njit(**HELPER)
def _hash2(a, b):
    return _mix(_mix(a) ^ b)


# -- node keys and feature draws -------------------------------------------------------------

@njit(**EXACT)
def root_keys(seed, trees, out):
    """``out[i]`` = the key of tree ``trees[i]``'s root (uint64); ``seed`` is a uint64."""
    for i in range(trees.shape[0]):
        out[i] = _hash2(_hash2(seed ^ _NODE_STREAM, np.uint64(trees[i])), np.uint64(0))


@njit(**HELPER)
def child_key(key, side):
    """The key of the child :data:`LEFT` or :data:`RIGHT` (``side``) of the node ``key``."""
    return _hash2(key, side)


@njit(**EXACT)
def child_keys(keys, left_out, right_out):
    """Keys of the two children of the nodes ``keys`` (uint64 arrays)."""
    for i in range(keys.shape[0]):
        left_out[i] = child_key(keys[i], LEFT)
        right_out[i] = child_key(keys[i], RIGHT)


@njit(**HELPER)
def draw_feature(key, order, j):
    """Step ``j`` of the node's Fisher-Yates shuffle of ``order`` (in place); returns order[j]."""
    n = order.shape[0]
    h = _hash2(key ^ _FEATURE_STREAM, np.uint64(j))
    r = j + np.int64(h % np.uint64(n - j))
    tmp = order[j]
    order[j] = order[r]
    order[r] = tmp
    return order[j]


@njit(**EXACT)
def feature_orders(keys, n_features, count, out):
    """The first ``count`` features in which each node (by key) visits them; out (k, count)."""
    order = np.empty(n_features, dtype=np.int64)
    for i in range(keys.shape[0]):
        for f in range(n_features):
            order[f] = f
        for j in range(count):
            out[i, j] = draw_feature(keys[i], order, j)


# -- rows: samples and bootstrap weights -----------------------------------------------------

def hash_below(seed, global_index, threshold, out):
    """``out[i]`` = whether the hash of row ``global_index[i]`` is below ``threshold`` (uint64),
    rows in parallel (:func:`~hpcdist._numba.in_threads`)."""
    in_threads(_hash_below_rows, global_index.shape[0], seed, global_index, threshold, out)


@njit(**EXACT)
def _hash_below_rows(seed, global_index, threshold, out, first, stop):
    for i in range(first, stop):
        out[i] = _hash2(seed, np.uint64(global_index[i])) < threshold


@njit(**HELPER)
def bootstrap_weight(seed, tree, row):
    """Poisson(1) weight of global row ``row`` (uint64) in tree ``tree``'s bootstrap.

    A 53-bit uniform hashed from ``(seed, tree, row)``, inverted against the
    integer thresholds of the Poisson(1) distribution function.
    """
    return _poisson_weight(_tree_stream(seed, tree), row)


@njit(**HELPER)
def _tree_stream(seed, tree):
    """The hash of ``(seed, tree)`` that every row's bootstrap weight in the tree starts from."""
    return _hash2(seed ^ _BOOTSTRAP_STREAM, np.uint64(tree))


@njit(**HELPER)
def _poisson_weight(stream, row):
    u = _hash2(stream, row) >> _S11
    w = 0
    while u >= _POISSON[w]:
        w += 1
    return w


def bootstrap_weights(seed, trees, global_index, out):
    """Poisson(1) bootstrap weight of every (tree, row): out (n_trees, n_rows) uint8.

    A tree's stream is hashed once, and its row is written whole (half the hashing of
    :func:`bootstrap_weight` per entry, and no strided writes); rows in parallel
    (:func:`~hpcdist._numba.in_threads`).
    """
    in_threads(_bootstrap_rows, global_index.shape[0], seed, trees, global_index, out)


@njit(**EXACT)
def _bootstrap_rows(seed, trees, global_index, out, first, stop):
    for t in range(trees.shape[0]):
        stream = _tree_stream(seed, trees[t])
        for i in range(first, stop):
            out[t, i] = _poisson_weight(stream, np.uint64(global_index[i]))
