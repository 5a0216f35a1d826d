"""Growing a batch of trees over row-partitioned data.

Whole trees (the default on one rank, and on few ranks; :func:`training_rows`)
    Every rank's binned rows are gathered on every rank once per fit, and
    tree ``i`` of a batch grows whole on rank ``i % n_ranks``, depth first;
    one ``allgather`` shares the trees. No level-wise step and no exchange
    of rows per batch, so few ranks fit faster this way. Chosen when
    the gathered rows (``n_features + 8`` bytes each) take no more memory
    than a rank's share of the input as float64.

Otherwise two paths, chosen per node by its global (bootstrap-weighted) row
count ``W``:

Level-wise over ranks (``W > local_threshold``)
    All open nodes of all trees of the batch advance one level together:
    every rank histograms its own rows, one allreduce per level sums the
    histograms (:mod:`~hpcdist.ml.forest.histograms`), and every rank picks
    the same splits from the same global histograms, then reorders its own
    rows into the children.
Whole subtree on one rank (``W <= local_threshold``, PLANET style)
    Once a node is small, its rows are sent to the rank that will grow its
    whole subtree depth first (alltoalls once per batch; a row travels to a
    rank at most once per batch, however many of its trees' subtrees grow
    there). Ranks take subtrees heaviest first, each to the least loaded
    rank, and grow theirs in parallel Numba threads; one ``allgather``
    shares the subtrees.

All paths make the same decision for the same node (the same feature
draws, the same integer statistics, the same split function, see
:mod:`._split_kernels`), so the threshold only moves work between
ranks: the forest is the same for any threshold and any number of ranks.
Why a threshold at all: a histogram costs ``features x bins x channels``
integers however few rows its node has, so deep levels, with thousands of
small nodes, would allreduce mostly empty histograms; a row costs
``n_features + 8`` bytes to send once. The default threshold
``n_samples // n_ranks`` (where whole trees are not chosen) keeps the top
levels, where every node is large, distributed, and hands the rest out as
subtrees of at most one rank's share of rows (a bounded amount of memory
per rank).

Feature draws follow scikit-learn: a node visits ``max_features`` features
of its random order, and carries on until one of them is not constant in
the node. Level-wise, the (rare) nodes whose first ``max_features`` features
were all constant get a second round in the same level for the rest.
"""
import numpy as np

from ...comm import allgather, allreduce, alltoall
from ._hash_kernels import child_keys, feature_orders, root_keys
from ._level_kernels import NodeSplits, evaluate_nodes, partition_nodes
from ._split_kernels import SplitSettings
from ._subtree_kernels import SubtreeTasks, grow_subtrees, grow_whole_trees, new_subtree_nodes
from .histograms import plan_level, reduce_level
from .sampling import assign_owners, bootstrap, in_bag_rows

__all__ = ["GrowSettings", "TrainingRows", "training_rows", "gathering_fits", "grow_trees",
           "NO_DEPTH_LIMIT"]

NO_DEPTH_LIMIT = np.iinfo(np.int64).max // 2
_OPEN, _LEAF, _SPLIT, _TASK = 0, 1, 2, 3


