"""Numba kernels of the random forest against plain NumPy / Python references."""
import math

import numpy as np
import pytest

from hpcdist._numba import njit
from hpcdist.data import make_classification
from hpcdist.ml import RandomForestClassifier
from hpcdist.ml.forest import Forest
from hpcdist.ml.forest._bin_kernels import ROW_BLOCK, bin_columns
from hpcdist.ml.forest._hash_kernels import (
    MAX_BOOTSTRAP_WEIGHT,
    bootstrap_weight,
    bootstrap_weights,
    child_keys,
    feature_orders,
    hash_below,
    root_keys,
)
from hpcdist.ml.forest._level_kernels import (
    HistogramLayout,
    NodeSplits,
    build_histograms,
    evaluate_nodes,
    partition_nodes,
)
from hpcdist.ml.forest._predict_kernels import forest_mean_values, oob_sums
from hpcdist.ml.forest._split_kernels import CRITERIA, SplitSettings, best_threshold
from hpcdist.ml.forest._subtree_kernels import (
    SMALL_NODE_ROWS,
    TRACKED_ROWS,
    SubtreeNodes,
    SubtreeTasks,
    _chunk_histograms,
    _copy_rows,
    _feature_bins,
    grow_subtrees,
)
from hpcdist.ml.forest.tree import ForestBuilder

# The helpers that only kernels call have no entry point for Python: the tests call them
# from these kernels.


@njit
def _best_threshold(cbins, cstats, k, total, criterion, min_leaf, left, right, best_left):
    return best_threshold(cbins, cstats, k, total, criterion, min_leaf, left, right, best_left)


@njit
def _bootstrap_weight(seed, tree, row):
    return bootstrap_weight(seed, tree, row)


@njit
def _own_rows(Xb, target, rows, weights, lo, hi):
    return _copy_rows(Xb, target, rows, weights, lo, hi)


@njit
def _histograms_of_chunk(own, lo, hi, chunk, size, max_bins, D, regression, hist, bits):
    _chunk_histograms(own, lo, hi, chunk, size, max_bins, D, regression, hist, bits)


@njit
def _bins_of_feature(hist, s, bits, tracked, max_bins, D, regression, cbins, cstats):
    return _feature_bins(hist, s, bits, tracked, max_bins, D, regression, cbins, cstats)


def _settings(n_bins, channels, criterion, max_features=1, max_depth=100, min_split=2,
              min_leaf=1):
    return SplitSettings(n_bins, int(n_bins.max()), max_features, channels, criterion, max_depth,
                         min_split, min_leaf)


@pytest.mark.parametrize("n_edges", [0, 1, 2, 3, 7, 16, 255])
def test_bin_columns_counts_the_edges_below(n_edges):
    assert 2 * ROW_BLOCK < 1300
    rng = np.random.default_rng(n_edges)
    edges = [np.sort(rng.choice(np.arange(1000) / 10.0, n_edges, replace=False))
             for _ in range(3)]
    X = rng.integers(-5, 1005, size=(1300, 3)) / 10.0  # rows in blocks of ROW_BLOCK and a part
    for f, e in enumerate(edges):  # values equal to an edge go to the lower bin
        X[:len(e), f] = e[:500]
    offsets = np.concatenate([[0], np.cumsum([len(e) for e in edges])])
    out = np.empty(X.shape, dtype=np.uint8)
    bin_columns(X, np.concatenate(edges), offsets, out)
    expected = np.stack([np.searchsorted(e, X[:, f], side="left")
                         for f, e in enumerate(edges)], axis=1)
    np.testing.assert_array_equal(out, expected)
    out32 = np.empty(X.shape, dtype=np.uint8)
    bin_columns(X.astype(np.float32), np.concatenate(edges), offsets, out32)
    expected32 = np.stack([np.searchsorted(e, X[:, f].astype(np.float32), side="left")
                           for f, e in enumerate(edges)], axis=1)
    np.testing.assert_array_equal(out32, expected32)


