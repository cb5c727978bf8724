"""The three-way budget calls of a screening, what it reports of them, and where the target model may call at all.

:func:`calls` turns each config's intervals (or its chances of meeting each budget) into ``accept``, ``measure`` or
``reject`` by one of the rules of :data:`carb.decide.screen.RULES`, and never accepts a config whose prediction is
``extrapolated``; the other functions sort the configs to measure and count the calls for
:class:`carb.decide.screen.ScreenResult`.

A model's domain also has a family and a device kind: :func:`foreign_reason` says why a model of other networks (a
NAS-Bench-201 cell model on ResNets) or of another kind of device (a GPU's model on a CPU space) cannot speak for a
space, and :func:`foreign_rows` marks the configs it cannot speak for, which a screening then treats as extrapolated.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import pandas as pd

#: the three budget calls of ``risk="decide"``
DECISIONS = ("accept", "measure", "reject")

#: device kinds, each with the starts of the device labels of that kind (lower case): the shipped datasets' labels
#: (``cpu-1t``, ``cpu-avx2-1t``, ``h200``), HELP's and HW-NAS-Bench's platforms (``gold_6226``, ``raspi4``, ``pixel3``,
#: ``edgegpu`` = Jetson TX2, ``edgetpu``, ``eyeriss``, ``fpga``, ``titan_rtx_b256``) and torch's devices (``cuda:0``)
DEVICE_KINDS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu", "gold_", "silver_", "xeon", "epyc", "raspi", "pixel", "samsung_", "essential_ph"),
    "gpu": ("cuda", "gpu", "edgegpu", "jetson", "h100", "h200", "a100", "v100", "1080ti", "2080ti", "titan", "rtx"),
    "tpu": ("edgetpu", "tpu"),
    "fpga": ("fpga",),
    "asic": ("eyeriss",),
}


def measure_set(pred: pd.DataFrame, budgets: Mapping[str, float]) -> pd.DataFrame:
    """The configs called ``measure``, the most useful to profile first: likely on the front, then nearest a budget."""
    measure = pred[pred["decision"] == "measure"].copy()
    measure["_near"] = (
        np.min([np.abs(np.log(measure[t].to_numpy(float) / b)) for t, b in budgets.items()], axis=0)
        if budgets and len(measure)
        else 0.0
    )
    keys = (["p_front"] if "p_front" in measure.columns else []) + ["_near"]
    measure = measure.sort_values(keys, ascending=[False] * (len(keys) - 1) + [True]).drop(columns="_near")
    return measure.reset_index(drop=True)


def call_counts(
    pred: pd.DataFrame, measure: pd.DataFrame, budgets: Mapping[str, float], n: int, survivors: int
) -> dict[str, Any]:
    """Return the three-way summary (see :class:`carb.decide.screen.ScreenResult`).

    It holds ``decisions`` (Stage 1 prunes counted as rejects), ``decided_share``, ``measure_by_budget`` and
    ``crowding``.
    """
    counts = {d: int((pred["decision"] == d).sum()) for d in DECISIONS}
    counts["reject"] += n - survivors  # Stage 1 prunes are rejects
    straddle, crowd = crowding(pred, measure, budgets, n)
    return {
        "decisions": counts,
        "decided_share": 1.0 - counts["measure"] / n,
        "measure_by_budget": straddle,
        "crowding": crowd,
    }


def crowding(
    pred: pd.DataFrame, measure: pd.DataFrame, budgets: Mapping[str, float], n: int
) -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """Return, per budgeted target, how many configs to measure straddle its budget and how crowded it is.

    The first counts the configs to measure whose upper bound is over the budget (a config can count under
    several). The crowding is the share of candidates whose point prediction lies within the intervals' median
    relative half-width of the budget: where that share is large, narrower intervals decide few more.
    """
    straddle, crowd = {}, {}
    for t, b in budgets.items():
        if f"{t}_hi" not in pred.columns or f"{t}_lo" not in pred.columns:
            continue
        straddle[t] = int((measure[f"{t}_hi"].to_numpy(float) > b).sum()) if len(measure) else 0
        p, lo, hi = (pred[c].to_numpy(float) for c in (t, f"{t}_lo", f"{t}_hi"))
        with np.errstate(divide="ignore", invalid="ignore"):
            hw = np.log(hi / lo) / 2
            hw = float(np.median(hw[np.isfinite(hw)])) if np.isfinite(hw).any() else float("nan")
            near = np.abs(np.log(p / b)) < hw
        crowd[t] = {"half_width_rel": float(np.expm1(hw)), "share_within": float(near.sum() / n)}
    return straddle, crowd


def decisions_table(pred: pd.DataFrame) -> pd.DataFrame:
    """Every Stage 2 survivor: its id, call, whether it is extrapolated, its chances, then its predicted costs."""
    keep = [
        c for c in ("config_id", "decision", "extrapolated", "p_within", "p_feasible", "p_front") if c in pred.columns
    ]
    return pred[
        keep + [c for c in pred.columns if c not in keep and c.split("_")[0] in ("energy", "latency", "memory")]
    ].copy()


def calls(
    pred: pd.DataFrame, budgets: Mapping[str, float], confidence: float | None = None, rule: str = "interval"
) -> np.ndarray:
    """Return the three-way budget calls.

    ``rule="joint"``, from the chances ``<target>_p_within``: ``accept`` when their product
    is at least ``confidence``, ``reject`` when one target's chance of being over is at
    least ``confidence``, ``measure`` otherwise (NaN chances: measure).
    ``rule="interval"``: ``accept`` when every upper bound is within its budget;
    ``reject`` when one target's chance of being over is at least ``confidence`` (with
    ``confidence`` and the ``<target>_p_within`` columns; else when a lower bound is over
    its budget); ``measure`` otherwise.
    A config whose prediction is ``extrapolated`` (the column, where ``pred`` has it) is never accepted, by either
    rule: ``measure``, or ``reject`` where the reject rule holds on its interval.
    """
    trusted = ~extrapolated(pred)
    if not budgets:
        return np.where(trusted, "accept", "measure")
    chances = confidence is not None and all(f"{t}_p_within" in pred.columns for t in budgets)
    if rule == "joint" and not chances:
        raise ValueError("the joint rule needs a confidence and <target>_p_within columns")
    if chances:  # both rules reject alike: one target over with chance >= confidence
        pw = np.column_stack([pred[f"{t}_p_within"].to_numpy(float) for t in budgets])
        over = np.max(1 - pw, axis=1) >= confidence  # NaN compares False
    else:
        over = np.any([pred[f"{t}_lo"].to_numpy(float) > b for t, b in budgets.items()], axis=0)
    if rule == "joint":
        within = np.prod(pw, axis=1) >= confidence  # NaN compares False
    else:  # NaN compares False: never accepted
        within = np.all([pred[f"{t}_hi"].to_numpy(float) <= b for t, b in budgets.items()], axis=0)
    return np.where(over, "reject", np.where(within & trusted, "accept", "measure"))


def extrapolated(pred: pd.DataFrame) -> np.ndarray:
    """Return, per row, whether its prediction is flagged ``extrapolated`` (False where ``pred`` has no such column)."""
    if "extrapolated" not in pred.columns:
        return np.zeros(len(pred), dtype=bool)
    flag = pred["extrapolated"]
    return flag.where(flag.notna(), False).to_numpy().astype(bool)


def device_kind(label: Any) -> str | None:
    """Return the kind of device a label names (``cpu``, ``gpu``, ``tpu``, ``fpga``, ``asic``; None: unknown).

    The longest start of :data:`DEVICE_KINDS` that the label begins with decides, case aside.
    """
    s = str(label).strip().lower() if label is not None else ""
    best, size = None, 0
    for kind, starts in DEVICE_KINDS.items():
        for p in starts:
            if s.startswith(p) and len(p) > size:
                best, size = kind, len(p)
    return best


def model_device(model: Any) -> tuple[str | None, str | None]:
    """Return the device a model records for its measurements, as a label and a kind (None, None: it records none).

    A calibrated model's is where its K configs were measured (``meta``: its ``device``, else its ``fingerprint``); a
    fitted model's is its ``device_``, else its bundle manifest's ``training`` entry (``device``, else the
    ``fingerprint`` of its dataset), else its training domain's one ``device``. A fingerprint's device (``cpu``,
    ``cuda``) gives the kind and its name (``NVIDIA H200``) the label.
    """
    meta = getattr(model, "meta", None)
    meta = meta if isinstance(meta, Mapping) else {}
    training = (getattr(model, "manifest_", None) or {}).get("training") or {}
    seen = ((_domain(model) or {}).get("categories") or {}).get("device") or []
    for fp, label in (
        (meta.get("fingerprint"), meta.get("device")),
        (None, getattr(model, "device_", None)),
        (training.get("fingerprint"), training.get("device")),
        (None, seen[0] if len(seen) == 1 else None),
    ):
        if label:
            return str(label), device_kind(label)
        if isinstance(fp, Mapping) and fp.get("device"):
            return str(fp.get("name") or fp["device"]), device_kind(fp["device"])
    return None, None


def _domain(model: Any) -> dict[str, Any] | None:
    """The training domain a model records: its own, or its source's for a calibrated model."""
    dom = getattr(model, "domain_", None)
    if dom is None and getattr(model, "source", None) is not None:
        dom = getattr(model.source, "domain_", None)
    return dom if isinstance(dom, dict) else None