class GrowSettings:
    """What the growth needs besides the data (the same on every rank).

    Parameters
    ----------
    n_bins : ndarray of int64, shape (n_features,)
    max_features : int
    channels : int
        Statistics per bin: the number of classes, or 2 for regression.
    criterion : int
        A code of :data:`._split_kernels.CRITERIA`.
    max_depth, min_samples_split, min_samples_leaf : int
        The last two count bootstrap-weighted rows.
    local_threshold : int or None
        Nodes with at most this many weighted rows grow on one rank; None:
        ``n_samples // n_ranks`` (every tree on one rank when there is one rank).
    seed : numpy.uint64
    bootstrap : bool
    edges : BinEdges
    to_values : callable
        ``stats (n, channels) int64 -> values (n, n_values) float64``.
    """

    def __init__(self, n_bins, max_features, channels, criterion, max_depth, min_samples_split,
                 min_samples_leaf, local_threshold, seed, bootstrap, edges, to_values):
        self.n_bins = np.ascontiguousarray(n_bins, dtype=np.int64)
        self.max_features = int(max_features)
        self.channels = int(channels)
        self.criterion = int(criterion)
        self.max_depth = int(max_depth)
        self.min_samples_split = int(min_samples_split)
        self.min_samples_leaf = int(min_samples_leaf)
        self.local_threshold = local_threshold
        self.seed = np.uint64(seed)
        self.bootstrap = bool(bootstrap)
        self.edges = edges
        self.to_values = to_values

    @property
    def regression(self):
        return self.channels == 2 and self.criterion == 2

    @property
    def split_settings(self):
        """The settings as the kernels take them (a :data:`._split_kernels.SplitSettings`)."""
        max_bins = max(1, int(self.n_bins.max())) if len(self.n_bins) else 1
        return SplitSettings(self.n_bins, max_bins, self.max_features, self.channels,
                             self.criterion, self.max_depth, self.min_samples_split,
                             self.min_samples_leaf)


class _Nodes:
    """The nodes grown level-wise (and the subtree roots), as growable arrays."""

    _FIELDS = {"tree": np.int64, "depth": np.int64, "lo": np.int64, "hi": np.int64,
               "parent": np.int64, "key": np.uint64, "kind": np.int64, "feature": np.int64,
               "bin": np.int64, "weight": np.int64, "decrease": np.float64, "left": np.int64,
               "right": np.int64, "task": np.int64}

    def __init__(self, channels, capacity=64):
        self.n = 0
        self.channels = channels
        for name, dtype in self._FIELDS.items():
            setattr(self, name, np.zeros(capacity, dtype=dtype))
        self.stats = np.zeros((capacity, channels), dtype=np.int64)

    def add(self, count):
        """Ids of ``count`` new nodes (fields zero, children and task -1)."""
        if self.n + count > len(self.tree):
            capacity = max(2 * len(self.tree), self.n + count)
            for name in self._FIELDS:
                old = getattr(self, name)
                new = np.zeros(capacity, dtype=old.dtype)
                new[:self.n] = old[:self.n]
                setattr(self, name, new)
            stats = np.zeros((capacity, self.channels), dtype=np.int64)
            stats[:self.n] = self.stats[:self.n]
            self.stats = stats
        ids = np.arange(self.n, self.n + count)
        self.n += count
        self.left[ids] = self.right[ids] = self.task[ids] = self.feature[ids] = -1
        return ids


class GrowData:
    """This rank's binned rows, targets and bootstrap weights, and each node's rows.

    Attributes
    ----------
    Xb : ndarray of uint8, shape (n_local, n_features)
    target : ndarray of int64, shape (n_local,)
    weights : ndarray of uint8, shape (n_trees, n_local)
    rows : ndarray of int64
        Local row indices of every tree's in-bag rows; node ``n`` owns
        ``rows[lo[n]:hi[n]]``.
    """

    def __init__(self, Xb, target, weights, rows, nodes, settings):
        self.Xb, self.target, self.weights, self.rows = Xb, target, weights, rows
        self.nodes = nodes
        self.n_bins = settings.n_bins
        self.channels = settings.channels
        self.split_settings = settings.split_settings

    @property
    def lo(self):
        return self.nodes.lo

    @property
    def hi(self):
        return self.nodes.hi

    @property
    def tree(self):
        return self.nodes.tree


def _weight(stats, regression):
    return stats[..., 1] if regression else stats.sum(axis=-1)


def _is_leaf(stats, depth, settings):
    """Stopping rules that need no split search (vectorised over nodes)."""
    w = _weight(stats, settings.regression)
    leaf = ((depth >= settings.max_depth) | (w < settings.min_samples_split)
            | (w < 2 * settings.min_samples_leaf))
    if not settings.regression:
        leaf |= np.count_nonzero(stats, axis=-1) <= 1
    return leaf


def _local_threshold(settings, ctx, n_global):
    if settings.local_threshold is not None:
        return int(settings.local_threshold)
    return n_global // ctx.size


