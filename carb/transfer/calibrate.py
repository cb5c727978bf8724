"""Few-shot calibration of a source-device model to a device it has never seen.

Measure K well-chosen configs on the new device, then map the source model's
predictions to the new device's values, per target:

* **Active sampler** (:func:`choose_samples`): first, per precision, the smallest-batch
  config of least predicted memory (the corner a shortlist under budgets lies in) and a
  config of the largest batch, then the rest spread over the source model's predicted
  cost range (one per quantile bin of predicted latency) and over the space (within a
  bin, the config farthest from those already chosen, in the parameters' level ranks),
  so that the map sees each precision, cheap and costly, small- and large-batch configs.
* **Map** (:class:`CalibratedModel`): in log space, with ``s`` the source prediction,
  one of ``log y = log s`` (no change: the target transfers as it is), ``a + log s``
  (a device factor), ``a + b log s`` (a factor and a different growth with cost) or,
  from 8 measurements on, ``a + b log s + c log batch``
  (energy and latency scale differently with load on different devices), whichever has
  the least exact leave-one-out error (:func:`carb.model.maps.fit_log_map`). Outside the
  range of the K's source predictions the map holds the ratio it has at the nearer end
  rather than carry its slope on (a shortlist often lies below the K's cost range).
  Intervals: the source's interval width scaled by a conformal quantile of the map's
  leave-one-out errors, or, with too few K, the source interval mapped through the map
  and widened by the map's leave-one-out residual quantile.
* **Reach** (:class:`Reach`): beyond the K's range (source prediction or batch), a
  prediction is flagged ``extrapolated`` and its interval widens with the log distance
  beyond, at the rate the map's own errors grow when it is refitted without the K's ends
  and asked about them.

The map is :mod:`carb.transfer`'s few-shot model (the one ``carb fewshot`` uses), with the
source model as its one source device: ``method="log"`` is the map above; ``"nnls"`` is
the HELP-style map (non-negative weights on the source prediction and cost features, in
the target's units), less accurate on the shipped CPU pair but there for sources it suits.
The source may be a CARB bundle, or any predictor with ``predict(DataFrame)`` giving
``<target>``, ``_lo``, ``_hi`` columns and ``targets_``. :func:`load_predictor` reads a
saved one back; :func:`carb.transfer.load.load_model` reads every kind of model directory.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb._safeio import read_json
from carb.model.conformal import conformal_quantile
from carb.model.maps import INSIDE, MIN_K_BATCH_TERM, LogMap, Reach, fit_log_map, measure_reach

from .fewshot import FewShotModel, ModelSource
from .sampling import _corner_picks, _level_ranks, choose_samples  # noqa: F401 - importable from here

__all__ = [
    "CALIBRATION_FILE",
    "CalibratedModel",
    "MIN_K_BATCH_TERM",
    "NNLS_FEATURES",
    "NnlsMap",
    "Reach",
    "VISIT_SCATTER_TARGETS",
    "calibration_speed",
    "check_model_out",
    "choose_samples",
    "fit_calibrated",
    "load_calibrated",
    "load_predictor",
    "model_checksum",
    "visit_scatter",
]

#: the file that marks a calibrated model's directory (beside a copy of its source in ``source/``)
CALIBRATION_FILE = "calibration.json"


#: cost features the ``nnls`` map reads besides the source prediction (carb.families.features names)
NNLS_FEATURES: tuple[str, ...] = ("flops", "weight_bytes", "activation_bytes", "live_activation_bytes", "n_ops")


@dataclass
class NnlsMap:
    """The NNLS map of one target: ``y = intercept + coef . [features, s]``.

    ``s`` is the source prediction; ``q`` widens the interval (log, leave-one-out).
    """

    coef: list[float]
    intercept: float
    features: list[str]
    q: float
    n: int

    def apply(self, F: np.ndarray) -> np.ndarray:
        """Map the features and source prediction ``[features, s]`` to the target's cost (its units)."""
        # a non-negative cost model can still cross zero far from its K points: floor it
        return np.maximum(F @ np.asarray(self.coef) + self.intercept, 1e-9)


