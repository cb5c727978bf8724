"""A forest of regression trees as plain arrays, saved and evaluated without unpickling.

Saved as ``.npz`` (loaded with ``allow_pickle=False``) and checked before use.

Why not pickle or joblib: loading a pickle runs code named in the file. Here a tree is
five arrays (``children_left``, ``children_right``, ``feature``, ``threshold``, ``value``,
as in scikit-learn's ``tree_``); :meth:`ArrayForest.check` proves each tree is well formed
(children inside the tree and after their parent, so no cycles; features inside the input;
finite leaves) before anything evaluates it.

Evaluation uses scikit-learn's compiled tree (rebuilt from the checked arrays through its
``__setstate__``, the route its own unpickler takes, with no pickle involved) when that
private interface is there, and a numpy traversal otherwise; both give the same numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["ArrayForest"]

_KEYS = ("offsets", "children_left", "children_right", "feature", "threshold", "value")


class ArrayForest:
    """Mean of regression trees stored as concatenated node arrays.

    Args:
        offsets: ``int64[n_trees + 1]``: tree ``t`` holds nodes ``offsets[t]:offsets[t+1]``.
        children_left, children_right: ``int64[n_nodes]``: child node within the tree, -1 at a leaf.
        feature: ``int64[n_nodes]``: input column a split reads (ignored at a leaf).
        threshold: ``float64[n_nodes]``: go left when ``x[feature] <= threshold``.
        value: ``float64[n_nodes]``: the node's prediction (used at leaves).
        n_features: number of input columns.
    """

    def __init__(
        self,
        offsets: np.ndarray,
        children_left: np.ndarray,
        children_right: np.ndarray,
        feature: np.ndarray,
        threshold: np.ndarray,
        value: np.ndarray,
        n_features: int,
    ) -> None:
        self.offsets = np.asarray(offsets)
        self.children_left = np.asarray(children_left)
        self.children_right = np.asarray(children_right)
        self.feature = np.asarray(feature)
        self.threshold = np.asarray(threshold)
        self.value = np.asarray(value)
        self.n_features = int(n_features)
        self.check()
        self._compiled: list | None = None

    @classmethod
    def from_sklearn(cls, forest) -> "ArrayForest":
        """From a fitted single-output scikit-learn forest (ExtraTrees, RandomForest)."""
        trees = [e.tree_ for e in forest.estimators_]
        sizes = np.array([t.node_count for t in trees], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        cat = lambda get, dt: np.concatenate([np.asarray(get(t), dtype=dt) for t in trees])  # noqa: E731
        return cls(
            offsets,
            cat(lambda t: t.children_left, np.int64),
            cat(lambda t: t.children_right, np.int64),
            cat(lambda t: t.feature, np.int64),
            cat(lambda t: t.threshold, np.float64),
            cat(lambda t: t.value[:, 0, 0], np.float64),
            forest.n_features_in_,
        )

    @property
    def n_trees(self) -> int:
        """Number of trees."""
        return len(self.offsets) - 1

    def check(self) -> None:
        """Raise ``ValueError`` unless every array and every tree is well formed.

        Raise ``ValueError`` unless every array has its dtype and shape and every tree is
        well formed (what makes evaluating untrusted arrays safe).
        """
        want = {
            "offsets": np.integer,
            "children_left": np.integer,
            "children_right": np.integer,
            "feature": np.integer,
            "threshold": np.floating,
            "value": np.floating,
        }
        for k, kind in want.items():
            a = getattr(self, k)
            if a.ndim != 1 or not np.issubdtype(a.dtype, kind):
                raise ValueError(f"forest: {k} must be a 1-d {kind.__name__} array")
        n = len(self.children_left)
        if not all(len(getattr(self, k)) == n for k in _KEYS[1:]):
            raise ValueError("forest: node arrays differ in length")
        off = self.offsets
        if len(off) < 2 or off[0] != 0 or off[-1] != n or (np.diff(off) < 1).any():
            raise ValueError("forest: offsets do not partition the nodes into non-empty trees")
        tree_of = np.repeat(np.arange(len(off) - 1), np.diff(off))
        local = np.arange(n) - off[tree_of]
        size = np.diff(off)[tree_of]
        leaf = self.children_left == -1
        if (leaf != (self.children_right == -1)).any():
            raise ValueError("forest: a node has exactly one child")
        inner = ~leaf
        for ch in (self.children_left[inner], self.children_right[inner]):
            # children after their parent (scikit-learn builds depth first): no cycles
            if ((ch <= local[inner]) | (ch >= size[inner])).any():
                raise ValueError("forest: a child index is outside its tree or not after its parent")
        if ((self.feature[inner] < 0) | (self.feature[inner] >= self.n_features)).any():
            raise ValueError("forest: a split reads a column outside the input")
        if not (np.isfinite(self.value[leaf]).all() and not np.isnan(self.threshold[inner]).any()):
            raise ValueError("forest: a leaf value or threshold is not a number")

    # -- saving ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the arrays to a compressed ``.npz`` (plain arrays, no pickled objects).

        Indices are stored as int32 and what no prediction reads (the value of inner
        nodes, the split of leaves) as zeros, so that the file compresses well; thresholds
        and leaf values keep float64, so a loaded forest predicts exactly as the fitted one.
        """
        leaf = self.children_left == -1
        if len(self.children_left) >= 2**31:
            raise ValueError("forest: too many nodes for int32 indices")
        arrays = {
            "offsets": self.offsets.astype(np.int64),
            "children_left": self.children_left.astype(np.int32),
            "children_right": self.children_right.astype(np.int32),
            "feature": np.where(leaf, 0, self.feature).astype(np.int32),
            "threshold": np.where(leaf, 0.0, self.threshold).astype(np.float64),
            "value": np.where(leaf, self.value, 0.0).astype(np.float64),
        }
        with open(path, "wb") as f:
            np.savez_compressed(f, n_features=np.int64(self.n_features), **arrays)

    @classmethod
    def load(cls, path: str | Path) -> "ArrayForest":
        """Read an ``.npz`` written by :meth:`save` with ``allow_pickle=False`` and check it."""
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in (*_KEYS, "n_features") if k not in z.files]
            if missing:
                raise ValueError(f"forest: {Path(path).name} lacks array {missing[0]!r}")
            arrays = {k: z[k] for k in _KEYS}
            # widen the stored int32 indices (checked below, like everything else)
            for k in ("children_left", "children_right", "feature"):
                if np.issubdtype(arrays[k].dtype, np.integer):
                    arrays[k] = arrays[k].astype(np.int64)
            n_features = int(z["n_features"])
        return cls(**arrays, n_features=n_features)

    # -- evaluation -----------------------------------------------------------------------

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Mean of the trees' predictions for the rows of ``X`` (rows x n_features)."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"forest: expected {self.n_features} input columns, got {X.shape}")
        # scikit-learn compares float32 inputs with float64 thresholds: do the same, so that
        # both paths and the fitted model agree exactly
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        trees = self._compiled_trees()
        out = np.zeros(len(X32), dtype=np.float64)
        if trees is not None:
            for t in trees:
                out += t.predict(X32).reshape(len(X32))
        else:
            for t in range(self.n_trees):
                out += self._predict_numpy(t, X32)
        return out / self.n_trees

    def _predict_numpy(self, t: int, X32: np.ndarray) -> np.ndarray:
        a, b = self.offsets[t], self.offsets[t + 1]
        left, right = self.children_left[a:b], self.children_right[a:b]
        feat, thr, val = self.feature[a:b], self.threshold[a:b], self.value[a:b]
        node = np.zeros(len(X32), dtype=np.int64)
        rows = np.arange(len(X32))
        active = left[node] != -1
        while active.any():
            r, nd = rows[active], node[active]
            go_left = X32[r, feat[nd]].astype(np.float64) <= thr[nd]
            node[r] = np.where(go_left, left[nd], right[nd])
            active[r] = left[node[r]] != -1
        return val[node]

    def _compiled_trees(self) -> list | None:
        if self._compiled is None:
            try:
                self._compiled = self._build_sklearn_trees()
            except Exception:  # private interface changed: the numpy path still works
                self._compiled = []
        return self._compiled or None

    def _build_sklearn_trees(self) -> list:
        from sklearn.tree._tree import NODE_DTYPE, Tree

        out = []
        for t in range(self.n_trees):
            a, b = self.offsets[t], self.offsets[t + 1]
            nodes = np.zeros(b - a, dtype=NODE_DTYPE)
            nodes["left_child"] = self.children_left[a:b]
            nodes["right_child"] = self.children_right[a:b]
            nodes["feature"] = np.where(self.children_left[a:b] == -1, -2, self.feature[a:b])
            nodes["threshold"] = np.where(self.children_left[a:b] == -1, -2.0, self.threshold[a:b])
            nodes["n_node_samples"] = 1
            nodes["weighted_n_node_samples"] = 1.0
            tree = Tree(self.n_features, np.array([1], dtype=np.intp), 1)
            tree.__setstate__(
                {
                    "max_depth": _depth(self.children_left[a:b], self.children_right[a:b]),
                    "node_count": int(b - a),
                    "nodes": nodes,
                    "values": np.ascontiguousarray(self.value[a:b].reshape(-1, 1, 1)),
                }
            )
            out.append(tree)
        return out


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """Depth of a checked tree (root at 0), one numpy step per level."""
    frontier, depth = np.array([0]), 0
    while True:
        inner = frontier[left[frontier] != -1]
        if not len(inner):
            return depth
        frontier = np.concatenate([left[inner], right[inner]])
        depth += 1