# -- level-wise growth ---------------------------------------------------------------------------

def _split_level(ctx, data, nodes, frontier, previous, settings):
    """Find the splits of the open nodes ``frontier`` (collective); returns their histograms."""
    p = len(settings.n_bins)
    count = min(settings.max_features, p)
    keys = nodes.key[frontier]
    orders = np.empty((len(frontier), count), dtype=np.int64)
    feature_orders(keys, p, count, orders)
    visit = {int(n): [int(f) for f in orders[i]] for i, n in enumerate(frontier)}
    build, derived = plan_level([int(n) for n in frontier], visit,
                                lambda n: int(nodes.parent[n]), lambda n: int(nodes.weight[n]),
                                previous)
    level = reduce_level(ctx, data, [int(n) for n in frontier], build, derived, previous)
    result = _evaluate(level, frontier, visit, False, settings)
    best_feature, best_bin, score, decrease, left, totals, found = result
    leaf = _is_leaf(totals, nodes.depth[frontier], settings)
    retry = np.flatnonzero(~found & ~leaf) if count < p else np.empty(0, dtype=np.int64)
    if len(retry):
        # every visited feature was constant: carry on through the node's order
        orders = np.empty((len(retry), p), dtype=np.int64)
        feature_orders(keys[retry], p, p, orders)
        again = [int(n) for n in frontier[retry]]
        rest = {n: [int(f) for f in orders[i, count:]] for i, n in enumerate(again)}
        reduce_level(ctx, data, again, rest, [], None, into=level)
        second = _evaluate(level, frontier[retry], rest, True, settings)
        for mine, theirs in zip(result, second):
            mine[retry] = theirs
    return level, result, leaf


def _evaluate(level, nodes, features_of, first_only, settings):
    layout, buffer = level.locate([int(n) for n in nodes], features_of)
    k, channels = len(nodes), settings.channels
    result = NodeSplits(feature=np.empty(k, dtype=np.int64), bin=np.empty(k, dtype=np.int64),
                        score=np.empty(k, dtype=np.float64),
                        decrease=np.empty(k, dtype=np.float64),
                        left=np.zeros((k, channels), dtype=np.int64),
                        totals=np.zeros((k, channels), dtype=np.int64),
                        found=np.zeros(k, dtype=np.bool_))
    if buffer is None:
        buffer = np.zeros(0, dtype=np.int64)
    evaluate_nodes(buffer, layout, settings.split_settings, np.full(k, first_only), result)
    return result


def _grow_levels(ctx, data, nodes, frontier, threshold, settings):
    """Grow the open nodes level by level until every node is a leaf, split or a subtree."""
    previous = None
    while len(frontier):
        level, result, leaf = _split_level(ctx, data, nodes, frontier, previous, settings)
        best_feature, best_bin, score, decrease, left_stats, totals, _ = result
        nodes.stats[frontier] = totals
        split = ~leaf & (best_feature >= 0)
        if settings.regression:
            split &= score > 0
        nodes.kind[frontier] = np.where(split, _SPLIT, _LEAF)
        parents = frontier[split]
        if not len(parents):
            break
        nodes.feature[parents] = best_feature[split]
        nodes.bin[parents] = best_bin[split]
        nodes.decrease[parents] = decrease[split]
        n_left = np.empty(len(parents), dtype=np.int64)
        partition_nodes(data.Xb, data.rows, nodes.lo[parents], nodes.hi[parents],
                        best_feature[split], best_bin[split], n_left)
        # children: left then right for each parent, in parent order
        kids = nodes.add(2 * len(parents))
        lefts, rights = kids[0::2], kids[1::2]
        nodes.left[parents], nodes.right[parents] = lefts, rights
        left_keys = np.empty(len(parents), dtype=np.uint64)
        right_keys = np.empty(len(parents), dtype=np.uint64)
        child_keys(nodes.key[parents], left_keys, right_keys)
        nodes.key[lefts], nodes.key[rights] = left_keys, right_keys
        for side in (lefts, rights):
            nodes.tree[side] = nodes.tree[parents]
            nodes.depth[side] = nodes.depth[parents] + 1
            nodes.parent[side] = parents
        cut = nodes.lo[parents] + n_left
        nodes.lo[lefts], nodes.hi[lefts] = nodes.lo[parents], cut
        nodes.lo[rights], nodes.hi[rights] = cut, nodes.hi[parents]
        nodes.stats[lefts] = left_stats[split]
        nodes.stats[rights] = totals[split] - left_stats[split]
        nodes.weight[kids] = _weight(nodes.stats[kids], settings.regression)
        leaf = _is_leaf(nodes.stats[kids], nodes.depth[kids], settings)
        small = nodes.weight[kids] <= threshold
        nodes.kind[kids] = np.where(leaf, _LEAF, np.where(small, _TASK, _OPEN))
        frontier = kids[nodes.kind[kids] == _OPEN]
        previous = level


