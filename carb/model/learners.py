"""Base learners behind one small interface: fit, predict, save to a code-free format, load.

Kinds and their files:

``xgboost``     XGBoost booster, saved as UBJSON (``.ubj``).
``lightgbm``    LightGBM booster, saved as LightGBM's model text (``.txt``).
``extratrees``  scikit-learn ExtraTrees, saved as node arrays (``.npz``, see :mod:`._forest`).
``catboost``    CatBoost (symmetric trees, ordered target statistics for the inputs named
                in its setting ``categorical``), saved in CatBoost's binary model format
                (``.cbm``: data, not code). Optional: ``pip install 'carb[catboost]'``.
``linear``      ridge regression on log1p of chosen inputs (one-hot for categoricals); its
                few numbers live in the manifest (no file).
``additive``    a non-negative sum of costs, ``c0 + c1 * flops + c2 * bytes + ...``, fitted by
                non-negative least squares on relative error, predicting its log: a
                roofline-style cost model (time or energy = work / rate summed over the
                kinds of work, memory = resident bytes + a baseline) that extrapolates
                along the physics and never falls when a cost grows. Manifest only.

Each learner sees the target already transformed (log space) and predicts in it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from carb.families import nb201 as _nb201

from ._forest import ArrayForest
from ._inputs import BATCH_SCALED, CODES

__all__ = ["KINDS", "DERIVED", "fit_learner", "load_learner", "Learner", "MissingDependency"]

KINDS = ("xgboost", "lightgbm", "extratrees", "catboost", "linear", "additive")
_TREES = ("xgboost", "lightgbm", "extratrees", "catboost")

#: Inputs a tree learner may derive from its matrix (learner setting ``derive``: a name
#: here): name -> (the input columns it reads, the names of the columns it adds, a
#: closed-form vectorized function of the read columns' values). ``nb201-cell``: the
#: figures of a NAS-Bench-201 cell's effective DAG from its six edge codes
#: (:func:`carb.families.nb201.cell_features`; -1 on rows of other families).
DERIVED: dict[str, tuple[tuple[str, ...], tuple[str, ...], Any]] = {
    "nb201-cell": (
        tuple(_nb201.EDGE_COLUMNS),
        _nb201.CELL_FEATURE_COLUMNS,
        lambda v: _nb201.cell_features(np.where(np.isfinite(v), v, -1).astype(np.int64)),
    ),
}


class Learner:
    """A fitted base learner. ``predict`` maps an input matrix to log-space predictions."""

    kind: str = ""

    def predict(self, X: np.ndarray) -> np.ndarray:  # pragma: no cover - interface
        """Log-space predictions of the rows of ``X``."""
        raise NotImplementedError

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        """Write the learner's file(s); return its manifest entry (JSON-serialisable)."""
        raise NotImplementedError  # pragma: no cover - interface


def _monotone(columns: list[str], monotone: bool) -> list[int] | None:
    # +1 on inputs that grow with the batch at a fixed network (and on upstream predicted
    # costs): a larger batch never costs less in total
    if not monotone:
        return None
    return [1 if (c in BATCH_SCALED or c.startswith("pred_")) else 0 for c in columns]


def fit_learner(
    kind: str,
    params: dict[str, Any],
    X: np.ndarray,
    y: np.ndarray,
    columns: list[str],
    monotone: bool = False,
    n_jobs: int = 1,
    seed: int = 0,
) -> Learner:
    """Fit one base learner of ``kind`` with ``params`` on ``X`` and ``y``.

    Fit one base learner of ``kind`` with ``params`` on ``X`` (rows x columns) and ``y``.
    ``params["derive"]`` (tree kinds): a name of :data:`DERIVED`, whose columns the learner
    adds to its inputs (and recomputes when it predicts).
    """
    if "derive" in params:
        params = dict(params)
        name = params.pop("derive")
        if kind not in _TREES:
            raise ValueError(f"learner setting derive: only tree learners derive inputs, not {kind!r}")
        if name not in DERIVED:
            raise ValueError(f"learner setting derive: unknown value {name!r} (expected one of {', '.join(DERIVED)})")
        reads, adds, _ = DERIVED[name]
        absent = [c for c in reads if c not in columns]
        if absent:
            raise ValueError(
                f"learner setting derive={name!r}: the inputs lack column {absent[0]} (it reads {', '.join(reads)})"
            )
        index = [columns.index(c) for c in reads]
        inner = fit_learner(
            kind,
            params,
            _Derived.augment(X, name, index),
            y,
            [*columns, *adds],
            monotone=monotone,
            n_jobs=n_jobs,
            seed=seed,
        )
        return _Derived(inner, name, index)
    if kind == "xgboost":
        return _XGB.fit(params, X, y, _monotone(columns, monotone), n_jobs, seed)
    if kind == "lightgbm":
        return _LGBM.fit(params, X, y, _monotone(columns, monotone), n_jobs, seed)
    if kind == "extratrees":
        return _ET.fit(params, X, y, n_jobs, seed)
    if kind == "catboost":
        return _CatBoost.fit(params, X, y, columns, _monotone(columns, monotone), n_jobs, seed)
    if kind == "linear":
        return _Linear.fit(params, X, y, columns)
    if kind == "additive":
        return _Additive.fit(params, X, y, columns)
    raise ValueError(f"unknown learner kind {kind!r} (expected one of {', '.join(KINDS)})")


