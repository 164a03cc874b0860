"""scikit-learn's best-first CART, grown on presorted columns: the same tree, many times faster.

``DecisionTreeClassifier(max_leaf_nodes=L, criterion="gini", splitter="best")`` sorts every
feature of every node it splits (n d log n per level). This builder sorts each column once
(:func:`pipeline.trees._cart_kernels.presort_columns`), keeps every node's rows sorted by
every feature by stable partitions, and scores all boundaries of a feature in one sweep.
Everything that decides the tree is reproduced from scikit-learn's source (1.3 and later,
``_splitter.pyx`` / ``_tree.pyx`` / ``_criterion.pyx``), so the fitted tree is the same node
for node — features, thresholds, impurities, counts, node numbering:

* the values are ``float32`` (scikit-learn casts X), ties within FEATURE_THRESHOLD (1e-7,
  added in float32) are one value, the threshold is ``v_prev / 2.0 + v / 2.0`` in float64;
* the Gini proxy and the impurity improvement are computed with the same float64 operations
  in the same order (the class counts and their squares are exact integers);
* features are visited in scikit-learn's random order: its xorshift generator ``our_rand_r``
  seeded with ``random_state.randint(0, RAND_R_MAX)``, the Fisher-Yates draws of
  ``node_split_best`` over a feature array that persists from node to node, constant
  features (max <= min + 1e-7) swapped aside; the first feature with the largest proxy wins;
* nodes are split when they are added (left child, then right child, as the builder does)
  and expanded in the order of libstdc++'s ``push_heap`` / ``pop_heap`` on the improvement;
  ``max_depth``, ``min_samples_leaf`` (int or fraction), ``min_samples_split = 2 * min_samples_leaf``
  and the EPSILON tests are scikit-learn's.

The result is a fitted :class:`~sklearn.tree.DecisionTreeClassifier` whose ``tree_`` is
restored from these arrays (the pickle state), so it predicts, exports and converts as one
fitted by scikit-learn. Dense input, no sample weights, criterion "gini", splitter "best",
every feature considered (``max_features=None``): CART's settings, and the only ones
supported (:func:`supported`).
"""

from __future__ import annotations

from math import ceil
from numbers import Integral

import numpy as np
from sklearn.tree import DecisionTreeClassifier
from sklearn.tree._tree import Tree
from sklearn.utils import check_random_state

from pipeline.threads import current_threads
from pipeline.trees import _cart_kernels as kernels

_RAND_R_MAX = 0x7FFFFFFF
_EPSILON = float(np.finfo(np.float64).eps)
_TREE_LEAF, _TREE_UNDEFINED = -1, -2


class _Rand:
    """scikit-learn's ``our_rand_r`` (xorshift32) and ``rand_int``."""

    def __init__(self, seed: int):
        self.state = int(seed)

    def below(self, high: int) -> int:
        s = self.state or 1  # DEFAULT_SEED
        s ^= (s << 13) & 0xFFFFFFFF
        s ^= s >> 17
        s ^= (s << 5) & 0xFFFFFFFF
        self.state = s
        return (s % (_RAND_R_MAX + 1)) % high


def _push_heap(heap: list, key) -> None:
    """libstdc++'s ``std::push_heap`` with ``comp(a, b) = key(a) < key(b)`` (a max-heap)."""
    hole = len(heap) - 1
    value = heap[hole]
    _sift_up(heap, hole, 0, value, key)


def _sift_up(heap, hole, top, value, key):
    parent = (hole - 1) // 2
    while hole > top and key(heap[parent]) < key(value):
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = value


def _pop_heap(heap: list, key):
    """libstdc++'s ``std::pop_heap`` then ``back()`` / ``pop_back()``: the record popped."""
    n = len(heap)
    if n > 1:
        last = n - 1
        value = heap[last]
        heap[last] = heap[0]
        # __adjust_heap(first, 0, last, value)
        length, hole, top, child = last, 0, 0, 0
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if key(heap[child]) < key(heap[child - 1]):
                child -= 1
            heap[hole] = heap[child]
            hole = child
        if (length & 1) == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            heap[hole] = heap[child - 1]
            hole = child - 1
        _sift_up(heap, hole, top, value, key)
    return heap.pop()


def supported(X) -> bool:
    """Whether :func:`fit` reproduces scikit-learn for this input (dense, fits int32 row ids)."""
    return isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[0] < 2**31 - 1