def _nnls_interval(fit: Any, X: pd.DataFrame, y: np.ndarray, coverage: float) -> float:
    """Return the leave-one-out residual quantile (log) of a few-shot map: K refits, K <= a few dozen."""
    n = len(y)
    if n < 3:
        return 0.0
    res = []
    for i in range(n):
        keep = np.arange(n) != i
        m = fit(X.iloc[keep], y[keep])
        res.append(np.log(y[i]) - np.log(max(float(m.predict(X.iloc[[i]])[0]), 1e-9)))
    level = min(1.0, math.ceil((n + 1) * coverage) / n)
    return float(np.quantile(np.abs(res), level))


class CalibratedModel:
    """A source model mapped to a new device by :func:`fit_calibrated`.

    Attributes:
        targets_: targets it predicts (those of the source with target measurements).
        maps_: per target the fitted map (coefficients, interval widening, K).
        reach_: per target the range of the K and the widening beyond it (:class:`Reach`;
            empty for a calibration saved without one: no flag, no widening).
        scatter_: per target the visit-to-visit scatter of a measurement (log) every
            interval is widened by (:func:`visit_scatter`; empty: none measured).
    """

    def __init__(
        self,
        source: Any,
        maps: dict[str, LogMap | NnlsMap],
        coverage: float = 0.9,
        meta: dict[str, Any] | None = None,
        reach: dict[str, Reach] | None = None,
        scatter: dict[str, float] | None = None,
    ) -> None:
        """Wrap ``source`` with per-target ``maps`` and ``reach``, the intervals' ``coverage``, the fit's ``meta``."""
        self.source = source
        self.maps_ = maps
        self.targets_ = list(maps)
        self.coverage = coverage
        self.meta = meta or {}
        self.reach_ = reach or {}
        self.scatter_ = scatter or {}

    def predict(self, configs: pd.DataFrame) -> pd.DataFrame:
        """Predict ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB) with ``_lo``/``_hi`` on the new device.

        Targets without a map are NaN. Rows beyond the range of the K (:class:`Reach`) have
        their intervals widened by the map's measured extrapolation error; they, rows in a
        precision the K did not include, and rows outside the source's own domain are
        flagged in ``extrapolated`` (with a warning for the first two).
        """
        import warnings

        src = self.source.predict(configs)
        out = self._in_range(configs, src)
        flags = [src["extrapolated"].to_numpy(bool)] if "extrapolated" in src.columns else []
        beyond = self._widen_beyond(configs, src, out)
        if beyond is not None:
            flags.append(beyond)
            if beyond.any():
                warnings.warn(
                    f"calibrated model: {int(beyond.sum()):,} of {len(beyond):,} rows lie beyond the range its K "
                    "measurements covered (source prediction or batch): their intervals are widened by the map's "
                    "measured extrapolation error (column 'extrapolated')",
                    UserWarning,
                    stacklevel=2,
                )
        known = self.meta.get("precisions")
        if known and "precision" in configs.columns:
            other = ~configs["precision"].astype(str).isin(known).to_numpy()
            if other.any():
                flags.append(other)
                names = ", ".join(sorted(set(configs["precision"].astype(str)[other])))
                warnings.warn(
                    f"calibrated model: {int(other.sum()):,} of {len(other):,} rows are in a precision its K "
                    f"measurements did not include ({names}; calibrated on {', '.join(known)}): their "
                    "predictions carry another precision's map (column 'extrapolated')",
                    UserWarning,
                    stacklevel=2,
                )
        if flags:
            out["extrapolated"] = np.logical_or.reduce(flags)
        return out

    def _in_range(self, configs: pd.DataFrame, src: pd.DataFrame) -> pd.DataFrame:
        """Return the mapped predictions and their intervals as within the K's range (no widening beyond it)."""
        batch = np.asarray(configs["batch"], dtype=float)
        out = pd.DataFrame(index=src.index)
        feats = None
        for t in ("energy_j", "latency_ms", "memory_mb"):
            m = self.maps_.get(t)
            if m is None:
                out[t] = out[f"{t}_lo"] = out[f"{t}_hi"] = np.nan
                continue
            s = src[t].to_numpy(float)
            if isinstance(m, LogMap):
                out[t] = m.apply(s, batch)
                if m.scale_q is not None and np.isfinite(m.scale_q):
                    # the source's locally adaptive width (log), scaled by the conformal
                    # quantile of the map's leave-one-out errors in units of that width
                    hw = _log_halfwidth(src, t) * m.scale_q
                    lo, hi = out[t].to_numpy() * np.exp(-hw), out[t].to_numpy() * np.exp(hw)
                else:
                    # too few K for a conformal scale: the source interval, mapped, then
                    # widened by the map's own error (conservative: counts both errors)
                    lo = m.apply(src[f"{t}_lo"].to_numpy(float), batch, -m.q)
                    hi = m.apply(src[f"{t}_hi"].to_numpy(float), batch, m.q)
            else:
                if feats is None:
                    from carb.families.features import compute

                    feats = compute(configs)
                p = m.apply(np.column_stack([feats[list(m.features)].to_numpy(float), s]))
                out[t], lo, hi = p, p * np.exp(-m.q), p * np.exp(m.q)
            lo, hi = np.minimum(lo, hi), np.maximum(lo, hi)
            if self.scatter_.get(t):  # a measurement visits the config once: its own scatter comes on top
                lo, hi = lo * np.exp(-self.scatter_[t]), hi * np.exp(self.scatter_[t])
            out[f"{t}_lo"], out[f"{t}_hi"] = lo, hi
        return out

    def _widen_beyond(self, configs: pd.DataFrame, src: pd.DataFrame, out: pd.DataFrame) -> np.ndarray | None:
        """Widen, in place, the intervals of rows beyond the K's range; return which rows are (``None``: no reach)."""
        if not self.reach_:
            return None
        batch = np.asarray(configs["batch"], dtype=float)
        beyond = np.zeros(len(out), bool)
        for t, r in self.reach_.items():
            if t not in self.maps_:
                continue
            d = r.beyond(src[t].to_numpy(float), batch)
            beyond |= d > INSIDE
            if r.rate:
                widen = np.exp(r.rate * d)
                out[f"{t}_lo"] = out[f"{t}_lo"].to_numpy(float) / widen
                out[f"{t}_hi"] = out[f"{t}_hi"].to_numpy(float) * widen
        return beyond

    def save(self, directory: str | Path, source_dir: str | Path) -> Path:
        """Write a self-contained calibrated model directory.

        ``calibration.json`` (maps, reach, meta, and the checksum of the source) goes beside a
        copy of the source model directory in ``source/``.

        Args:
            directory: where to write (new or empty).
            source_dir: the source model's directory: a CARB bundle or itself a calibrated
                model (copied whole, so a chain of calibrations stays loadable).

        Returns:
            The directory written.

        Raises:
            ValueError: (one line) ``directory`` is not empty, or is the source or inside it.
        """
        d = Path(directory)
        src = Path(source_dir)
        check_model_out(d, src)
        d.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src, d / "source")
        doc = {
            "format": "carb-calibration",
            "version": 1,
            "coverage": self.coverage,
            "meta": self.meta,
            "source_sha256": model_checksum(d / "source"),
            "maps": {
                t: m.to_dict()
                if isinstance(m, LogMap)
                else {
                    "kind": "nnls",
                    "coef": m.coef,
                    "intercept": m.intercept,
                    "features": m.features,
                    "q": m.q,
                    "n": m.n,
                }
                for t, m in self.maps_.items()
            },
            "reach": {t: r.to_dict() for t, r in self.reach_.items()},
            "visit_scatter": self.scatter_,
        }
        from carb.model import doc_checksum

        doc = json.loads(json.dumps(doc, default=str))
        doc["calibration_sha256"] = doc_checksum(doc, "calibration_sha256")  # covers every map value
        (d / CALIBRATION_FILE).write_text(json.dumps(doc, indent=2))
        return d