def _reference_threshold(cbins, cstats, total, criterion, min_leaf):
    """The split search as the plain running loop: each candidate's score from its left
    side's sums (the operations in the kernel's order), the first best kept."""
    regression = criterion == CRITERIA["squared_error"]

    def weight(stats):
        return int(stats[1]) if regression else int(sum(stats))

    def side(counts, w):
        if criterion == CRITERIA["entropy"]:
            return sum(float(n) * math.log(float(n) / float(w)) for n in counts if n > 0)
        score = 0.0
        for n in counts:
            score += float(n) * float(n)
        return score / float(w)

    w = weight(total)
    left = np.zeros_like(total)
    best, best_bin, best_left = -np.inf, -1, None
    for i in range(len(cbins) - 1):
        left = left + cstats[i]
        wl = weight(left)
        wr = w - wl
        if wl < min_leaf:
            continue
        if wr < min_leaf:
            break
        if regression:
            d = float(left[0]) / float(wl) - float(total[0] - left[0]) / float(wr)
            score = float(wl) * float(wr) / float(w) * d * d
        else:
            score = side(left, wl) + side(total - left, wr)
        if score > best:
            best, best_bin, best_left = score, int(cbins[i]), left.copy()
    return best, best_bin, best_left


@pytest.mark.parametrize("criterion", ["gini", "entropy", "squared_error"])
@pytest.mark.parametrize("min_leaf", [1, 7])
def test_best_threshold_equals_the_running_loop(criterion, min_leaf):
    code = CRITERIA[criterion]
    rng = np.random.default_rng(min_leaf)
    for trial in range(200):
        k = int(rng.integers(1, 40))
        cbins = np.sort(rng.choice(256, size=k, replace=False)).astype(np.int64)
        if code == CRITERIA["squared_error"]:
            weights = rng.integers(1, 5, size=k)
            cstats = np.stack([rng.integers(-1000, 1000, size=k) * weights, weights], axis=1)
        else:
            cstats = rng.integers(0, 4, size=(k, 3)) * (rng.random((k, 3)) < 0.6)
            cstats[cstats.sum(axis=1) == 0, 0] = 1
        cstats = np.ascontiguousarray(cstats, dtype=np.int64)
        total = cstats.sum(axis=0)
        expected = _reference_threshold(cbins, cstats.copy(), total, code, min_leaf)
        D = cstats.shape[1]
        left, right, best_left = (np.zeros(D, np.int64) for _ in range(3))
        score, b = _best_threshold(cbins, cstats, k, total, code, min_leaf, left, right,
                                   best_left)
        assert (score, b) == expected[:2] or (score == -np.inf and expected[0] == -np.inf)
        if b >= 0:
            np.testing.assert_array_equal(best_left, expected[2])


def test_bootstrap_weights_are_poisson_and_per_row():
    rows = np.arange(200_000, dtype=np.int64)
    trees = np.array([0, 1, 5], dtype=np.int64)
    out = np.empty((3, len(rows)), dtype=np.uint8)
    bootstrap_weights(np.uint64(42), trees, rows, out)
    assert abs(out.mean() - 1.0) < 0.01
    assert abs((out == 0).mean() - math.exp(-1)) < 0.005
    assert abs((out == 2).mean() - math.exp(-1) / 2) < 0.005
    assert out.max() <= MAX_BOOTSTRAP_WEIGHT
    assert not np.array_equal(out[0], out[1])
    # a row's weight depends only on (seed, tree, global row): any subset, any order
    subset = np.array([199_999, 7, 123_456], dtype=np.int64)
    part = np.empty((1, 3), dtype=np.uint8)
    bootstrap_weights(np.uint64(42), trees[1:2], subset, part)
    np.testing.assert_array_equal(part[0], out[1, subset])
    # the same weights as the one-row form that out-of-bag prediction uses
    assert [_bootstrap_weight(np.uint64(42), 5, np.uint64(r)) for r in subset] == \
        out[2, subset].tolist()