class _Builder:
    """State of one best-first growth (scikit-learn's BestFirstTreeBuilder + BestSplitter)."""

    def __init__(self, cols, codes, n_classes, *, max_leaf_nodes, max_depth, min_samples_leaf, seed):
        self.k = n_classes
        self.d, self.n = cols.shape
        self.orders, self.vals, self.labels = kernels.presort_columns(cols, codes, current_threads())
        self.goes_left = np.zeros(self.n, dtype=np.uint8)
        self.max_leaf_nodes, self.max_depth, self.min_leaf = max_leaf_nodes, max_depth, min_samples_leaf
        self.min_split = max(2, 2 * min_samples_leaf)
        self.rand = _Rand(seed)
        self.features = list(range(self.d))  # persists across nodes, as the splitter's array does
        self.nodes: list[dict] = []

    def _visit_order(self, const):
        """Features in the order node_split_best evaluates them (max_features = n_features)."""
        features, d = self.features, self.d
        f_i, n_found, visited, order = d, 0, 0, []
        while f_i > n_found and (visited < d or visited <= n_found):
            visited += 1
            f_j = self.rand.below(f_i - n_found) + n_found
            f = features[f_j]
            if const[f]:
                features[f_j], features[n_found] = features[n_found], features[f_j]
                n_found += 1
                continue
            f_i -= 1
            features[f_i], features[f_j] = features[f_j], features[f_i]
            order.append(f)
        return order

    def _split(self, start, end, counts, impurity):
        """node_split_best on rows [start, end): (feature, pos, threshold, improvement, imp_l, imp_r,
        left counts) or None when no split is allowed."""
        proxy, pos, const = kernels.sweep_features(self.vals, self.labels, start, end, counts, self.min_leaf)
        best_f, best = -1, -np.inf
        for f in self._visit_order(const):
            if proxy[f] > best:
                best, best_f = proxy[f], f
        if best_f < 0:
            return None
        p = int(pos[best_f])
        vals = self.vals[best_f]
        threshold = float(vals[p - 1]) / 2.0 + float(vals[p]) / 2.0
        left = kernels.class_counts(self.labels[best_f, start:p], self.k)
        right = counts - left
        w_n, w_l, w_r = float(end - start), float(p - start), float(end - p)
        imp_l = 1.0 - float((left * left).sum()) / (w_l * w_l)
        imp_r = 1.0 - float((right * right).sum()) / (w_r * w_r)
        improvement = (w_n / self.n) * (impurity - (w_r / w_n * imp_r) - (w_l / w_n * imp_l))
        return best_f, p, threshold, improvement, imp_l, imp_r, left

    def add(self, start, end, counts, impurity, depth, parent, is_left):
        """_add_split_node: a new node, split now if it may be; its frontier record."""
        n_node = end - start
        is_leaf = (depth >= self.max_depth or n_node < self.min_split or n_node < 2 * self.min_leaf
                   or impurity <= _EPSILON)
        split = None
        if not is_leaf:
            split = self._split(start, end, counts, impurity)
            is_leaf = split is None or split[3] + _EPSILON < 0.0
        node_id = len(self.nodes)
        node = {"left": _TREE_LEAF, "right": _TREE_LEAF, "feature": _TREE_UNDEFINED,
                "threshold": float(_TREE_UNDEFINED), "impurity": impurity, "n": n_node, "counts": counts,
                "missing_left": 0}
        if not is_leaf:
            node.update(feature=split[0], threshold=split[2], missing_left=int(split[1] - start > end - split[1]))
        self.nodes.append(node)
        if parent is not None:
            self.nodes[parent]["left" if is_left else "right"] = node_id
        record = {"node": node_id, "start": start, "end": end, "depth": depth, "impurity": impurity,
                  "is_leaf": is_leaf, "pos": end, "improvement": 0.0}
        if not is_leaf:
            record.update(pos=split[1], improvement=split[3], imp_l=split[4], imp_r=split[5], left=split[6])
        return record

    def grow(self):
        counts = kernels.class_counts(self.labels[0], self.k)
        w = float(self.n)
        root_impurity = 1.0 - float((counts * counts).sum()) / (w * w)
        frontier = [self.add(0, self.n, counts, root_impurity, 0, None, True)]
        key = _improvement
        budget = self.max_leaf_nodes - 1
        max_depth_seen = -1
        while frontier:
            rec = _pop_heap(frontier, key)
            node = self.nodes[rec["node"]]
            if rec["is_leaf"] or budget <= 0:
                node.update(left=_TREE_LEAF, right=_TREE_LEAF, feature=_TREE_UNDEFINED,
                            threshold=float(_TREE_UNDEFINED))
            else:
                budget -= 1
                start, pos, end = rec["start"], rec["pos"], rec["end"]
                kernels.partition_segments(self.orders, self.vals, self.labels, start, pos, end, node["feature"],
                                           self.goes_left)
                left = self.add(start, pos, rec["left"], rec["imp_l"], rec["depth"] + 1, rec["node"], True)
                right = self.add(pos, end, node["counts"] - rec["left"], rec["imp_r"], rec["depth"] + 1,
                                 rec["node"], False)
                for r in (left, right):
                    frontier.append(r)
                    _push_heap(frontier, key)
            max_depth_seen = max(max_depth_seen, rec["depth"])
        return max_depth_seen


