"""The histograms of one level of level-wise growth: plan, build, sum over ranks, derive.

For every open node, every rank adds its own rows to integer histograms
(node x feature x bin x channel, see :mod:`._split_kernels`); ONE
in-place allreduce sums the level's whole buffer (all nodes of all trees of
the batch); integer sums are exact, so every rank holds the same global
histograms whatever the number of ranks.

Sibling subtraction: when both children of a split are open, the histograms
of the larger one's features that the parent also had are derived after the
allreduce as ``parent - smaller child`` (exact in integers) instead of being
built from its rows; the smaller child then also builds those features.
The plan is taken only when it touches fewer (bootstrap-weighted) row x
feature pairs than building both directly: always with ``max_features=1.0``
(every node histograms every feature), rarely with ``"sqrt"``, where
siblings and parent seldom share a feature.
"""
import numpy as np

from ...comm import allreduce
from ._level_kernels import HistogramLayout, build_histograms

__all__ = ["LevelHistograms", "plan_level", "reduce_level"]


class LevelHistograms:
    """One level's global histograms: a flat int64 buffer per round, and where each lives.

    Attributes
    ----------
    where : dict
        ``(node id, feature) -> (buffer, offset)``; the histogram is
        ``buffer[offset:offset + n_bins[feature] * D]``.
    """

    def __init__(self):
        self.where = {}

    def histogram(self, node, feature, size):
        buffer, offset = self.where[(node, feature)]
        return buffer[offset:offset + size]

    def locate(self, nodes, features_of):
        """``(layout, buffer)`` of the histograms ``features_of[n]`` of ``nodes``.

        All the histograms must live in one buffer (one round); ``buffer`` is
        None when there are none.
        """
        ptr, features, offsets, buffer = [0], [], [], None
        for node in nodes:
            for f in features_of[node]:
                buffer, offset = self.where[(node, f)]
                features.append(f)
                offsets.append(offset)
            ptr.append(len(features))
        return _layout(ptr, features, offsets), buffer


def _layout(feature_ptr, features, offsets):
    """A :data:`._level_kernels.HistogramLayout` of int64 arrays from sequences."""
    return HistogramLayout(np.asarray(feature_ptr, dtype=np.int64),
                           np.asarray(features, dtype=np.int64),
                           np.asarray(offsets, dtype=np.int64))


def plan_level(frontier, visit, parent_of, weight_of, previous):
    """Which histograms each open node builds from its rows, and which it derives.

    Parameters
    ----------
    frontier : list of int
        Open node ids; children of one split appear left first.
    visit : dict
        Node id -> the features its split search visits (in order).
    parent_of, weight_of : callable
        Node id -> parent id (-1 for a root) / global bootstrap-weighted rows.
    previous : LevelHistograms or None
        The parents' level.

    Returns
    -------
    build : dict
        Node id -> features to build from local rows.
    derived : list of (node, feature, parent, sibling)
        ``hist(node, feature) = hist(parent, feature) - hist(sibling, feature)``.
    """
    build = {node: list(visit[node]) for node in frontier}
    derived = []
    if previous is None:
        return build, derived
    children = {}
    for node in frontier:
        children.setdefault(parent_of(node), []).append(node)
    for parent, pair in children.items():
        if parent < 0 or len(pair) != 2:
            continue
        small, large = pair if weight_of(pair[0]) <= weight_of(pair[1]) else pair[::-1]
        shared = [f for f in visit[large] if (parent, f) in previous.where]
        if not shared:
            continue
        extra = [f for f in shared if f not in visit[small]]
        w_small, w_large = weight_of(small), weight_of(large)
        direct = w_small * len(visit[small]) + w_large * len(visit[large])
        subtract = w_small * (len(visit[small]) + len(extra)) + w_large * (len(visit[large])
                                                                           - len(shared))
        if subtract < direct:
            build[small] = visit[small] + extra
            build[large] = [f for f in visit[large] if f not in shared]
            derived += [(large, f, parent, small) for f in shared]
    return build, derived


def reduce_level(ctx, data, nodes, build, derived, previous, into=None):
    """Build this rank's histograms, sum them over ranks (one allreduce), derive the rest.

    Parameters
    ----------
    ctx : Context
    data : hpcdist.ml.forest.grow.GrowData
        Binned rows, targets, weights and each node's rows.
    nodes : list of int
        The nodes, in order.
    build : dict
        Node id -> features to build.
    derived : list of (node, feature, parent, sibling)
    previous : LevelHistograms or None
        The parents' histograms (for ``derived``).
    into : LevelHistograms, optional
        Add the new histograms to this one (a second round in a level).

    Returns
    -------
    LevelHistograms
    """
    level = LevelHistograms() if into is None else into
    n_bins, channels = data.n_bins, data.channels
    ptr, features, offsets = [0], [], []
    offset = 0
    for node in nodes:
        for f in build[node]:
            features.append(f)
            offsets.append(offset)
            offset += int(n_bins[f]) * channels
        ptr.append(len(features))
    n_reduced = offset
    derived_offsets = []
    for _ in derived:
        derived_offsets.append(offset)
        offset += int(n_bins[_[1]]) * channels
    buffer = np.zeros(offset, dtype=np.int64)
    ids = np.asarray(nodes, dtype=np.int64)
    build_histograms(data.Xb, data.target, data.weights, data.rows, data.lo[ids], data.hi[ids],
                     data.tree[ids], _layout(ptr, features, offsets), data.split_settings, buffer)
    if ctx.size > 1 and n_reduced:
        reduced = buffer[:n_reduced]
        allreduce(reduced, out=reduced, ctx=ctx)
    j = 0
    for node in nodes:
        for f in build[node]:
            level.where[(node, f)] = (buffer, offsets[j])
            j += 1
    for (node, f, parent, sibling), offset in zip(derived, derived_offsets):
        size = int(n_bins[f]) * channels
        np.subtract(previous.histogram(parent, f, size), level.histogram(sibling, f, size),
                    out=buffer[offset:offset + size])
        level.where[(node, f)] = (buffer, offset)
    return level