def test_hash_below_keeps_the_expected_fraction():
    rows = np.arange(100_000, dtype=np.int64)
    mask = np.empty(len(rows), dtype=np.bool_)
    hash_below(np.uint64(3), rows, np.uint64(2 ** 62), mask)  # a quarter
    assert abs(mask.mean() - 0.25) < 0.01


def test_feature_orders_are_permutations_with_stable_prefixes():
    keys = np.empty(50, dtype=np.uint64)
    root_keys(np.uint64(9), np.arange(50, dtype=np.int64), keys)
    assert len(set(keys.tolist())) == 50
    full = np.empty((50, 12), dtype=np.int64)
    feature_orders(keys, 12, 12, full)
    first = np.empty((50, 4), dtype=np.int64)
    feature_orders(keys, 12, 4, first)
    np.testing.assert_array_equal(first, full[:, :4])
    assert (np.sort(full, axis=1) == np.arange(12)).all()
    assert len({tuple(row) for row in first}) > 40  # the orders differ between nodes
    left, right = np.empty(50, dtype=np.uint64), np.empty(50, dtype=np.uint64)
    child_keys(keys, left, right)
    assert len(set(keys.tolist()) | set(left.tolist()) | set(right.tolist())) == 150


def _reference_histograms(Xb, target, weights, rows, node_lo, node_hi, node_tree, features_of,
                          n_bins, channels, regression):
    hists = []
    for k, features in enumerate(features_of):
        for f in features:
            h = np.zeros((n_bins[f], channels), dtype=np.int64)
            for i in rows[node_lo[k]:node_hi[k]]:
                w = int(weights[node_tree[k], i])
                if regression:
                    h[Xb[i, f]] += (w * target[i], w)
                else:
                    h[Xb[i, f], target[i]] += w
            hists.append(h.ravel())
    return np.concatenate(hists)


@pytest.mark.parametrize("regression", [False, True])
def test_build_histograms_and_evaluate_nodes(regression):
    rng = np.random.default_rng(1)
    n, channels = 300, (2 if regression else 3)
    n_bins = np.array([5, 8, 2, 16], dtype=np.int64)
    Xb = np.stack([rng.integers(0, b, n) for b in n_bins], axis=1).astype(np.uint8)
    target = (rng.integers(-1000, 1000, n) if regression
              else (Xb[:, 1] > 3).astype(np.int64) + (Xb[:, 3] > 12))
    weights = rng.poisson(1.0, size=(2, n)).astype(np.uint8)
    rows = np.concatenate([np.flatnonzero(weights[0]), np.flatnonzero(weights[1])])
    split = np.count_nonzero(weights[0])
    node_lo = np.array([0, split], dtype=np.int64)
    node_hi = np.array([split, len(rows)], dtype=np.int64)
    node_tree = np.array([0, 1], dtype=np.int64)
    features_of = [[1, 3, 0], [2, 1]]
    ptr = np.array([0, 3, 5], dtype=np.int64)
    features = np.array(sum(features_of, []), dtype=np.int64)
    sizes = n_bins[features] * channels
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    hist = np.zeros(int(sizes.sum()), dtype=np.int64)
    criterion = CRITERIA["squared_error" if regression else "gini"]
    settings = _settings(n_bins, channels, criterion)
    layout = HistogramLayout(ptr, features, offsets)
    build_histograms(Xb, target, weights, rows, node_lo, node_hi, node_tree, layout, settings,
                     hist)
    np.testing.assert_array_equal(hist, _reference_histograms(
        Xb, target, weights, rows, node_lo, node_hi, node_tree, features_of, n_bins, channels,
        regression))

    out = dict(best_feature=np.empty(2, np.int64), best_bin=np.empty(2, np.int64),
               score=np.empty(2), decrease=np.empty(2), left=np.empty((2, channels), np.int64),
               totals=np.empty((2, channels), np.int64), found=np.empty(2, np.bool_))
    evaluate_nodes(hist, layout, settings, np.zeros(2, np.bool_), NodeSplits(*out.values()))
    for k in range(2):  # brute force over every feature and threshold
        best = (-np.inf, None, None)
        for j in range(ptr[k], ptr[k + 1]):
            f = features[j]
            h = hist[offsets[j]:offsets[j] + sizes[j]].reshape(n_bins[f], channels)
            total = h.sum(axis=0)
            np.testing.assert_array_equal(out["totals"][k], total)
            for t in range(n_bins[f] - 1):
                left = h[:t + 1].sum(axis=0)
                right = total - left
                wl, wr = (left[1], right[1]) if regression else (left.sum(), right.sum())
                if wl < 1 or wr < 1 or not h[t + 1:].any() or (
                        h[t] == 0).all():
                    continue
                if regression:
                    score = wl * wr / (wl + wr) * (left[0] / wl - right[0] / wr) ** 2
                else:
                    score = (left ** 2).sum() / wl + (right ** 2).sum() / wr
                if score > best[0] + 1e-9:
                    best = (score, f, t)
        assert out["best_feature"][k] == best[1] and out["best_bin"][k] == best[2], (k, best)
        assert out["score"][k] == pytest.approx(best[0], rel=1e-12)
        assert out["found"][k]