def _improvement(record) -> float:
    return record["improvement"]


def _sklearn_tree(nodes, n_features, n_classes, max_depth) -> Tree:
    """A scikit-learn Tree restored (pickle state) from the builder's nodes."""
    tree = Tree(n_features, np.array([n_classes], dtype=np.intp), 1)
    dtype = tree.__getstate__()["nodes"].dtype
    arr = np.zeros(len(nodes), dtype=dtype)
    counts = np.stack([nd["counts"] for nd in nodes]).astype(np.float64)
    n_node = np.array([nd["n"] for nd in nodes], dtype=np.float64)
    for name, key in (("left_child", "left"), ("right_child", "right"), ("feature", "feature"),
                      ("threshold", "threshold"), ("impurity", "impurity"), ("n_node_samples", "n"),
                      ("missing_go_to_left", "missing_left")):
        arr[name] = [nd[key] for nd in nodes]
    arr["weighted_n_node_samples"] = n_node
    values = (counts / n_node[:, None])[:, None, :]
    tree.__setstate__({"max_depth": int(max_depth), "node_count": len(nodes), "nodes": arr,
                       "values": np.ascontiguousarray(values)})
    return tree


def fit(X, codes, *, center, scale, max_leaf_nodes: int, max_depth=None, min_samples_leaf=1,
        random_state=None) -> DecisionTreeClassifier:
    """``DecisionTreeClassifier(max_leaf_nodes, max_depth, min_samples_leaf, random_state)`` fitted
    on ``(X - center) / scale`` and the integer labels ``codes``, the same tree, grown here.

    ``X`` is the unscaled float64 (n, d) array; the scaled float32 columns are made in one pass.
    """
    codes = np.asarray(codes)
    counts = np.bincount(codes) if codes.dtype.kind in "iu" and codes.size and codes.min() >= 0 else None
    if counts is not None and counts.all():  # already 0..k-1, every class present (CART's codes)
        classes, y = np.arange(counts.size, dtype=codes.dtype), codes
    else:
        classes, y = np.unique(codes, return_inverse=True)
    n, d = X.shape
    msl = int(min_samples_leaf) if isinstance(min_samples_leaf, Integral) else int(ceil(min_samples_leaf * n))
    est = DecisionTreeClassifier(max_leaf_nodes=max_leaf_nodes, max_depth=max_depth,
                                 min_samples_leaf=min_samples_leaf, random_state=random_state)
    seed = check_random_state(random_state).randint(0, _RAND_R_MAX)
    cols = kernels.scaled_columns(np.ascontiguousarray(X, dtype=np.float64), np.asarray(center, np.float64),
                                  np.asarray(scale, np.float64))
    builder = _Builder(cols, y.astype(np.uint8 if classes.size <= 256 else np.int32), classes.size, max_leaf_nodes=max_leaf_nodes,
                       max_depth=np.iinfo(np.int32).max if max_depth is None else max_depth,
                       min_samples_leaf=msl, seed=seed)
    depth = builder.grow()
    est.n_features_in_, est.n_outputs_ = d, 1
    est.classes_, est.n_classes_ = classes, int(classes.size)
    est.max_features_ = d
    est.tree_ = _sklearn_tree(builder.nodes, d, classes.size, depth)
    return est
