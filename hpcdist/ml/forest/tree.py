"""A forest as flat arrays: every tree's nodes in preorder, trees concatenated."""
import numba
import numpy as np

from ...exceptions import InvalidArgumentError
from ._predict_kernels import LANES, forest_mean_values, oob_sums

__all__ = ["Forest", "ForestBuilder"]

#: The most rows a thread predicts tree after tree (32,768 rows of 32 binned features: 1 MiB).
PREDICT_BLOCK = 32768
_INT_FIELDS = ("feature", "threshold_bin", "left", "right")
_FLOAT_FIELDS = ("threshold", "n_node_samples", "impurity_decrease")
_NODE_DTYPES = {"feature": np.int32, "threshold_bin": np.int32, "threshold": np.float64,
                "left": np.int32, "right": np.int32, "value": np.float64,
                "n_node_samples": np.float64, "impurity_decrease": np.float64}
_NODE_FIELDS = tuple(_NODE_DTYPES)


class Forest:
    """Trees stored as flat node arrays.

    Tree ``t`` is nodes ``tree_offsets[t]:tree_offsets[t + 1]``, in preorder
    (a node, its left subtree, its right subtree; the root first). Child
    indices count from the tree's first node. A row goes left at an internal
    node when ``X[row, feature] <= threshold`` (equivalently binned
    ``bin <= threshold_bin``).

    Attributes
    ----------
    tree_offsets : ndarray of int64, shape (n_trees + 1,)
    feature : ndarray of int32, shape (n_nodes,)
        Split feature, -1 at leaves.
    threshold_bin : ndarray of int32, shape (n_nodes,)
        Split bin, -1 at leaves.
    threshold : ndarray of float64, shape (n_nodes,)
        Split value (the bin's upper edge), 0 at leaves.
    left, right : ndarray of int32, shape (n_nodes,)
        Children, -1 at leaves.
    value : ndarray of float64, shape (n_nodes, n_values)
        Class fractions (classification) or mean target (regression) of the
        node's bootstrap rows.
    n_node_samples : ndarray of float64, shape (n_nodes,)
        Bootstrap-weighted rows reaching the node.
    impurity_decrease : ndarray of float64, shape (n_nodes,)
        ``W_node * impurity - W_left * impurity_left - W_right * impurity_right``
        of the split (0 at leaves), in the criterion's units.
    """

    def __init__(self, tree_offsets, feature, threshold_bin, threshold, left, right, value,
                 n_node_samples, impurity_decrease):
        self.tree_offsets = np.ascontiguousarray(tree_offsets, dtype=np.int64)
        fields = {"feature": feature, "threshold_bin": threshold_bin, "threshold": threshold,
                  "left": left, "right": right, "value": value,
                  "n_node_samples": n_node_samples, "impurity_decrease": impurity_decrease}
        for name, dtype in _NODE_DTYPES.items():
            setattr(self, name, np.ascontiguousarray(fields[name], dtype=dtype))
        self._links = self._bin_thresholds = None  # made for prediction when first needed

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_links"] = state["_bin_thresholds"] = None  # remade when needed
        return state

    def __setstate__(self, state):
        self.__dict__.update({"_links": None, "_bin_thresholds": None, **state})

    @classmethod
    def empty(cls, n_values):
        """A forest of no trees."""
        z = np.zeros(0)
        return cls(np.zeros(1, np.int64), z, z, z, z, z, np.zeros((0, n_values)), z, z)

    @property
    def n_trees(self):
        return len(self.tree_offsets) - 1

    @property
    def n_nodes(self):
        return len(self.feature)

    @property
    def n_values(self):
        return self.value.shape[1]

    def node_counts(self):
        """Nodes of every tree."""
        return np.diff(self.tree_offsets)

    def depths(self):
        """Depth of every tree (a single leaf has depth 0)."""
        result = np.zeros(self.n_trees, dtype=np.int64)
        tree_of = np.repeat(np.arange(self.n_trees), self.node_counts())
        nodes, depth = self.tree_offsets[:-1].copy(), 0
        while len(nodes):
            np.maximum.at(result, tree_of[nodes], depth)
            internal = nodes[self.feature[nodes] >= 0]
            start = self.tree_offsets[tree_of[internal]]
            nodes = np.concatenate([start + self.left[internal], start + self.right[internal]])
            depth += 1
        return result

    def concatenate(self, other):
        """This forest's trees followed by ``other``'s."""
        offsets = np.concatenate([self.tree_offsets, other.tree_offsets[1:] + self.n_nodes])
        return Forest(offsets, *(np.concatenate([getattr(self, name), getattr(other, name)])
                                 for name in _NODE_FIELDS))

    def mean_values(self, X):
        """Mean over the trees of each row's leaf value: ndarray (n_rows, n_values)."""
        return self._mean_values(X, self.threshold)

    def mean_values_binned(self, Xb):
        """:meth:`mean_values` of rows binned with the edges the forest was grown on
        (uint8, ``bin <= threshold_bin`` exactly where ``x <= threshold``): the same
        values, from smaller rows and nodes."""
        return self._mean_values(Xb, self._binned_thresholds())

    def _binned_thresholds(self):
        """Every node's bin threshold as uint8 (0 at leaves; made once)."""
        if self._bin_thresholds is None:
            self._bin_thresholds = np.where(self.feature >= 0, self.threshold_bin,
                                            0).astype(np.uint8)
        return self._bin_thresholds

    def _mean_values(self, rows, thresholds):
        out = np.empty((len(rows), self.n_values), dtype=np.float64)
        if len(rows):
            forest_mean_values(rows, self.tree_offsets, self._split_links(), thresholds,
                               self.value, _block_of(len(rows)), out)
        return out

    def out_of_bag_sums(self, Xb, global_index, seed, bootstrapped):
        """Per row of ``Xb`` (binned as for :meth:`mean_values_binned`), the sum of the
        leaf values of the trees whose bootstrap left it out, and their number.

        ``global_index``: the rows' indices in the whole data set; ``seed``: the
        bootstrap's seed; ``bootstrapped[t]``: whether tree ``t`` drew a
        bootstrap (else it saw every row).
        """
        n = len(Xb)
        sums = np.empty((n, self.n_values), dtype=np.float64)
        counts = np.empty(n, dtype=np.int64)
        if n:
            oob_sums(Xb, global_index, seed, np.arange(self.n_trees, dtype=np.int64),
                     bootstrapped, self.tree_offsets, self._split_links(),
                     self._binned_thresholds(), self.value, _block_of(n), sums, counts)
        return sums, counts

    def _split_links(self):
        """``right << 32 | feature`` of every split node, -1 at leaves (made once)."""
        if self._links is None:
            split = self.feature >= 0
            first = np.repeat(self.tree_offsets[:-1], self.node_counts())
            if not np.array_equal(self.left[split], (np.arange(self.n_nodes) - first)[split] + 1):
                raise InvalidArgumentError("a forest's nodes must be in preorder (every split's "
                                           "left child right after it)")
            self._links = np.where(split, (self.right.astype(np.int64) << 32)
                                   | self.feature.astype(np.int64), -1)
        return self._links

    def feature_importances(self, n_features):
        """Mean decrease in impurity: per tree normalised to sum 1, averaged, normalised."""
        total = np.zeros(n_features, dtype=np.float64)
        for t in range(self.n_trees):
            nodes = slice(self.tree_offsets[t], self.tree_offsets[t + 1])
            feature = self.feature[nodes]
            split = feature >= 0
            per_tree = np.bincount(feature[split], weights=self.impurity_decrease[nodes][split],
                                   minlength=n_features)
            if per_tree.sum() > 0:
                total += per_tree / per_tree.sum()
        return total / total.sum() if total.sum() > 0 else total

    # -- serialisation --------------------------------------------------------------------
    def state(self):
        """The arrays, in a dict (no pickles)."""
        return {"tree_offsets": self.tree_offsets, "feature": self.feature,
                "threshold_bin": self.threshold_bin, "threshold": self.threshold,
                "left": self.left, "right": self.right, "value": self.value,
                "n_node_samples": self.n_node_samples,
                "impurity_decrease": self.impurity_decrease}

    @classmethod
    def from_state(cls, state):
        """Inverse of :meth:`state`."""
        return cls(np.asarray(state["tree_offsets"]),
                   **{name: np.asarray(state[name]) for name in _NODE_FIELDS})

    def to_vector(self):
        """All arrays in one float64 vector: ``[n_trees, n_nodes, n_values, offsets, ...]``.

        Integers are exact in float64 (they are far below 2**53).
        """
        parts = [np.array([self.n_trees, self.n_nodes, self.n_values], dtype=np.float64),
                 self.tree_offsets, *(getattr(self, name) for name in _INT_FIELDS),
                 *(getattr(self, name) for name in _FLOAT_FIELDS), self.value.ravel()]
        return np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])

    @classmethod
    def from_vector(cls, vector):
        """Inverse of :meth:`to_vector`.

        Raises
        ------
        ValueError
            When the vector's length does not match its own header.
        """
        vector = np.asarray(vector, dtype=np.float64).ravel()
        if len(vector) < 3:
            raise InvalidArgumentError(f"a forest vector has at least 3 values, got {len(vector)}")
        n_trees, n_nodes, n_values = (int(v) for v in vector[:3])
        expected = 3 + (n_trees + 1) + n_nodes * (len(_INT_FIELDS) + len(_FLOAT_FIELDS)
                                                  + n_values)
        if len(vector) != expected or min(n_trees, n_nodes, n_values) < 0:
            raise InvalidArgumentError(
                f"got {len(vector)} values; a forest of {n_trees} trees, "
                f"{n_nodes} nodes and {n_values} values per node has {expected}")
        at = 3
        offsets = vector[at:at + n_trees + 1].astype(np.int64)
        at += n_trees + 1
        fields = {}
        for name in _INT_FIELDS + _FLOAT_FIELDS:
            fields[name] = vector[at:at + n_nodes]
            at += n_nodes
        value = vector[at:].reshape(n_nodes, n_values)
        return cls(offsets, fields["feature"], fields["threshold_bin"], fields["threshold"],
                   fields["left"], fields["right"], value, fields["n_node_samples"],
                   fields["impurity_decrease"])