def test_partition_nodes_puts_low_bins_first():
    Xb = np.array([[3], [0], [2], [1], [5], [2]], dtype=np.uint8)
    rows = np.array([0, 1, 2, 3, 4, 5], dtype=np.int64)
    n_left = np.empty(2, dtype=np.int64)
    partition_nodes(Xb, rows, np.array([0, 3]), np.array([3, 6]), np.array([0, 0]),
                    np.array([2, 1]), n_left)
    np.testing.assert_array_equal(n_left, [2, 1])
    assert set(rows[:2]) == {1, 2} and rows[2] == 0
    assert rows[3] == 3 and set(rows[4:]) == {4, 5}


def test_grow_subtrees_separable_data():
    """One feature separates two classes: a root split at the boundary and two pure leaves."""
    Xb = np.array([[0, 7], [1, 3], [2, 5], [5, 1], [6, 4], [9, 2]], dtype=np.uint8)
    target = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    rows = np.arange(6, dtype=np.int64)
    weights = np.array([1, 2, 1, 1, 1, 3], dtype=np.uint8)
    n_bins = np.array([10, 8], dtype=np.int64)
    capacity = 11
    outputs = (np.empty(capacity, np.int64), np.empty(capacity, np.int64),
               np.empty(capacity, np.int64), np.empty((capacity, 2), np.int64),
               np.empty(capacity), np.empty(1, np.int64))
    tasks = SubtreeTasks(np.array([0]), np.array([6]), np.array([5], dtype=np.uint64),
                         np.array([0]), np.array([0]))
    grow_subtrees(Xb, target, rows, weights, tasks,
                  _settings(n_bins, 2, CRITERIA["gini"], max_features=2),
                  SubtreeNodes(*outputs[:5]), outputs[5])
    feature, bins, right, stats, decrease, count = outputs
    assert count[0] == 3
    # both features separate the classes; the first best in the node's feature order wins
    assert (feature[0], bins[0]) in {(0, 2), (1, 3)}
    np.testing.assert_array_equal(feature[1:3], [-1, -1])
    assert right[0] == 2
    np.testing.assert_array_equal(stats[:3], [[4, 5], [4, 0], [0, 5]])
    assert decrease[0] == pytest.approx(9 - (16 + 25) / 9)  # W * gini of the root


@pytest.mark.parametrize("n_rows", [SMALL_NODE_ROWS + 1, 300, TRACKED_ROWS - 1, TRACKED_ROWS,
                                    3 * TRACKED_ROWS])