def fit_calibrated(
    source: Any,
    measured: pd.DataFrame,
    coverage: float = 0.9,
    meta: dict[str, Any] | None = None,
    method: str = "log",
    visits: pd.DataFrame | None = None,
) -> CalibratedModel:
    """Fit the per-target maps of a source model to a new device from K measured configs.

    ``log`` (default) maps the source model's prediction in log space
    (:func:`carb.model.maps.fit_log_map`; memory is also offered ``y = s + c``, a fixed
    amount in MB); ``nnls``, a :class:`carb.transfer.FewShotModel` with the source model as
    its one source device, adds the cost features :data:`NNLS_FEATURES` and fits
    HELP-style non-negative weights in the target's units. On the shipped cpu-1t -> cpu-2t
    pair ``log`` wins at K = 5, 10 and 50 (latency MAPE 17.2% against 20.2% at K = 10) and
    ties at K = 20 (16.1% against 15.2%, inside the seeds' spread; mean over 5 seeds).
    Each target's :class:`Reach` (the K's range and the widening beyond it) is measured on
    the K with the same map refitted without their ends.

    Args:
        source: the source model (a CARB bundle, a calibrated model, or any predictor with
            ``predict`` and ``targets_``).
        measured: the K configs (the config columns) with their measured targets on the new
            device: ``energy_j`` (J), ``latency_ms`` (ms), ``memory_mb`` (MB), any of them;
            rows with a ``status`` other than ``ok`` are ignored.
        coverage: nominal coverage of the intervals.
        meta: provenance kept in the calibrated model.
        method: ``log`` or ``nnls`` (above).
        visits: every visit of the K configs (``config_id`` and measured targets: first
            visits, retakes, rounds), ``measured`` holding the one kept per config; those
            visited more than once measure the visit-to-visit scatter of
            :data:`VISIT_SCATTER_TARGETS` (:func:`visit_scatter`).

    Returns:
        The :class:`CalibratedModel` (save it with :meth:`CalibratedModel.save`).

    Raises:
        ValueError: an unknown method, fewer than 2 ok rows, or no target with measurements.

    Example:
        >>> model = fit_calibrated(carb.model.load("models/cpu-1t"), measured)  # doctest: +SKIP
    """
    if method not in ("log", "nnls"):
        raise ValueError(f"method {method!r}: expected 'log' or 'nnls'")
    df = measured[measured["status"] == "ok"] if "status" in measured.columns else measured
    if len(df) < 2:
        raise ValueError(f"calibration needs at least 2 successful measurements, got {len(df)}")
    df = df.reset_index(drop=True)
    src = source.predict(df).reset_index(drop=True)
    if method == "nnls":
        from carb.families.features import compute

        df = compute(df)
    batch = df["batch"].to_numpy(float) if "batch" in df.columns else np.ones(len(df))
    maps: dict[str, LogMap | NnlsMap] = {}
    refits: dict[str, tuple[Any, np.ndarray]] = {}
    for t in source.targets_:
        if t not in df.columns:
            continue
        y = df[t].to_numpy(float)
        s = src[t].to_numpy(float)
        ok = np.isfinite(y) & (y > 0) & np.isfinite(s) & (s > 0)
        if ok.sum() < 2:
            continue  # e.g. no energy sensor on the new device
        fit = _fit_log if method == "log" else _fit_nnls
        maps[t], refit = fit(source, t, df[ok], s[ok], y[ok], batch[ok], _log_halfwidth(src[ok], t), coverage)
        refits[t] = (refit, ok)
    if not maps:
        raise ValueError("no target has measurements to calibrate on")
    # the precisions the K configs were measured in: a config in another one is mapped by
    # their map, which on a CPU without native bf16 is off by tens of times
    precisions = sorted(set(df["precision"].astype(str))) if "precision" in df.columns else None
    meta = {
        **(meta or {}),
        "method": method,
        **({"precisions": precisions} if precisions else {}),
        **calibration_speed(measured),
    }
    scatter = visit_scatter(df, visits, [t for t in maps if t in VISIT_SCATTER_TARGETS], coverage)
    model = CalibratedModel(source, maps, coverage, meta, scatter=scatter)
    inside = model._in_range(df, src)  # the in-range intervals at the K, which extrapolation errors exceed
    for t, (refit, ok) in refits.items():
        hw_in = _log_halfwidth(inside[ok], t)
        y, s = df[t].to_numpy(float)[ok], src[t].to_numpy(float)[ok]
        model.reach_[t] = measure_reach(refit, s, y, batch[ok], hw_in, coverage)
    return model