class ForestBuilder:
    """Forests appended tree after tree into arrays that grow rarely.

    The arrays are sized on the first append for ``expected_trees`` trees like
    the first ones (with a margin; they double when that is short), so that a
    fit keeps one set of long-lived arrays instead of a forest per batch and
    a copy of them all at the end. :meth:`forest` views them (no copy).

    Parameters
    ----------
    n_values : int
    expected_trees : int
        Trees the finished forest will have.
    """

    MARGIN = 1.25

    def __init__(self, n_values, expected_trees):
        self.n_values, self.expected_trees = n_values, expected_trees
        self.n_nodes = 0
        self.offsets = [np.zeros(1, dtype=np.int64)]
        self.arrays = None

    def append(self, forest):
        """Add ``forest``'s trees after those appended so far."""
        if forest.n_trees:
            self._add(forest.tree_offsets, {name: getattr(forest, name) for name in _NODE_FIELDS})

    def append_tree(self, **fields):
        """Add one tree given as :class:`Forest`'s node arrays (keywords), converted."""
        n = len(fields["feature"])
        self._add(np.array([0, n], dtype=np.int64), fields)

    def _add(self, tree_offsets, fields):
        n = int(tree_offsets[-1])
        needed = self.n_nodes + n
        if self.arrays is None:
            per_tree = n / (len(tree_offsets) - 1)
            self._resize(max(needed, int(per_tree * self.expected_trees * self.MARGIN)))
        elif needed > len(self.arrays["feature"]):
            self._resize(max(needed, 2 * len(self.arrays["feature"])))
        for name, array in self.arrays.items():
            array[self.n_nodes:needed] = np.reshape(fields[name], (n,) + array.shape[1:])
        self.offsets.append(tree_offsets[1:] + self.n_nodes)
        self.n_nodes = needed

    def _resize(self, capacity):
        arrays = {}
        for name, dtype in _NODE_DTYPES.items():
            shape = (capacity, self.n_values) if name == "value" else (capacity,)
            arrays[name] = np.empty(shape, dtype=dtype)
            if self.arrays is not None:
                arrays[name][:self.n_nodes] = self.arrays[name][:self.n_nodes]
        self.arrays = arrays

    def forest(self):
        """The trees so far, as a :class:`Forest` viewing this builder's arrays."""
        if self.arrays is None:
            return Forest.empty(self.n_values)
        offsets = np.concatenate(self.offsets)
        self.offsets = [offsets]
        return Forest(offsets, **{name: array[:self.n_nodes]
                                  for name, array in self.arrays.items()})


def _block_of(n_rows):
    """Rows a thread takes at a time: a share for every thread, at most PREDICT_BLOCK, a
    multiple of LANES."""
    block = -(-n_rows // numba.get_num_threads())
    return min(PREDICT_BLOCK, max(LANES, -(-block // LANES) * LANES))