def test_chunk_histograms_of_small_and_large_nodes_match_numpy(n_rows):
    """Both branches (occupied bins marked in a bitmap below TRACKED_ROWS rows, every bin
    scanned from there up) give each feature's occupied bins and class counts, and leave
    the histograms and bitmaps zero."""
    rng = np.random.default_rng(n_rows)
    max_bins, D, n_features = 64, 3, 7
    Xb = rng.integers(5, 40, size=(n_rows, n_features)).astype(np.uint8)  # bins 0-4 unused
    target = rng.integers(0, D, size=n_rows).astype(np.int64)
    weights = rng.integers(1, 4, size=n_rows).astype(np.uint8)
    own = _own_rows(Xb, target, np.arange(n_rows, dtype=np.int64), weights, 0, n_rows)
    chunk = np.array([6, 0, 3], dtype=np.int64)
    hist = np.zeros(len(chunk) * max_bins * D, dtype=np.int64)
    bits = np.zeros(len(chunk) * 4, np.uint64)
    _histograms_of_chunk(own, 0, n_rows, chunk, len(chunk), max_bins, D, False, hist, bits)
    for s, f in enumerate(chunk):
        expected = np.zeros((max_bins, D), dtype=np.int64)
        np.add.at(expected, (Xb[:, f], target), weights)
        occupied = np.flatnonzero(expected.any(axis=1))
        cbins, cstats = np.empty(max_bins, np.int64), np.empty((max_bins, D), np.int64)
        k = _bins_of_feature(hist, s, bits, n_rows < TRACKED_ROWS, max_bins, D, False, cbins,
                             cstats)
        np.testing.assert_array_equal(cbins[:k], occupied)
        np.testing.assert_array_equal(cstats[:k], expected[occupied])
    assert not hist.any() and not bits.any()


def test_forest_mean_values_traverses_every_tree():
    # tree 0: x0 <= 0.5 ? [1, 0] : [0, 1]; tree 1: a single leaf [0.5, 0.5]
    forest = Forest(tree_offsets=[0, 3, 4], feature=[0, -1, -1, -1], threshold_bin=[3, -1, -1, -1],
                    threshold=[0.5, 0, 0, 0], left=[1, -1, -1, -1], right=[2, -1, -1, -1],
                    value=[[0.5, 0.5], [1.0, 0.0], [0.0, 1.0], [0.5, 0.5]],
                    n_node_samples=[4, 2, 2, 4], impurity_decrease=[1, 0, 0, 0])
    expected = [[0.75, 0.25], [0.75, 0.25], [0.25, 0.75]]
    np.testing.assert_allclose(forest.mean_values(np.array([[0.0], [0.5], [0.7]])), expected)
    bins = np.array([[0], [3], [4]], dtype=np.uint8)
    np.testing.assert_allclose(forest.mean_values_binned(bins), expected)


def test_a_forest_not_in_preorder_is_refused():
    forest = Forest(tree_offsets=[0, 3], feature=[0, -1, -1], threshold_bin=[3, -1, -1],
                    threshold=[0.5, 0, 0], left=[2, -1, -1], right=[1, -1, -1],
                    value=[[0.5], [1.0], [0.0]], n_node_samples=[4, 2, 2],
                    impurity_decrease=[1, 0, 0])
    with pytest.raises(ValueError, match="preorder"):
        forest.mean_values(np.zeros((1, 1)))


@pytest.mark.parametrize("block", [8, 16, 40, 1000])
@pytest.mark.parametrize("binned", [False, True])
def test_forest_mean_values_in_blocks_and_lanes_equals_one_row_at_a_time(block, binned):
    """Rows in blocks, tree after tree, several rows a step, raw or binned: the same sums in
    the same order as a plain traversal of raw values."""
    X, y = make_classification(600, 6, 3, random_state=3)
    model = RandomForestClassifier(7, max_bins=32, random_state=1).fit(X, y)
    forest = model.forest_
    rows = X[:397]  # not a multiple of the lanes or of the blocks
    expected = np.zeros((len(rows), forest.n_values))
    for i, row in enumerate(rows):
        for t in range(forest.n_trees):
            expected[i] += forest.value[_plain_leaf(forest, t, row)]
    expected /= forest.n_trees
    out = np.full_like(expected, np.nan)
    if binned:
        forest.mean_values_binned(model.bin_edges_.transform(rows[:1]))  # makes the bin thresholds
        arguments = (model.bin_edges_.transform(rows), forest._bin_thresholds)
    else:
        arguments = (rows, forest.threshold)
    forest_mean_values(arguments[0], forest.tree_offsets, forest._split_links(), arguments[1],
                       forest.value, block, out)
    np.testing.assert_array_equal(out, expected)