def _fit_log(source: Any, t: str, rows: pd.DataFrame, s, y, batch, src_hw, coverage: float) -> tuple[LogMap, Any]:
    """Fit target ``t``'s log map on the K (``s`` predicted, ``y`` measured, ``src_hw`` the source's log half-widths).

    Returns the map and its refit on a subset of the K (``refit(rest, out)``: the predictions of the rows ``out``).
    """
    # memory is also offered the additive map: on the shipped pair a second thread's
    # runtime holds a fixed ~0.5 MB more, which a multiplicative map turns into a bias at batch 1
    additive = t == "memory_mb"
    lm = fit_log_map(s, y, batch, coverage, additive=additive)
    if lm.loo is not None:
        # leave-one-out errors in units of the source's own local half-width: their
        # conformal quantile scales that width into the new device's interval
        scores = np.sort(np.abs(np.asarray(lm.loo)) / np.maximum(src_hw, 1e-9))
        q = conformal_quantile(scores, coverage)
        lm.scale_q = float(q) if np.isfinite(q) else None

    def refit(rest: np.ndarray, out: np.ndarray) -> np.ndarray:
        return fit_log_map(s[rest], y[rest], batch[rest], coverage, additive=additive).apply(s[out], batch[out])

    return lm, refit


def _fit_nnls(source: Any, t: str, rows: pd.DataFrame, s, y, batch, src_hw, coverage: float) -> tuple[NnlsMap, Any]:
    """Fit target ``t``'s NNLS map on the K ``rows`` (with their cost features) and measured ``y``.

    Returns the map and its refit on a subset of the K (``refit(rest, out)``: the predictions of the rows ``out``).
    """
    feats = list(NNLS_FEATURES)

    def fit(X: pd.DataFrame, yy: np.ndarray) -> Any:
        return FewShotModel(ModelSource(source, t), passthrough=feats, method="nnls").fit(X, yy)

    m = fit(rows, y)
    nm = NnlsMap(
        coef=[float(c) for c in m.coef_],
        intercept=float(m.intercept_),
        features=feats,
        q=_nnls_interval(fit, rows, y, coverage),
        n=len(y),
    )

    def refit(rest: np.ndarray, out: np.ndarray) -> np.ndarray:
        return fit(rows.iloc[np.flatnonzero(rest)], y[rest]).predict(rows.iloc[np.flatnonzero(out)])

    return nm, refit


