"""Kernels of prediction: leaf values averaged over trees (:mod:`.tree`), out-of-bag sums."""
import numpy as np

from ..._numba import in_threads, njit
from ._hash_kernels import bootstrap_weight
from ._kernel_flags import EXACT, HELPER

__all__ = ["LANES", "forest_mean_values", "oob_sums"]


#: Rows traversed together, each one step deeper in turn: their cache misses overlap.
LANES = 8
# an int64 zero: an int literal passed to a helper compiles it once more
_ZERO = np.int64(0)


@njit(**HELPER)
def _leaves_of(rows, lo, hi, tree_base, links, thresholds, node):
    """Leaves of rows ``lo:hi`` (at most :data:`LANES`) in one tree, into ``node``."""
    for j in range(hi - lo):
        node[j] = tree_base
    moving = True
    while moving:
        moving = False
        for j in range(hi - lo):
            at = node[j]
            link = links[at]
            if link >= 0:
                moving = True
                if rows[lo + j, link & 0xFFFFFFFF] <= thresholds[at]:
                    node[j] = at + 1
                else:
                    node[j] = tree_base + (link >> 32)


def forest_mean_values(rows, tree_offsets, links, thresholds, value, block, out):
    """``out[i]`` = the mean over trees of the value of row ``i``'s leaf (trees in order).

    ``links[n]``: ``right << 32 | feature`` of a split node ``n`` (its left
    child is ``n + 1``, trees being in preorder), -1 at leaves; a row goes
    left when ``rows[i, feature] <= thresholds[n]``: raw values against
    float thresholds, or bins against bin thresholds. Blocks of ``block``
    rows in parallel (:func:`~hpcdist._numba.in_threads`); within a block,
    tree after tree, so that a tree's nodes are reused from cache by many rows.
    """
    in_threads(_mean_value_blocks, _n_blocks(rows.shape[0], block), rows, tree_offsets, links,
               thresholds, value, block, out)


def oob_sums(rows, global_index, seed, trees, bootstrapped, tree_offsets, links, thresholds,
             value, block, out, n_out):
    """Sum of the leaf values of the trees whose bootstrap left row ``i`` out (and their number).

    Rows and nodes as in :func:`forest_mean_values`, blocks of ``block`` rows
    in parallel. Within a block, tree after tree, the rows out of the tree's
    bag go through it :data:`LANES` at a time (copied side by side), so a
    row's sum adds its trees in order. Trees with ``bootstrapped[t] == 0``
    saw every row (no row is out of their bag).
    """
    in_threads(_oob_sum_blocks, _n_blocks(rows.shape[0], block), rows, global_index, seed, trees,
               bootstrapped, tree_offsets, links, thresholds, value, block, out, n_out)


def _n_blocks(n_rows, block):
    return (n_rows + block - 1) // block


@njit(**EXACT)
def _mean_value_blocks(rows, tree_offsets, links, thresholds, value, block, out, first, stop):
    """Blocks ``first:stop`` of :func:`forest_mean_values`."""
    n_rows, n_values = rows.shape[0], value.shape[1]
    n_trees = tree_offsets.shape[0] - 1
    node = np.empty(LANES, dtype=np.int64)
    for b in range(first, stop):
        start, end = b * block, min(n_rows, (b + 1) * block)
        for i in range(start, end):  # loops, not slices: less to compile
            for c in range(n_values):
                out[i, c] = 0.0
        for t in range(n_trees):
            for lo in range(start, end, LANES):
                hi = min(end, lo + LANES)
                _leaves_of(rows, lo, hi, tree_offsets[t], links, thresholds, node)
                for j in range(hi - lo):
                    for c in range(n_values):
                        out[lo + j, c] += value[node[j], c]
        for i in range(start, end):
            for c in range(n_values):
                out[i, c] = out[i, c] / n_trees


@njit(**EXACT)
def _oob_sum_blocks(rows, global_index, seed, trees, bootstrapped, tree_offsets, links,
                    thresholds, value, block, out, n_out, first, stop):
    """Blocks ``first:stop`` of :func:`oob_sums`."""
    n_rows = rows.shape[0]
    node = np.empty(LANES, dtype=np.int64)
    picked = np.empty(LANES, dtype=np.int64)
    lanes = np.empty((LANES, rows.shape[1]), dtype=rows.dtype)
    for b in range(first, stop):
        start, end = b * block, min(n_rows, (b + 1) * block)
        for i in range(start, end):
            for c in range(out.shape[1]):
                out[i, c] = 0.0
            n_out[i] = 0
        for t in range(tree_offsets.shape[0] - 1):
            if bootstrapped[t] == 0:
                continue
            k = _ZERO
            for i in range(start, end):
                if bootstrap_weight(seed, trees[t], np.uint64(global_index[i])) != 0:
                    continue
                picked[k] = i
                for f in range(rows.shape[1]):  # a loop: no shape check to compile
                    lanes[k, f] = rows[i, f]
                k += 1
                if k == LANES:
                    _add_leaf_values(lanes, picked, k, tree_offsets[t], links, thresholds,
                                     value, node, out, n_out)
                    k = _ZERO
            if k:
                _add_leaf_values(lanes, picked, k, tree_offsets[t], links, thresholds, value,
                                 node, out, n_out)


@njit(**HELPER)
def _add_leaf_values(lanes, picked, k, tree_base, links, thresholds, value, node, out, n_out):
    """Add the leaf values of the ``k`` rows in ``lanes`` (rows ``picked``) in one tree to
    their sums and counts."""
    _leaves_of(lanes, _ZERO, k, tree_base, links, thresholds, node)
    for j in range(k):
        for c in range(value.shape[1]):
            out[picked[j], c] += value[node[j], c]
        n_out[picked[j]] += 1