# -- whole subtrees on one rank ------------------------------------------------------------------

def _task_pairs(data, nodes, tasks, owned):
    """(task index, local row, weight) of every row of the tasks ``owned`` (indices into tasks)."""
    parts = [data.rows[nodes.lo[t]:nodes.hi[t]] for t in tasks[owned]]
    lengths = np.array([len(part) for part in parts], dtype=np.int64)
    rows = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    trees = np.repeat(nodes.tree[tasks[owned]], lengths)
    return np.repeat(owned, lengths), rows, data.weights[trees, rows]


def _exchange_task_rows(ctx, data, nodes, tasks, owners):
    """Give every task's owner the rows of its task (collective: three alltoalls).

    A row goes to each other rank at most once per batch, whatever the
    number of its tasks (trees) there: the rows travel as one block per
    destination (binned features and target), the membership as
    (task, row, weight) triples of int32.

    Returns
    -------
    Xb, target : this rank's rows followed by the received ones
    task, rows, weights : ndarray
        A (task index, row of ``Xb``, bootstrap weight) triple per row of
        this rank's tasks.
    """
    p = data.Xb.shape[1]
    n_local = len(data.Xb)
    row_blocks, pair_blocks, counts = [], [], np.zeros((ctx.size, 2), dtype=np.int64)
    for destination in range(ctx.size):
        task, rows, weights = _task_pairs(data, nodes, tasks, np.flatnonzero(owners == destination))
        if destination == ctx.rank:
            mine = (task, rows, weights)
            continue
        needed = np.zeros(n_local, dtype=np.bool_)
        needed[rows] = True
        unique = np.flatnonzero(needed)
        position = np.cumsum(needed) - 1
        block = np.empty((len(unique), p + 8), dtype=np.uint8)
        block[:, :p] = data.Xb[unique]
        block[:, p:] = data.target[unique].astype("<i8").view(np.uint8).reshape(-1, 8)
        row_blocks.append(block)
        pair_blocks.append(np.stack([task, position[rows], weights], axis=1).astype(np.int32))
        counts[destination] = len(unique), len(task)
    received = alltoall(counts, counts=[1] * ctx.size, ctx=ctx)
    rows_in = alltoall(np.concatenate(row_blocks), counts=[int(c) for c in counts[:, 0]], ctx=ctx)
    pairs_in = alltoall(np.concatenate(pair_blocks), counts=[int(c) for c in counts[:, 1]],
                        ctx=ctx)
    row_start = n_local + np.concatenate([[0], np.cumsum(received[:, 0])[:-1]])
    source = np.repeat(np.arange(ctx.size), received[:, 1])
    Xb = np.concatenate([data.Xb, rows_in[:, :p]])
    target = np.concatenate([data.target,
                             np.ascontiguousarray(rows_in[:, p:]).view("<i8").ravel()])
    task = np.concatenate([mine[0], pairs_in[:, 0]])
    rows = np.concatenate([mine[1], row_start[source] + pairs_in[:, 1]])
    weights = np.concatenate([mine[2], pairs_in[:, 2].astype(np.uint8)])
    return Xb, target.astype(np.int64), task, rows, weights