def _plain_leaf(forest, tree, row):
    """The leaf of raw ``row`` in ``tree``, one node at a time."""
    base = node = forest.tree_offsets[tree]
    while forest.feature[node] >= 0:
        go_left = row[forest.feature[node]] <= forest.threshold[node]
        node = base + (forest.left[node] if go_left else forest.right[node])
    return node


@pytest.mark.parametrize("block", [8, 40, 1000])
def test_out_of_bag_sums_in_blocks_equal_a_plain_walk(block):
    """Binned rows out of each tree's bag, in blocks and lanes: the sums of a plain walk of
    the raw rows over the trees whose bootstrap weight of the row is 0, in tree order."""
    X, y = make_classification(600, 6, 3, random_state=4)
    model = RandomForestClassifier(9, max_bins=32, random_state=2).fit(X, y)
    forest, seed = model.forest_, model._seed
    rows, global_index = X[:397], np.arange(397, dtype=np.int64) * 3 + 5
    bootstrapped = np.ones(forest.n_trees, dtype=np.uint8)
    bootstrapped[4] = 0  # a tree that saw every row: never out of its bag
    expected = np.zeros((len(rows), forest.n_values))
    expected_counts = np.zeros(len(rows), dtype=np.int64)
    for i, row in enumerate(rows):
        for t in range(forest.n_trees):
            if bootstrapped[t] and _bootstrap_weight(seed, t, np.uint64(global_index[i])) == 0:
                expected[i] += forest.value[_plain_leaf(forest, t, row)]
                expected_counts[i] += 1
    assert expected_counts.sum() > len(rows)  # about 8 trees x e**-1 a row
    sums, counts = np.full_like(expected, np.nan), np.full(len(rows), -1)
    oob_sums(model.bin_edges_.transform(rows), global_index, seed,
             np.arange(forest.n_trees, dtype=np.int64), bootstrapped, forest.tree_offsets,
             forest._split_links(), forest._binned_thresholds(), forest.value, block, sums,
             counts)
    np.testing.assert_array_equal(sums, expected)
    np.testing.assert_array_equal(counts, expected_counts)


def test_forest_builder_appends_trees_and_grows_when_the_estimate_is_short():
    X, y = make_classification(300, 5, 3, random_state=2)
    whole = RandomForestClassifier(6, max_bins=16, random_state=3).fit(X, y).forest_
    first = Forest(whole.tree_offsets[:2], *(getattr(whole, name)[:whole.tree_offsets[1]]
                                             for name in ("feature", "threshold_bin", "threshold",
                                                          "left", "right", "value",
                                                          "n_node_samples",
                                                          "impurity_decrease")))
    built = ForestBuilder(whole.n_values, expected_trees=2)  # room for about 2.5 trees
    built.append(first)
    capacity = len(built.arrays["feature"])
    for t in range(1, whole.n_trees):
        nodes = slice(whole.tree_offsets[t], whole.tree_offsets[t + 1])
        built.append_tree(feature=whole.feature[nodes], threshold_bin=whole.threshold_bin[nodes],
                          threshold=whole.threshold[nodes], left=whole.left[nodes],
                          right=whole.right[nodes], value=whole.value[nodes],
                          n_node_samples=whole.n_node_samples[nodes],
                          impurity_decrease=whole.impurity_decrease[nodes])
    assert len(built.arrays["feature"]) > capacity  # it had to grow
    np.testing.assert_array_equal(built.forest().to_vector(), whole.to_vector())
    assert ForestBuilder(3, 4).forest().n_trees == 0