#: targets whose intervals carry the visit-to-visit scatter of a measurement: peak memory
#: jumps by a few MB from visit to visit of one config (a worker thread's buffers held or
#: not), which no retake in the machine's latency state evens out; latency's visits are
#: brought into one machine state instead (:func:`carb.campaign.rounds.retake_off_state`)
VISIT_SCATTER_TARGETS: tuple[str, ...] = ("memory_mb",)


def visit_scatter(kept: pd.DataFrame, visits: pd.DataFrame | None, targets: list[str], coverage: float) -> dict:
    """Return per target the visit-to-visit scatter of a measurement (log).

    For every config of ``kept`` that ``visits`` holds more than once, its visits' distances
    ``|log(visit / kept row)|`` but the least (the kept visit's own); the scatter is their
    split-conformal quantile at ``coverage`` (the largest when too few). Targets without
    such a pair are left out.
    """
    if visits is None or "config_id" not in visits.columns or "config_id" not in kept.columns:
        return {}
    ok = visits[visits["status"] == "ok"] if "status" in visits.columns else visits
    out: dict[str, float] = {}
    for t in (t for t in targets if t in ok.columns and t in kept.columns):
        ref = dict(zip(kept["config_id"], pd.to_numeric(kept[t], errors="coerce")))
        v = ok[ok["config_id"].isin(ref)]
        d = np.log(pd.to_numeric(v[t], errors="coerce") / v["config_id"].map(ref)).abs().dropna()
        d = np.sort(np.concatenate([np.sort(g.to_numpy())[1:] for _, g in d.groupby(v["config_id"])] or [[]]))
        if len(d):
            q = conformal_quantile(d, coverage)
            out[t] = float(q if np.isfinite(q) else d[-1])
    return out


def _log_halfwidth(pred: pd.DataFrame, t: str) -> np.ndarray:
    """Half-width (log) of a prediction's interval for target ``t``: ``log(hi / lo) / 2``."""
    lo = np.maximum(pred[f"{t}_lo"].to_numpy(float), 1e-12)
    hi = np.maximum(pred[f"{t}_hi"].to_numpy(float), 1e-12)
    return np.log(hi / lo) / 2


def calibration_speed(measured: pd.DataFrame) -> dict[str, Any]:
    """Return the speed sentinel while the K configs were measured, for the calibration's meta.

    ``sentinel_ms`` of their rows (ms; :mod:`carb.measure.sentinel`) lets a later
    validation say how much the machine's speed moved since
    (:func:`carb.decide.validate.drift_corrected_calls`, which ``carb validate`` and
    ``carb demo`` call). Empty when the rows have no sentinel.
    """
    if "sentinel_ms" not in measured.columns:
        return {}
    s = pd.to_numeric(measured["sentinel_ms"], errors="coerce").dropna()
    return {"sentinel_ms": [round(float(v), 6) for v in s]} if len(s) else {}


