"""The CARB estimator: per-target blends of base learners in a cascade, with conformal intervals."""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, RegressorMixin

from carb.families.space import Config, Space

from ._inputs import FAMILY_COLUMNS, arch_keys, config_frame, matrix, with_features
from ._presets import AUTO, auto_preset, resolve
from ._prior import _prior_inputs, _resolve_prior
from ._target_model import CASCADE_ORDER, TARGETS, UNITS, TargetModel, _forward, _inverse, member_std
from .conformal import ConformalScale, aux_inputs
from .domain import DOMAIN_CATEGORIES as DOMAIN_CATEGORIES  # re-exported with the domain
from .domain import outside_kinds, training_domain, widen
from .folds import cv_folds
from .learners import Learner, fit_learner

__all__ = ["CARB", "TARGETS", "UNITS", "CASCADE_ORDER", "TargetModel", "training_hash"]

#: fewest labelled rows a target needs to be trained
MIN_ROWS = 20
#: rows per chunk of :meth:`CARB.predict`
PREDICT_CHUNK = 1 << 15


def _folds(df: pd.DataFrame, k: int, kind: str, seed: int) -> np.ndarray:
    """Return the fold id of each row, random or grouped by architecture.

    ``random`` configs (a config's repeated rows in one fold: :func:`carb.model.folds.cv_folds`), or
    ``grouped``: every row of an architecture
    (family, block, depth, width, early_downsample; a cell's or layers' operations for the
    other families: :func:`carb.model._inputs.arch_keys`) in one fold, so that out-of-fold
    predictions are those of architectures the model has not seen.
    """
    rng = np.random.default_rng(seed)
    if kind == "grouped":
        groups = arch_keys(df)
        n_groups = int(groups.max()) + 1 if len(groups) else 0
        if n_groups >= k:
            return rng.permutation(n_groups)[groups] % k
    elif kind != "random":
        raise ValueError(f"unknown folds {kind!r} (expected random or grouped)")
    return cv_folds(df, k, seed)


def training_hash(df: pd.DataFrame, targets: Iterable[str]) -> str:
    """Return the SHA-256 that identifies the training rows a model was fitted on.

    The hash covers the rows' config ids and target values, sorted by config id.
    """
    cols = ["config_id", *[t for t in targets if t in df.columns]]
    if "config_id" not in df.columns:
        return ""
    rows = df[cols].sort_values("config_id")
    h = hashlib.sha256()
    h.update(",".join(cols).encode())
    for row in rows.itertuples(index=False, name=None):
        h.update(("\n" + row[0] + "," + ",".join(repr(float(v)) for v in row[1:])).encode())
    return h.hexdigest()