def _subtree_capacities(sizes, depths, max_depth):
    """Room for the nodes of subtrees of ``sizes`` rows rooted at ``depths``: ``2m - 1``,
    and no more than a full binary tree down to ``max_depth``."""
    levels = np.minimum(np.maximum(max_depth - depths, 0), 61) + 1
    return np.minimum(2 * sizes - 1, (np.int64(1) << levels) - 1)


def _grow_packed(sizes, depths, settings, grow):
    """Room for subtrees of ``sizes`` rows at ``depths``, filled by ``grow(nodes, base,
    count)``, packed.

    Returns
    -------
    packed : ndarray of int64, shape (n_nodes, 4 + channels)
        Every subtree's nodes in preorder, one after the other: feature, bin,
        right child (from the subtree's first node), stats, and the impurity
        decrease's float64 bits.
    count : ndarray of int64
        Nodes of each subtree.
    """
    capacity = _subtree_capacities(sizes, depths, settings.max_depth)
    base = np.concatenate([[0], np.cumsum(capacity)[:-1]]).astype(np.int64)
    channels = settings.channels
    grown = new_subtree_nodes(int(capacity.sum()), channels)
    feature, bins, right, stats, decrease = grown
    count = np.zeros(len(sizes), dtype=np.int64)
    if len(sizes):
        grow(grown, base, count)
    keep = np.concatenate([np.arange(b, b + c) for b, c in zip(base, count)]) if len(
        sizes) else np.zeros(0, dtype=np.int64)
    packed = np.empty((len(keep), 4 + channels), dtype=np.int64)
    packed[:, 0], packed[:, 1], packed[:, 2] = feature[keep], bins[keep], right[keep]
    packed[:, 3:3 + channels] = stats[keep]
    packed[:, 3 + channels] = decrease[keep].view(np.int64)
    return packed, count


def _grow_sorted(Xb, target, rows, weights, lo, hi, keys, depths, settings):
    """Grow the subtrees whose rows are ``rows[lo[t]:hi[t]]`` (this rank's, in parallel);
    returns them packed (see :func:`_grow_packed`)."""
    def grow(nodes, base, count):
        grow_subtrees(Xb, target, np.ascontiguousarray(rows, dtype=np.int64),
                      np.ascontiguousarray(weights, dtype=np.uint8),
                      SubtreeTasks(lo.astype(np.int64), hi.astype(np.int64), keys,
                                   depths.astype(np.int64), base),
                      settings.split_settings, nodes, count)
    return _grow_packed(hi - lo, depths, settings, grow)


def _share_blocks(ctx, packed, table):
    """Every rank's grown subtrees, on every rank (collective: two allgathers).

    ``table`` has a row per subtree of this rank: its index, its number of
    nodes, then any further columns. Returns ``{index: nodes}`` and the
    gathered table.
    """
    if ctx.size > 1:
        packed = allgather(packed, ctx=ctx)
        table = allgather(table, ctx=ctx)
    blocks = {}
    offset = 0
    for row in table:
        blocks[int(row[0])] = packed[offset:offset + row[1]]
        offset += row[1]
    return blocks, table


def _grow_tasks(ctx, data, nodes, tasks, settings):
    """Grow every task's subtree on its owner; returns each task's nodes (on every rank)."""
    owners = assign_owners(nodes.weight[tasks], ctx.size)
    if ctx.size == 1:
        Xb, target = data.Xb, data.target
        task, rows, weights = _task_pairs(data, nodes, tasks, np.arange(len(tasks)))
    else:
        Xb, target, task, rows, weights = _exchange_task_rows(ctx, data, nodes, tasks, owners)
    mine = np.flatnonzero(owners == ctx.rank)
    order = np.argsort(task, kind="stable")
    lo = np.searchsorted(task[order], mine, side="left")
    hi = np.searchsorted(task[order], mine, side="right")
    packed, count = _grow_sorted(Xb, target, rows[order], weights[order], lo, hi,
                                 nodes.key[tasks[mine]], nodes.depth[tasks[mine]], settings)
    blocks, _ = _share_blocks(ctx, packed, np.stack([mine, count], axis=1).astype(np.int64))
    return blocks