def check_model_out(out: str | Path, source: str | Path | None = None) -> None:
    """Refuse to write a model into ``out`` when it is a file, a non-empty directory, or the source's.

    Raises:
        ValueError: (one line) ``out`` is a file, a non-empty directory, or the source
            model's directory or inside it.
    """
    o = Path(out)
    if o.exists() and not o.is_dir():
        raise ValueError(f"{o}: exists and is not a directory")
    if o.is_dir() and any(o.iterdir()):
        raise ValueError(f"{o}: directory is not empty (choose a new directory for the model)")
    if source is not None:
        so, ss = o.resolve(), Path(source).resolve()
        if so == ss or ss in so.parents:
            raise ValueError(f"{o}: is the source model's directory or inside it")


def model_checksum(directory: str | Path) -> str:
    """Return the SHA-256 of a model directory's defining file.

    That is the bundle's ``manifest.json`` (which itself holds the checksums of every
    learner file) or a calibrated model's ``calibration.json`` (which holds its source's
    checksum).
    """
    import hashlib

    d = Path(directory)
    f = d / CALIBRATION_FILE if (d / CALIBRATION_FILE).exists() else d / "manifest.json"
    return hashlib.sha256(f.read_bytes()).hexdigest()


def load_predictor(directory: str | Path) -> Any:
    """Load a config model directory: a CARB bundle (``carb train``) or a calibrated model (``carb calibrate``).

    A calibrated model is ``calibration.json`` beside a copy of its source model in
    ``source/``, itself a bundle or a calibrated model. Every command that takes a config
    model takes either. Never runs code from the files. :func:`carb.transfer.load.load_model`
    also reads network models.

    Raises:
        ValueError: (one line; :class:`carb.model.BundleError` is one) not a model directory,
            a broken or edited file, or a source that does not match its recorded checksum.
    """
    from carb.model import BundleError, load

    d = Path(directory)
    if not d.is_dir():
        raise BundleError(f"{d}: no such model directory")
    if not (d / CALIBRATION_FILE).exists():
        if not (d / "manifest.json").exists():
            raise BundleError(
                f"{d}: not a model directory (no manifest.json from carb train, "
                f"no {CALIBRATION_FILE} from carb calibrate)"
            )
        return load(d)
    return load_calibrated(d)


def _read_maps(doc: dict) -> dict[str, LogMap | NnlsMap]:
    """Return the per-target maps of a calibration document."""
    return {
        t: (
            NnlsMap(
                coef=[float(c) for c in m["coef"]],
                intercept=float(m["intercept"]),
                features=[str(f) for f in m["features"]],
                q=float(m["q"]),
                n=int(m["n"]),
            )
            if m.get("kind") == "nnls"
            else LogMap.from_dict(m)
        )
        for t, m in doc["maps"].items()
    }


def load_calibrated(directory: str | Path) -> CalibratedModel:
    """Load a calibrated model directory written by :meth:`CalibratedModel.save`.

    Its source (in ``source/``) is loaded with :func:`load_predictor` and checked against
    the checksum the calibration recorded.

    Raises:
        ValueError: (one line; :class:`carb.model.BundleError` is one) a broken or edited
            calibration file, or a missing or changed source.
    """
    from carb.model import BundleError, check_doc_checksum

    d = Path(directory)
    cal = d / CALIBRATION_FILE
    try:
        doc = read_json(cal)
        if not isinstance(doc, dict) or doc.get("format") != "carb-calibration" or doc.get("version") != 1:
            raise ValueError("not a version-1 carb calibration")
        check_doc_checksum(doc, "calibration_sha256", str(cal), "calibrate again with this carb")
        maps = _read_maps(doc)
        # a calibration saved without its reach: no flag and no widening beyond the K
        reach = {t: Reach.from_dict(r) for t, r in (doc.get("reach") or {}).items()}
    except BundleError:
        raise
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{cal}: broken calibration file ({e})") from None
    if not (d / "source").is_dir():
        raise BundleError(f"{cal}: its source model is missing ({d / 'source'}); calibrate again")
    want = doc.get("source_sha256")
    if want is not None and want != model_checksum(d / "source"):
        raise BundleError(
            f"{cal}: the source model in {d / 'source'} changed since calibration (checksum mismatch); calibrate again"
        )
    scatter = {t: float(v) for t, v in (doc.get("visit_scatter") or {}).items()}
    return CalibratedModel(
        load_predictor(d / "source"), maps, float(doc.get("coverage", 0.9)), doc.get("meta"), reach, scatter
    )