class CARB(RegressorMixin, BaseEstimator):
    """Predicts energy (J), latency (ms) and peak memory (MB) of CNN inference configs, with intervals.

    One model describes one device; its intervals are conformal.

    Inputs are the config parameters plus the closed-form features of
    :func:`carb.families.features.compute` (computed when absent). Targets are modelled in log space
    (``log1p`` for the ``paper`` preset as in the study, ``log`` otherwise). Each target is a
    blend of base learners; in a cascade a downstream target also reads the predictions of
    its upstream targets (memory -> energy -> latency). The upstream inputs a downstream
    target is trained on are **out-of-fold** predictions (``n_folds``-fold CV), so it learns
    to use them as they will be at prediction time, with their errors, not as in-sample
    fits. The same out-of-fold predictions give the blend weights (``nnls`` presets), the
    residuals the ``paper`` corrector is trained on, and the conformal intervals.

    Intervals: CV conformal. The half-width is the ``ceil((n + 1) * coverage) / n``
    empirical quantile of the absolute out-of-fold residuals in log space, so the interval
    is multiplicative around the prediction (``[p / e^q, p * e^q]`` for ``log``). The
    residuals come from models fitted on ``(n_folds - 1) / n_folds`` of the rows, which
    errs on the wide side for the final model. With random folds, coverage holds for
    configs exchangeable with the training rows; the ``default`` preset draws its folds by
    architecture, so its intervals are calibrated for architectures it has not seen (and
    are a little wide for those it has). The width is then made locally adaptive
    (:mod:`carb.model.conformal`): the scores are the residuals divided by a fitted scale
    (batch, precision, predicted size), with their quantile taken per batch regime, so the
    intervals hold in each regime rather than only on average; ``predict(X, coverage=c)``
    gives the intervals at any other coverage from the same kept scores. Nothing
    calibrates extrapolation along the batch (``carb evaluate --split batch-tier`` reports
    the coverage actually reached).

    Prior: ``prior`` (a fitted model of *another* device, e.g. the source model of a
    two-stage screening, as loaded by ``carb.model.load``) makes every target also read
    the prior's log predictions of the same config (columns ``prior_<target>``, one per
    target the prior predicts). A device's costs follow another device's config by config
    beyond what the closed-form features say (which memory the allocator keeps, which
    layers a thread count speeds up); the prior carries that from the data the other device
    was measured on. The prior is used as it is (never refitted, not even by
    ``sklearn.clone``), predicts every config this model predicts, and is saved inside this
    model's bundle. It helps where the two devices' costs agree config by config about as
    well as the model alone predicts them.

    Missing targets: a target with fewer than 20 labelled ``ok`` rows (e.g. ``energy_j`` on
    a CPU without an energy sensor, all NaN) is not trained: ``fit`` warns, lists it in
    :attr:`missing_targets_`, and :meth:`predict` still returns its three columns, all NaN,
    so the output schema never depends on the device. The cascade skips it (latency then
    reads predicted memory alone). Rows whose value the transform cannot take (<= 0 for
    ``log``, e.g. a net energy lost in idle-power noise) are left out of that target, with
    a warning.

    Presets (:data:`carb.model.PRESETS` holds every setting):

    ``paper``
        The study: per target XGBoost (800 trees, depth 9), LightGBM (800 trees, 127
        leaves), ExtraTrees (400 trees); fixed blend weights XGB/LGBM/ET memory
        0.3/0.4/0.3, energy 0.3/0.5/0.2, latency 0.2/0.3/0.5; cascade memory -> energy ->
        latency; a LightGBM residual corrector on batch <= 8 rows added as 0.9 x its
        output; ``log1p`` targets; paper features (parameters + analytic features).
    ``default``
        Ours, chosen on measured CPU data: a
        roofline-style additive cost model (constant + non-negative rates x FLOPs, FLOPs
        at half precision, bytes moved, resident and live bytes, operator calls; NNLS on
        relative error) whose log-space residual XGBoost (200 trees, depth 6) and
        ExtraTrees (50 trees, min 3 per leaf) correct, blended by NNLS stacking on
        out-of-fold predictions; extended features (roofline ratios); latency and energy
        trees monotone non-decreasing in the batch-scaled inputs (memory unconstrained:
        measured better); cascade chosen per target by
        out-of-fold error; folds grouped by architecture; ``log`` targets.
    ``fast``
        Tests and demos: the additive cost model corrected by 150 XGBoost trees (depth 5).
    ``flops-linear``, ``lgbm``
        Baselines: ``log(target)`` linear in ``log(FLOPs)``; one LightGBM per target
        (500 trees, 31 leaves) on the paper features, ``log1p`` targets.

    Args:
        preset: name of the recipe; ``"auto"``: the data's family preset where one exists
            (NAS-Bench-201 cells: ``nb201``), else ``default``.
        coverage: nominal coverage of the prediction intervals, in (0, 1).
        n_folds: folds of the internal cross-validation (>= 2).
        learner_params: settings merged into the preset's learners, e.g.
            ``{"xgb": {"n_estimators": 50}}`` (keys: the preset's learner names and
            ``corrector``).
        random_state: seed of the folds and of the learners.
        n_jobs: threads each learner may use.
        prior: a fitted model of another device (a :class:`CARB`, e.g. loaded with
            :func:`carb.model.load`, or any predictor with ``targets_`` and
            ``predict(DataFrame)`` giving ``<target>`` columns), whose predictions every
            target reads as inputs; None: none.
        interval_spread: whether each target's interval scale also reads the spread of its
            blend members' out-of-fold predictions (log space; used when two or more members
            are kept); False: the scale reads batch, precision and predicted size only.
        interval_tail: the quantile of ``log |r|`` (out-of-fold residuals, log space) each
            target's interval scale is fitted to (:meth:`ConformalScale.fit`'s ``tail``):
            None: least squares (the typical size of the error); a number in (0, 1): a
            quantile regression (the local tail of the errors); a dict target -> either: per
            target (a target it does not name: None).

    Attributes (after ``fit``):
        preset_: the preset fitted (``preset``, or the one ``"auto"`` picked).
        targets_: trained targets, in cascade order.
        missing_targets_: targets not trained (no or too few labels).
        models_: :class:`TargetModel` per trained target.
        input_columns_: the base input columns, in order.
        prior_: the prior model, or None.
        prior_columns_: the inputs read from it (``prior_<target>``, log of its prediction),
            after the base ones.
        cv_metrics_: per target, out-of-fold ``r2_log``, ``mape``, ``coverage`` on the training rows.
        n_train_rows_: ``ok`` rows used.
        training_hash_: :func:`training_hash` of the training rows.
    """

    def __init__(
        self,
        preset: str = "default",
        coverage: float = 0.9,
        n_folds: int = 5,
        learner_params: dict[str, dict[str, Any]] | None = None,
        random_state: int = 0,
        n_jobs: int = 1,
        prior: Any = None,
        interval_spread: bool = True,
        interval_tail: float | None | Mapping[str, float | None] = None,
    ) -> None:
        self.preset = preset
        self.coverage = coverage
        self.n_folds = n_folds
        self.learner_params = learner_params
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.prior = prior
        self.interval_spread = interval_spread
        self.interval_tail = interval_tail

    def __sklearn_clone__(self) -> "CARB":
        # the prior is a fitted model of another device, not a setting: a clone shares it
        # as it is (sklearn's clone would hand back an unfitted copy of it)
        from sklearn.base import clone

        params = self.get_params(deep=False)
        return type(self)(**{k: v if k == "prior" else clone(v, safe=False) for k, v in params.items()})

    # -- fitting --------------------------------------------------------------------------

    def fit(self, X: pd.DataFrame, y: pd.DataFrame | None = None) -> "CARB":
        """Learn every target from a dataset of measured configs.

        Learn from a dataset: one row per config with its parameters, ``status`` (only
        ``ok`` rows are used; all rows count as ok when the column is absent) and the target
        columns ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB); a target column may
        be absent or NaN. ``y``, if given, holds the target columns (joined on the index).

        Raises:
            ValueError: bad settings, no target to train, rows of several devices, or an
                invalid config row.
        """
        preset = auto_preset(X)[0] if self.preset == AUTO else self.preset
        spec = resolve(preset, self.learner_params)
        if not 0 < float(self.coverage) < 1:
            raise ValueError(f"coverage: {self.coverage!r} must be in (0, 1)")
        if int(self.n_folds) < 2:
            raise ValueError(f"n_folds: {self.n_folds!r} must be >= 2")
        _check_tail(self.interval_tail)
        if not isinstance(X, pd.DataFrame):
            raise TypeError("CARB.fit: expected a DataFrame (a dataset)")
        df = with_features(_ok_rows(X, y).reset_index(drop=True))
        Xb, cols = matrix(df, spec["features"])
        prior = _resolve_prior(self.prior)
        pX, pcols = _prior_inputs(prior, df)
        if pcols:
            Xb = np.column_stack([Xb, pX])
        labels, valid = _labels(df, spec["transform"])
        trained, missing = _trainable(valid, len(df))
        data = _TrainingRows(
            df=df,
            X=Xb,
            columns=cols + pcols,
            batch=df["batch"].to_numpy(dtype=np.float64),
            folds=_folds(df, int(self.n_folds), spec.get("folds", "random"), int(self.random_state)),
        )
        upstream_pred: dict[str, np.ndarray] = {}
        models: dict[str, TargetModel] = {}
        cv: dict[str, dict[str, float]] = {}
        for t in trained:
            before = [u for u in trained[: trained.index(t)]]
            models[t], upstream_pred[t], cv[t] = self._fit_target(
                spec, t, before, data, _forward(spec["transform"], labels[t]), valid[t], upstream_pred
            )

        self.preset_ = preset
        self.spec_ = spec
        self.input_columns_ = cols
        self.prior_ = prior
        self.prior_columns_ = pcols
        self.targets_ = trained
        self.missing_targets_ = missing
        self.models_ = models
        self.cv_metrics_ = cv
        self.n_train_rows_ = int(len(df))
        self.training_hash_ = training_hash(df, trained)
        self.domain_ = training_domain(df, Xb, cols + pcols)
        return self

    def _fit_target(
        self,
        spec: dict[str, Any],
        target: str,
        before: list[str],
        data: _TrainingRows,
        ylog: np.ndarray,
        valid: np.ndarray,
        upstream_pred: dict[str, np.ndarray],
    ) -> tuple[TargetModel, np.ndarray, dict[str, float]]:
        """Fit one target: its cascade inputs chosen by out-of-fold error, its learners and its interval.

        Args:
            spec: the resolved preset.
            target: the target column.
            before: the targets trained before it, whose predictions it may read.
            data: the training rows.
            ylog: the target's values in log space.
            valid: which rows have a usable value.
            upstream_pred: every earlier target's predictions of the rows (log space).

        Returns:
            The target's model, its predictions of every row (out-of-fold where labelled)
            and its cross-validated metrics.
        """
        options = {"paper": [before], "none": [[]], "auto": [before, []] if before else [[]]}[spec["cascade"]]
        best = None
        for ups in options:
            Z = np.column_stack([data.X, *[upstream_pred[u] for u in ups]]) if ups else data.X
            zcols = data.columns + [f"pred_{u}" for u in ups]
            cvres = self._cross_validate(spec, target, Z, zcols, ylog, valid, data.folds, data.batch)
            if best is None or cvres["mse_log"] < best[0]["mse_log"]:
                best = (cvres, ups, Z, zcols)
        cvres, ups, Z, zcols = best
        model, full_pred = self._fit_final(spec, target, ups, Z, zcols, ylog, cvres, data.batch)
        self._fit_interval(model, cvres, data.df, ylog)
        model.info = {
            "cascade_options": [list(o) for o in options],
            **{k: v for k, v in cvres.items() if not isinstance(v, np.ndarray)},
        }
        return model, full_pred, {k: cvres[k] for k in ("r2_log", "mape", "coverage", "mse_log")}

    def _fit_interval(self, model: TargetModel, cvres: dict[str, Any], df: pd.DataFrame, ylog: np.ndarray) -> None:
        """Fit the locally adaptive interval from the out-of-fold residuals, and record its coverage in ``cvres``."""
        r = cvres["rows"]
        bt, wide = aux_inputs(df.iloc[r])
        kept = [j for j, n in enumerate(cvres["members"]) if n in model.learners]
        spread = member_std(cvres["member_oof"][:, kept]) if self.interval_spread and len(kept) >= 2 else None
        tail = self.interval_tail
        model.interval = ConformalScale.fit(
            ylog[r] - cvres["pred_oof"],
            bt,
            wide,
            cvres["pred_oof"],
            spread=spread,
            tail=tail.get(model.target) if isinstance(tail, Mapping) else tail,
        )
        cvres["coverage"] = float(
            np.mean(
                np.abs(ylog[r] - cvres["pred_oof"])
                <= model.interval.halfwidth(bt, wide, cvres["pred_oof"], float(self.coverage), spread=spread)
            )
        )

    def _cross_validate(
        self,
        spec: dict[str, Any],
        target: str,
        Z: np.ndarray,
        zcols: list[str],
        ylog: np.ndarray,
        valid: np.ndarray,
        folds: np.ndarray,
        batch: np.ndarray,
    ) -> dict[str, Any]:
        """Return one target's K-fold out-of-fold predictions, blend weights, conformal half-width and diagnostics."""
        rows = np.flatnonzero(valid)
        K = int(self.n_folds)
        names = list(spec["learners"])
        fit = self._fitter(spec, target, Z, zcols)
        oof = np.zeros((len(rows), len(names)))
        oof_off = np.zeros(len(rows))
        f = folds[rows]
        for k in range(K):
            tr, va = rows[f != k], rows[f == k]
            if not len(va) or not len(tr):
                continue
            base = np.zeros(len(tr))
            if spec["offset"] is not None:
                off = fit(spec["offset"].get("kind", "linear"), spec["offset"], tr, ylog[tr])
                base = off.predict(Z[tr])
                oof_off[f == k] = off.predict(Z[va])
            for j, name in enumerate(names):
                kind, params = spec["learners"][name]
                oof[f == k, j] = fit(kind, params, tr, ylog[tr] - base).predict(Z[va])

        y = ylog[rows]
        if spec["blend"] == "nnls":
            from scipy.optimize import nnls

            # non-negative stacking: weights that best combine the out-of-fold predictions
            w, _ = nnls(oof, y - oof_off)
            if not w.any():  # degenerate: fall back to an equal blend
                w = np.full(len(names), 1.0 / len(names))
            weights = dict(zip(names, map(float, w)))
        else:
            weights = {n: float(spec["blend"][target][n]) for n in names}
        blend_oof = oof_off + oof @ np.array([weights[n] for n in names])
        pred_oof = blend_oof.copy()

        corr, small = spec["corrector"], None
        if corr is not None:
            small = batch[rows] <= corr["batch_max"]
            if small.sum() >= MIN_ROWS:
                # trained on out-of-fold residuals: in-sample residuals of full-depth trees
                # are ~0 and would teach it nothing
                resid = y - blend_oof
                corr_oof = np.zeros(len(rows))
                for k in range(K):
                    tr, va = small & (f != k), small & (f == k)
                    if tr.sum() and va.sum():
                        corr_oof[va] = fit(corr["kind"], corr["params"], rows[tr], resid[tr]).predict(Z[rows[va]])
                pred_oof = pred_oof + corr["scale"] * corr_oof
            else:
                warnings.warn(
                    f"CARB: {target}: no corrector ({int(small.sum())} rows with batch <= "
                    f"{corr['batch_max']}, fewer than {MIN_ROWS})",
                    UserWarning,
                    stacklevel=4,
                )
                small = None

        resid = np.abs(y - pred_oof)
        n = len(resid)
        level = np.ceil((n + 1) * float(self.coverage)) / n
        halfwidth = float(np.quantile(resid, level, method="higher")) if level <= 1 else float("inf")
        yt, pt = _inverse(spec["transform"], y), _inverse(spec["transform"], pred_oof)
        return {
            "rows": rows,
            "blend_oof": blend_oof,
            "pred_oof": pred_oof,
            "weights": weights,
            "member_oof": oof,
            "members": names,
            "corrector_rows": small,
            "halfwidth": halfwidth,
            "mse_log": float(np.mean((y - pred_oof) ** 2)),
            "r2_log": float(1 - np.sum((y - pred_oof) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-300)),
            "mape": float(np.mean(np.abs(pt - yt) / np.maximum(np.abs(yt), 1e-12))),
            "coverage": float(np.mean(resid <= halfwidth)),
            "n_rows": int(n),
        }

    def _fit_final(
        self,
        spec: dict[str, Any],
        target: str,
        upstream: list[str],
        Z: np.ndarray,
        zcols: list[str],
        ylog: np.ndarray,
        cvres: dict[str, Any],
        batch: np.ndarray,
    ) -> tuple[TargetModel, np.ndarray]:
        """Fit the final models of one target on every labelled row.

        Zero-weight learners are not fitted. Returns the model and its predictions for every
        row: out-of-fold where labelled (what a downstream target trains on), from the final
        model elsewhere.
        """
        rows, weights = cvres["rows"], cvres["weights"]
        fit = self._fitter(spec, target, Z, zcols)
        y = ylog[rows]
        offset = (
            fit(spec["offset"].get("kind", "linear"), spec["offset"], rows, y) if spec["offset"] is not None else None
        )
        base = offset.predict(Z[rows]) if offset is not None else 0.0
        learners = {n: fit(*spec["learners"][n], rows, y - base) for n in spec["learners"] if weights[n] > 0}
        corrector, corr = None, spec["corrector"]
        if corr is not None and cvres["corrector_rows"] is not None:
            small = cvres["corrector_rows"]
            resid = y - cvres["blend_oof"]
            corrector = fit(corr["kind"], corr["params"], rows[small], resid[small])
        model = TargetModel(
            target,
            list(upstream),
            offset,
            learners,
            {n: weights[n] for n in learners},
            corrector,
            int(corr["batch_max"]) if corr else 8,
            float(corr["scale"]) if corr else 0.9,
            cvres["halfwidth"],
            spec["transform"],
        )
        full = model.predict_log(Z, batch)
        full[rows] = cvres["pred_oof"]
        return model, full

    def _fitter(self, spec: dict[str, Any], target: str, Z: np.ndarray, zcols: list[str]):
        mono = spec["monotone"]
        mono = bool(mono.get(target, False)) if isinstance(mono, dict) else bool(mono)

        def fit(kind: str, params: dict[str, Any], rows: np.ndarray, y: np.ndarray) -> Learner:
            return fit_learner(
                kind, params, Z[rows], y, zcols, monotone=mono, n_jobs=self.n_jobs, seed=int(self.random_state)
            )

        return fit

    # -- prediction -----------------------------------------------------------------------

    def predict(
        self,
        X: pd.DataFrame | Space | Config | Iterable[Config],
        coverage: float | None = None,
        budgets: Mapping[str, float] | None = None,
    ) -> pd.DataFrame:
        """Predict every target with its interval for configs.

        Predict every target with its interval for configs (a DataFrame of config
        parameters, a Space, a Config or Configs; features are computed when absent).
        ``coverage``: of the intervals, in (0, 1); default the model's :attr:`coverage`.

        Returns:
            A DataFrame with the input's index (a fresh one for non-DataFrame input) and
            columns ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB), each with
            ``<target>_lo`` and ``<target>_hi``: the ``coverage`` prediction interval.
            Targets that were not trained (:attr:`missing_targets_`) are NaN. With
            ``budgets`` (target -> budget in its unit), also ``<target>_p_within``: the
            chance that the true value is within the budget, from the same conformal
            scores as the intervals (what :func:`carb.decide.screen.screen`'s joint budget calls read).
        """
        self._check_fitted()
        cov = float(self.coverage if coverage is None else coverage)
        if not 0 < cov < 1:
            raise ValueError(f"coverage: {coverage!r} must be in (0, 1)")
        df = with_features(config_frame(X))
        n = len(df)
        logs = {t: np.empty(n) for t in self.targets_}
        spreads = {t: np.empty(n) for t in self.targets_ if self.models_[t].reads_spread}
        domain = getattr(self, "domain_", None)
        outside = np.zeros(n, dtype=np.int8)  # how each row lies outside the domain (outside_kinds)
        # in chunks: the input matrix of a chunk stays in cache and memory stays bounded
        for s in range(0, n, PREDICT_CHUNK):
            part = df.iloc[s : s + PREDICT_CHUNK]
            Xb, xcols = matrix(
                part,
                self.spec_["features"],
                first_row=s,
                families=sorted(f for f, (c, _) in FAMILY_COLUMNS.items() if c[0] in self.input_columns_),
            )
            pcols = getattr(self, "prior_columns_", [])
            if pcols:
                pX, got = _prior_inputs(self.prior_, part, first_row=s)
                if got != pcols:
                    raise ValueError(
                        f"prior: it predicts {', '.join(got) or 'nothing'}; this model was trained "
                        f"reading {', '.join(pcols)}"
                    )
                Xb, xcols = np.column_stack([Xb, pX]), xcols + pcols
            batch = part["batch"].to_numpy(dtype=np.float64)
            if domain is not None:
                outside[s : s + len(part)] = outside_kinds(domain, part, Xb, xcols)
            for t in self.targets_:
                m = self.models_[t]
                Z = np.column_stack([Xb, *[logs[u][s : s + len(part)] for u in m.upstream]]) if m.upstream else Xb
                logs[t][s : s + len(part)] = m.predict_log(
                    Z, batch, spreads[t][s : s + len(part)] if t in spreads else None
                )
        out = pd.DataFrame(index=df.index)
        for t in TARGETS:
            if t in logs:
                m = self.models_[t]
                out[t] = _inverse(m.transform, logs[t])
                hw = widen(m.halfwidths(df, logs[t], cov, float(self.coverage), spread=spreads.get(t)), outside, t)
                out[f"{t}_lo"] = _inverse(m.transform, logs[t] - hw)
                out[f"{t}_hi"] = _inverse(m.transform, logs[t] + hw)
                if budgets and t in budgets:
                    out[f"{t}_p_within"] = m.prob_within(
                        df, logs[t], float(budgets[t]), float(self.coverage), spread=spreads.get(t)
                    )
            else:
                out[t] = out[f"{t}_lo"] = out[f"{t}_hi"] = np.nan
        if domain is not None:
            out["extrapolated"] = outside > 0
            if outside.any():
                warnings.warn(
                    f"CARB: {int((outside > 0).sum()):,} of {n:,} rows lie outside the training domain (a value "
                    "beyond the training range, or a precision/family/block never seen): their "
                    "predictions are extrapolated (column 'extrapolated'), their intervals widened by the "
                    "measured step (unbounded for a family or block never seen)",
                    UserWarning,
                    stacklevel=2,
                )
        return out

    def score(self, X: pd.DataFrame, y: pd.DataFrame | None = None, sample_weight: Any = None) -> float:
        """Return the mean over the trained targets of R² of log(target) on a labelled dataset (what CV maximizes)."""
        self._check_fitted()
        df = X if y is None else X.join(pd.DataFrame(y), rsuffix="_y")
        if "status" in df.columns:
            df = df[df["status"] == "ok"]
        pred = self.predict(df)
        scores = []
        for t in self.targets_:
            ok = np.isfinite(df[t].to_numpy(dtype=np.float64)) & (df[t].to_numpy(dtype=np.float64) > 0)
            a = np.log(df[t].to_numpy(dtype=np.float64)[ok])
            b = np.log(np.maximum(pred[t].to_numpy()[ok], 1e-12))
            scores.append(1 - np.sum((a - b) ** 2) / max(np.sum((a - a.mean()) ** 2), 1e-300))
        return float(np.mean(scores))

    def _check_fitted(self) -> None:
        if not hasattr(self, "models_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("this CARB model is not fitted yet: call fit(dataset) first")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False  # the targets live in the dataset frame
        return tags


@dataclass
class _TrainingRows:
    """The ok rows a fit learns from, as its learners read them.

    Attributes:
        df: the rows, with their features.
        X: the base inputs, then the prior's columns (one row per row of ``df``).
        columns: the names of ``X``'s columns.
        batch: each row's batch size.
        folds: each row's cross-validation fold.
    """

    df: pd.DataFrame
    X: np.ndarray
    columns: list[str]
    batch: np.ndarray
    folds: np.ndarray


def _check_tail(tail: Any) -> None:
    """Refuse an ``interval_tail`` that is not None, a quantile in (0, 1), or a dict of them by target.

    Raises:
        ValueError: a quantile outside (0, 1) or a key that is not a target.
    """
    items = tail.items() if isinstance(tail, Mapping) else [("", tail)]
    for t, q in items:
        if isinstance(tail, Mapping) and t not in TARGETS:
            raise ValueError(f"interval_tail: {t!r} is not a target ({', '.join(TARGETS)})")
        if q is not None and (isinstance(q, bool) or not isinstance(q, (int, float)) or not 0 < float(q) < 1):
            raise ValueError(f"interval_tail: {q!r} must be None or a quantile in (0, 1)")


def _ok_rows(X: pd.DataFrame, y: pd.DataFrame | None) -> pd.DataFrame:
    """Return the dataset's ``ok`` rows with ``y``'s target columns joined, refusing rows of several devices."""
    df = (
        X if y is None else X.drop(columns=[c for c in pd.DataFrame(y).columns if c in X.columns]).join(pd.DataFrame(y))
    )
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    if "device" in df.columns and df["device"].nunique() > 1:
        raise ValueError(
            f"the dataset has rows of {df['device'].nunique()} devices "
            f"({', '.join(map(str, df['device'].unique()[:4]))}); fit one model per device"
        )
    return df


def _labels(df: pd.DataFrame, transform: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Return every target's values and which of them the transform can take, warning of those it cannot."""
    labels = {t: df[t].to_numpy(dtype=np.float64) if t in df.columns else np.full(len(df), np.nan) for t in TARGETS}
    # log needs a positive target (net energy of a tiny model can read <= 0); log1p > -1
    low = -1.0 if transform == "log1p" else 0.0
    valid = {t: np.isfinite(v) & (v > low) for t, v in labels.items()}
    for t, v in labels.items():
        bad = int((np.isfinite(v) & (v <= low)).sum())
        if bad:
            warnings.warn(
                f"CARB: {t}: ignoring {bad} row(s) with a value <= {low:g}, which the "
                f"{transform} transform cannot take",
                UserWarning,
                stacklevel=3,
            )
    return labels, valid


def _trainable(valid: dict[str, np.ndarray], n_rows: int) -> tuple[list[str], list[str]]:
    """Return the targets to train, in cascade order, and those left out, warning of the latter.

    Raises:
        ValueError: no target has enough labelled rows.
    """
    trained = [t for t in CASCADE_ORDER if valid[t].sum() >= MIN_ROWS]
    missing = [t for t in TARGETS if t not in trained]
    if not trained:
        raise ValueError(
            f"no target to train: each of {', '.join(TARGETS)} has fewer than {MIN_ROWS} "
            f"labelled ok rows ({n_rows} ok rows)"
        )
    if missing:
        warnings.warn(
            f"CARB: not training {', '.join(missing)} (fewer than {MIN_ROWS} labelled ok rows); "
            "its predictions will be NaN",
            UserWarning,
            stacklevel=3,
        )
    return trained, missing