def _grow_whole_trees(ctx, rows, trees, settings, built):
    """Grow the trees ``trees`` whole, each on one rank from the gathered rows (collective).

    Tree ``i`` of the batch grows on rank ``i % size``; one allgather shares them.
    """
    mine = np.flatnonzero(np.arange(len(trees)) % ctx.size == ctx.rank)
    weights = bootstrap(settings.seed, trees[mine], rows.global_index, settings.bootstrap)
    empty = ~weights.any(axis=1)
    weights[empty] = 1
    keys = np.empty(len(mine), dtype=np.uint64)
    root_keys(settings.seed, trees[mine], keys)

    sizes = np.count_nonzero(weights, axis=1).astype(np.int64)

    def grow(nodes, base, count):
        grow_whole_trees(rows.Xb, rows.target, weights, sizes, keys, base,
                         settings.split_settings, nodes, count)
    packed, count = _grow_packed(sizes, np.zeros(len(mine), dtype=np.int64), settings, grow)
    table = np.stack([mine, count, ~empty], axis=1).astype(np.int64)
    blocks, table = _share_blocks(ctx, packed, table)
    bootstrapped = np.empty(len(trees), dtype=np.uint8)
    bootstrapped[table[:, 0]] = table[:, 2]
    _add_trees(built, [blocks[i] for i in range(len(trees))], settings)
    return bootstrapped


# -- assembly ------------------------------------------------------------------------------------

def _assemble_tree(nodes, root, blocks, channels):
    """One tree's nodes in preorder: (feature, bin, left, right, stats, decrease)."""
    chunks = []
    right_fixes = []
    count = 0
    stack = [(root, -1)]
    while stack:
        node, parent = stack.pop()
        if parent >= 0:
            right_fixes.append((parent, count))
        kind = nodes.kind[node]
        if kind == _TASK:
            block = blocks[int(nodes.task[node])]
            chunk = block.copy()
            chunk[:, 2] = np.where(chunk[:, 2] >= 0, chunk[:, 2] + count, -1)
        else:
            chunk = np.empty((1, 4 + channels), dtype=np.int64)
            split = kind == _SPLIT
            chunk[0, 0] = nodes.feature[node] if split else -1
            chunk[0, 1] = nodes.bin[node] if split else -1
            chunk[0, 2] = -1
            chunk[0, 3:3 + channels] = nodes.stats[node]
            chunk[0, 3 + channels] = np.array(nodes.decrease[node] if split else 0.0).view(
                np.int64)
            if split:
                stack.append((nodes.right[node], count))
                stack.append((nodes.left[node], -1))
        chunks.append(chunk)
        count += len(chunk)
    tree = np.concatenate(chunks)
    for parent, child in right_fixes:
        tree[parent, 2] = child
    return tree


def _add_trees(built, trees, settings):
    """Append the trees' packed nodes (see :func:`_grow_packed`) to ``built``, a
    :class:`ForestBuilder`, one tree at a time (few temporaries)."""
    channels = settings.channels
    for packed in trees:
        feature = packed[:, 0]
        split = feature >= 0
        left = np.arange(1, len(packed) + 1)  # a split's left child is the next node
        left[~split] = -1
        threshold = np.zeros(len(packed))
        threshold[split] = settings.edges.threshold(feature[split], packed[split, 1])
        stats = packed[:, 3:3 + channels]
        built.append_tree(feature=feature, threshold_bin=packed[:, 1], threshold=threshold,
                          left=left, right=packed[:, 2], value=settings.to_values(stats),
                          n_node_samples=_weight(stats, settings.regression),
                          impurity_decrease=np.ascontiguousarray(
                              packed[:, 3 + channels]).view(np.float64))


# -- the batch -----------------------------------------------------------------------------------

class TrainingRows:
    """The binned rows that trees grow from.

    Attributes
    ----------
    Xb : ndarray of uint8, shape (n, n_features)
    target : ndarray of int64, shape (n,)
    global_index : ndarray of int64, shape (n,)
    n_global : int
    whole_trees : bool
        True: every tree grows whole on one rank, and on more than one rank
        these are every rank's rows in global order; False: this rank's rows
        only, and large nodes grow level-wise over ranks.
    """

    def __init__(self, Xb, target, global_index, n_global, whole_trees):
        self.Xb, self.target, self.global_index = Xb, target, global_index
        self.n_global, self.whole_trees = n_global, whole_trees