def load_learner(directory: Path, entry: dict[str, Any], n_jobs: int = 1) -> Learner:
    """Load a learner from its manifest entry (files already checksum-verified)."""
    if "derive" in entry:
        name, index = entry.get("derive"), entry.get("derive_index")
        reads = DERIVED.get(name, ((),))[0] if isinstance(name, str) else ()
        if (
            not reads
            or not isinstance(index, list)
            or len(index) != len(reads)
            or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in index)
        ):
            raise ValueError(f"learner entry: malformed derive {name!r} / derive_index {index!r}")
        inner = load_learner(directory, {k: v for k, v in entry.items() if k not in ("derive", "derive_index")}, n_jobs)
        return _Derived(inner, name, index)
    kind = entry.get("kind")
    if kind == "xgboost":
        return _XGB.load(directory / entry["file"], n_jobs)
    if kind == "lightgbm":
        return _LGBM.load(directory / entry["file"], n_jobs)
    if kind == "extratrees":
        return _ET(ArrayForest.load(directory / entry["file"]))
    if kind == "catboost":
        return _CatBoost.load(directory / entry["file"], entry.get("categorical_index", []), n_jobs)
    if kind == "linear":
        return _Linear.from_entry(entry)
    if kind == "additive":
        return _Additive.from_entry(entry)
    raise ValueError(f"unknown learner kind {kind!r}")


class _Derived(Learner):
    """A tree learner that reads derived inputs (:data:`DERIVED`) after its matrix's columns."""

    def __init__(self, inner: Learner, name: str, index: list[int]) -> None:
        self.inner, self.name, self.index = inner, name, [int(i) for i in index]
        self.kind = inner.kind

    @staticmethod
    def augment(X: np.ndarray, name: str, index: list[int]) -> np.ndarray:
        if len(index) and max(index) >= X.shape[1]:
            raise ValueError(f"learner derive={name!r}: input column {max(index)} beyond the matrix's {X.shape[1]}")
        return np.column_stack([X, DERIVED[name][2](X[:, index])])

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.inner.predict(self.augment(X, self.name, self.index))

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        return {**self.inner.save(directory, stem), "derive": self.name, "derive_index": list(self.index)}


class _XGB(Learner):
    kind = "xgboost"

    def __init__(self, booster) -> None:
        self.booster = booster

    @classmethod
    def fit(cls, params, X, y, monotone, n_jobs, seed) -> "_XGB":
        import xgboost as xgb

        extra = {"monotone_constraints": "(" + ",".join(map(str, monotone)) + ")"} if monotone else {}
        model = xgb.XGBRegressor(**params, **extra, n_jobs=n_jobs, random_state=seed, verbosity=0)
        model.fit(X, y)
        return cls(model.get_booster())

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.booster.inplace_predict(X), dtype=np.float64)

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        name = f"{stem}.ubj"
        self.booster.save_model(str(directory / name))
        return {"kind": self.kind, "file": name}

    @classmethod
    def load(cls, path: Path, n_jobs: int) -> "_XGB":
        import xgboost as xgb

        booster = xgb.Booster()
        booster.load_model(str(path))  # UBJSON: data, not code
        booster.set_param({"nthread": n_jobs})
        return cls(booster)


class _LGBM(Learner):
    kind = "lightgbm"

    def __init__(self, booster, n_jobs: int = 1) -> None:
        self.booster = booster
        self.n_jobs = n_jobs

    @classmethod
    def fit(cls, params, X, y, monotone, n_jobs, seed) -> "_LGBM":
        import lightgbm as lgb

        extra = {"monotone_constraints": monotone} if monotone else {}
        model = lgb.LGBMRegressor(**params, **extra, n_jobs=n_jobs, random_state=seed, verbose=-1)
        model.fit(X, y)
        return cls(model.booster_, n_jobs)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.booster.predict(X, num_threads=self.n_jobs), dtype=np.float64)

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        name = f"{stem}.txt"
        self.booster.save_model(str(directory / name))
        return {"kind": self.kind, "file": name}

    @classmethod
    def load(cls, path: Path, n_jobs: int) -> "_LGBM":
        import lightgbm as lgb

        return cls(lgb.Booster(model_file=str(path)), n_jobs)  # LightGBM's own text format