def _family_kind(name: Any) -> str:
    """Return the kind of network a ``family`` value names: its config class (``cifar`` and ``imagenet`` share one)."""
    from carb.families import SpaceError, get

    try:
        ct = get(str(name)).config_type
    except SpaceError:
        return str(name)
    return f"{ct.__module__}.{ct.__qualname__}"


def _foreign(frame: pd.DataFrame, model: Any, device: str | None) -> tuple[str | None, np.ndarray]:
    """Return why ``model`` is foreign to the configs of ``frame`` (None: it is not) and the rows it cannot speak for.

    Another device kind than ``device``'s leaves no row; another family of networks leaves the rows of that family.
    Either side unknown (no label, an unknown kind, no recorded families) is no mismatch.
    """
    label, have = model_device(model)
    want = device_kind(device)
    if have and want and have != want:
        named = "" if str(device).strip().lower() == want else f" ({device})"
        why = f"the target model was measured on {label} (a {have}) and the screening is for a {want}{named}"
        return why, np.ones(len(frame), dtype=bool)
    trained = ((_domain(model) or {}).get("categories") or {}).get("family")
    if not trained:
        return None, np.zeros(len(frame), dtype=bool)
    kinds = {_family_kind(f) for f in trained}
    # a row without a family is a ResNet (carb.families.config_from_row)
    names = frame["family"].fillna("cifar").astype(str) if "family" in frame.columns else None
    if names is None:
        names = pd.Series("cifar", index=frame.index)
    foreign = {v: _family_kind(v) not in kinds for v in pd.unique(names)}
    out = names.map(foreign).to_numpy(dtype=bool)
    if not out.any():
        return None, out
    other = sorted(set(names[out]))
    why = (
        f"the target model was trained on {', '.join(map(str, trained))} networks and the space holds "
        f"{', '.join(other)} ({int(out.sum()):,} of {len(frame):,} configs), a family it never saw"
    )
    return why, out


def foreign_reason(candidates: pd.DataFrame, model: Any, device: str | None = None) -> str | None:
    """Return why ``model`` cannot speak for the ``candidates``: another family of networks or kind of device.

    Args:
        candidates: the configs to screen.
        model: the target model.
        device: the device label or kind the screening is for (``cpu``, ``cuda``, ``h200``); None: not checked.

    Returns:
        One line, or None when the model is of the candidates' families and device kind (or either is unknown).
    """
    return _foreign(candidates, model, device)[0]


def foreign_rows(frame: pd.DataFrame, model: Any, device: str | None = None) -> np.ndarray:
    """Return, per row of ``frame``, whether ``model`` is foreign to it (:func:`foreign_reason`): extrapolated."""
    return _foreign(frame, model, device)[1]