def gathering_fits(n_features, n_ranks):
    """Whether every rank may hold every rank's binned rows.

    True on one rank, or when they take no more memory than a rank's
    average share of the input as float64: ``n_ranks * (n_features + 8)``
    bytes a row (uint8 bins and an int64 target) against ``8 * n_features``.
    """
    return n_ranks == 1 or n_ranks * (n_features + 8) <= 8 * n_features


def training_rows(ctx, Xb, target, global_index, n_global, settings):
    """The rows to grow from: gathered on every rank (collective) when trees grow whole.

    Trees grow whole when ``settings.local_threshold`` is None and
    :func:`gathering_fits`; this rank's rows are then sent to every rank once
    for the whole fit, instead of the rows of every subtree once per batch.
    """
    whole = settings.local_threshold is None and gathering_fits(Xb.shape[1], ctx.size)
    if not whole or ctx.size == 1:
        return TrainingRows(Xb, target, global_index, n_global, whole)
    # rank r's rows are global rows sum(counts[:r]) + arange(counts[r]): in rank order,
    # the gathered rows are in global order
    return TrainingRows(allgather(Xb, ctx=ctx), allgather(target, ctx=ctx),
                        np.arange(n_global, dtype=np.int64), n_global, True)


def grow_trees(ctx, rows, trees, settings, built):
    """Grow the trees ``trees`` (global tree indices) on every rank's rows (collective).

    Parameters
    ----------
    ctx : Context
    rows : TrainingRows
        From :func:`training_rows` (the same ``settings``).
    trees : sequence of int
    settings : GrowSettings
    built : ForestBuilder
        Receives the trees (identical on every rank), in order.

    Returns
    -------
    bootstrapped : ndarray of uint8, shape (n_trees,)
        0 for a tree whose bootstrap drew no row at all (it used every row once).
    """
    trees = np.asarray(trees, dtype=np.int64)
    if rows.whole_trees:
        return _grow_whole_trees(ctx, rows, trees, settings, built)
    Xb, target, global_index, n_global = rows.Xb, rows.target, rows.global_index, rows.n_global
    weights = bootstrap(settings.seed, trees, global_index, settings.bootstrap)
    in_bag = weights.sum(axis=1, dtype=np.int64)
    if ctx.size > 1:
        in_bag = allreduce(in_bag, ctx=ctx)
    empty = in_bag == 0
    weights[empty] = 1
    in_bag[empty] = n_global
    in_bag_index, lengths = in_bag_rows(weights)
    nodes = _Nodes(settings.channels)
    roots = nodes.add(len(trees))
    nodes.tree[roots] = np.arange(len(trees))
    nodes.parent[roots] = -1
    nodes.hi[roots] = np.cumsum(lengths)
    nodes.lo[roots] = nodes.hi[roots] - lengths
    nodes.weight[roots] = in_bag
    keys = np.empty(len(trees), dtype=np.uint64)
    root_keys(settings.seed, trees, keys)
    nodes.key[roots] = keys
    threshold = _local_threshold(settings, ctx, n_global)
    small = in_bag <= threshold
    nodes.kind[roots] = np.where(small, _TASK, _OPEN)
    data = GrowData(Xb, target, weights, in_bag_index, nodes, settings)
    _grow_levels(ctx, data, nodes, roots[~small], threshold, settings)
    tasks = np.flatnonzero(nodes.kind[:nodes.n] == _TASK)
    nodes.task[tasks] = np.arange(len(tasks))
    blocks = _grow_tasks(ctx, data, nodes, tasks, settings) if len(tasks) else {}
    grown = [_assemble_tree(nodes, root, blocks, settings.channels) for root in roots]
    _add_trees(built, grown, settings)
    return (~empty).astype(np.uint8)