class _ET(Learner):
    kind = "extratrees"

    def __init__(self, forest: ArrayForest) -> None:
        self.forest = forest

    @classmethod
    def fit(cls, params, X, y, n_jobs, seed) -> "_ET":
        from sklearn.ensemble import ExtraTreesRegressor

        model = ExtraTreesRegressor(**params, n_jobs=n_jobs, random_state=seed).fit(X, y)
        return cls(ArrayForest.from_sklearn(model))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.forest.predict(X)

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        name = f"{stem}.npz"
        self.forest.save(directory / name)
        return {"kind": self.kind, "file": name}


class MissingDependency(ValueError):
    """A learner kind whose optional package is not installed (one line, says what to install)."""


def _catboost():
    try:
        import catboost
    except ImportError:
        raise MissingDependency(
            "learner kind 'catboost' needs the catboost package: pip install 'carb[catboost]'"
        ) from None
    return catboost


class _CatBoost(Learner):
    """CatBoost on the matrix, with the named inputs as categories.

    CatBoost on the matrix; the inputs named in the setting ``categorical`` (e.g. the
    six NAS-Bench-201 edge operations) enter as categories (integer codes, missing -> -1):
    CatBoost splits on their ordered target statistics and combinations instead of on
    the codes' arbitrary order.
    """

    kind = "catboost"

    def __init__(self, model, categorical: list[int], n_jobs: int = 1) -> None:
        self.model, self.categorical, self.n_jobs = model, [int(i) for i in categorical], n_jobs

    @staticmethod
    def _frame(X: np.ndarray, categorical: list[int]):
        import pandas as pd

        df = pd.DataFrame(np.asarray(X, dtype=np.float64), columns=[f"x{j}" for j in range(X.shape[1])])
        for j in categorical:
            if j >= X.shape[1]:
                raise ValueError(f"catboost: categorical input column {j} beyond the matrix's {X.shape[1]}")
            v = X[:, j]
            df[f"x{j}"] = np.where(np.isfinite(v), v, -1).astype(np.int64)
        return df

    @classmethod
    def fit(cls, params, X, y, columns, monotone, n_jobs, seed) -> "_CatBoost":
        cb = _catboost()
        params = dict(params)
        names = list(params.pop("categorical", []))
        absent = [c for c in names if c not in columns]
        if absent:
            raise ValueError(f"catboost setting categorical: the inputs lack column {absent[0]}")
        index = [columns.index(c) for c in names]
        extra = {"monotone_constraints": monotone} if monotone else {}
        # allow_writing_files: CatBoost otherwise writes a catboost_info/ folder into the cwd
        model = cb.CatBoostRegressor(
            **params, **extra, thread_count=n_jobs, random_seed=seed, verbose=0, allow_writing_files=False
        )
        model.fit(cls._frame(X, index), y, cat_features=[f"x{j}" for j in index])
        return cls(model, index, n_jobs)

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(
            self.model.predict(self._frame(X, self.categorical), thread_count=self.n_jobs), dtype=np.float64
        )

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        name = f"{stem}.cbm"
        self.model.save_model(str(directory / name), format="cbm")
        return {"kind": self.kind, "file": name, "categorical_index": list(self.categorical)}

    @classmethod
    def load(cls, path: Path, categorical: Any, n_jobs: int) -> "_CatBoost":
        if not isinstance(categorical, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in categorical
        ):
            raise ValueError(f"learner entry: malformed categorical_index {categorical!r}")
        model = _catboost().CatBoostRegressor()
        model.load_model(str(path), format="cbm")  # CatBoost's own binary format: data, not code
        return cls(model, categorical, n_jobs)


@dataclass
class _Linear(Learner):
    """Ridge regression of the (log) target on log1p of the chosen inputs.

    Ridge regression of the (log) target on log1p of the chosen inputs; categorical
    inputs (family, block, precision) enter one-hot. ``columns``: names of inputs, or
    ``"all"``; ``alpha``: ridge penalty on standardized inputs.
    """

    inputs: list[str]
    index: list[int]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    kind: str = field(default="linear", init=False)

    @staticmethod
    def _design(X: np.ndarray, inputs: list[str], index: list[int]) -> np.ndarray:
        cols = []
        for name, j in zip(inputs, index):
            base = name.split("=")[0]
            if base in CODES:  # one-hot level "precision=1"
                cols.append((X[:, j] == float(name.split("=")[1])).astype(np.float64))
            else:
                cols.append(np.log1p(np.maximum(X[:, j], 0.0)))
        return np.stack(cols, axis=1) if cols else np.zeros((len(X), 0))

    @classmethod
    def fit(cls, params, X, y, columns) -> "_Linear":
        want = params.get("columns", "all")
        names = list(columns) if want == "all" else list(want)
        missing = [c for c in names if c not in columns]
        if missing:
            raise ValueError(f"linear learner: unknown input {missing[0]!r}")
        inputs, index = [], []
        for c in names:
            j = columns.index(c)
            if c in CODES:  # one level dropped: the intercept carries it
                for level in sorted(CODES[c].values())[1:]:
                    inputs.append(f"{c}={level}")
                    index.append(j)
            else:
                inputs.append(c)
                index.append(j)
        A = cls._design(X, inputs, index)
        mean, scale = A.mean(axis=0), A.std(axis=0)
        scale[scale == 0] = 1.0
        Z = (A - mean) / scale
        alpha = float(params.get("alpha", 1e-3)) * len(y)
        ym = y.mean()
        coef = np.linalg.solve(Z.T @ Z + alpha * np.eye(Z.shape[1]), Z.T @ (y - ym)) if Z.shape[1] else np.zeros(0)
        return cls(inputs, index, mean.tolist(), scale.tolist(), coef.tolist(), float(ym))

    def predict(self, X: np.ndarray) -> np.ndarray:
        A = self._design(X, self.inputs, self.index)
        return self.intercept + ((A - np.asarray(self.mean)) / np.asarray(self.scale)) @ np.asarray(self.coef)

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "inputs": self.inputs,
            "index": self.index,
            "mean": self.mean,
            "scale": self.scale,
            "coef": self.coef,
            "intercept": self.intercept,
        }

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> "_Linear":
        try:
            out = cls(
                [str(s) for s in e["inputs"]],
                [int(i) for i in e["index"]],
                [float(v) for v in e["mean"]],
                [float(v) for v in e["scale"]],
                [float(v) for v in e["coef"]],
                float(e["intercept"]),
            )
        except (KeyError, TypeError, ValueError) as ex:
            raise ValueError(f"linear learner: malformed entry ({ex})") from None
        if not (len(out.inputs) == len(out.index) == len(out.mean) == len(out.scale) == len(out.coef)):
            raise ValueError("linear learner: malformed entry (lengths differ)")
        return out


@dataclass
class _Additive(Learner):
    """A non-negative additive cost model ``log(c0 + sum_k c_k * x_k)``.

    ``log(c0 + sum_k c_k * x_k)`` with ``c >= 0``; the target it is fitted to is in log
    space (``log`` transform), so ``exp(y)`` is the cost. ``columns``: inputs ``x_k``, or
    products ``"a*b"`` (e.g. ``"flops*half_precision"``: FLOPs that run at another rate).
    Fitted by NNLS on relative error: minimise ``sum(((A c) / y - 1)^2)``.
    """

    terms: list[str]
    index: list[list[int]]
    coef: list[float]
    kind: str = field(default="additive", init=False)

    @staticmethod
    def _design(X: np.ndarray, index: list[list[int]]) -> np.ndarray:
        cols = [np.ones(len(X))]
        for idx in index:
            v = np.ones(len(X))
            for j in idx:
                v = v * X[:, j]
            cols.append(v)
        return np.stack(cols, axis=1)

    @classmethod
    def fit(cls, params, X, y, columns) -> "_Additive":
        from scipy.optimize import nnls

        terms = list(params["columns"])
        index = []
        for term in terms:
            parts = term.split("*")
            missing = [p for p in parts if p not in columns]
            if missing:
                raise ValueError(f"additive learner: unknown input {missing[0]!r}")
            index.append([columns.index(p) for p in parts])
        A = cls._design(X, index)
        cost = np.exp(y)
        # scale columns to unit size so that NNLS is well conditioned; undo after
        scale = np.abs(A / cost[:, None]).max(axis=0)
        scale[scale == 0] = 1.0
        c, _ = nnls(A / cost[:, None] / scale, np.ones(len(y)), maxiter=50 * A.shape[1])
        return cls(terms, index, (c / scale).tolist())

    def predict(self, X: np.ndarray) -> np.ndarray:
        total = self._design(X, self.index) @ np.asarray(self.coef)
        return np.log(np.maximum(total, 1e-12))

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        return {"kind": self.kind, "terms": self.terms, "index": self.index, "coef": self.coef}

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> "_Additive":
        try:
            out = cls(
                [str(t) for t in e["terms"]],
                [[int(j) for j in idx] for idx in e["index"]],
                [float(v) for v in e["coef"]],
            )
        except (KeyError, TypeError, ValueError) as ex:
            raise ValueError(f"additive learner: malformed entry ({ex})") from None
        if len(out.coef) != len(out.terms) + 1 or len(out.index) != len(out.terms):
            raise ValueError("additive learner: malformed entry (lengths differ)")
        return out
