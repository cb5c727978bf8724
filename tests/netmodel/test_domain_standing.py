"""carb.netmodel.domain.standing over whole arrays gives, to the bit, what one network at a time gives.

The reference below is the per-network form of the same rules (one row at a time, scalar C-library
math): the widened bounds, the reasons and the widened flags must equal it on a few hundred rows.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from carb.measure.fingerprint import Fingerprint, compare
from carb.netmodel import load
from carb.netmodel.domain import _UNIT, fingerprint_of, older_memory, standing, steps_of
from carb.netmodel.network import _network_rows

MODEL = "layers-cpu-avx2-1t"
OTHER = Fingerprint(device="cpu", name="Test CPU", isa=("avx2", "avx512f"), kernels="AVX512", native=())


def _reference(nm, rows, pred, precisions, machine):
    """The rules one network at a time (per-row .at, math.log / math.exp)."""
    from carb.model.steps import half_width

    cmp = compare(fingerprint_of(nm), machine)
    steps = steps_of(nm)
    measured = nm.layer.precisions
    measured = list(measured) + list(nm.meta.get("calibration_precisions") or []) if measured is not None else None
    reasons = [[] for _ in range(len(rows))]
    for c, (lo, hi) in (nm.meta.get("range") or {}).items():
        if c not in rows.columns:
            continue
        scale, unit = _UNIT.get(c, (1.0, ""))
        for i, v in enumerate(rows[c].to_numpy(np.float64)):
            if v < lo * (1 - 1e-3) or v > hi * (1 + 1e-3):
                side = f"> {hi / scale:.3g}" if v > hi else f"< {lo / scale:.3g}"
                reasons[i].append(f"{c} {v / scale:.3g}{(' ' + unit) if unit else ''} {side} fitted")
    out, widened = pred.copy(), []
    for i in range(len(rows)):
        kinds = []
        if not cmp.same_kind:
            kinds.append("machine_kind")
            reasons[i].insert(0, "another machine kind")
        if any(r.endswith("fitted") for r in reasons[i]):
            kinds.append("range")
        unbounded = False
        if measured is not None and precisions[i] not in measured:
            kinds.append("precision")
            native = machine.native
            unbounded = precisions[i] != "fp32" and (native is None or precisions[i] not in native)
            reasons[i].append(
                f"precision {precisions[i]} not measured by the model"
                + ("; not native on this machine: no upper bound" if unbounded else "")
            )
        widened.append(bool(kinds))
        older = older_memory(nm)
        for t in ("latency_ms", "memory_mb") if kinds or older else ():
            if not kinds and t == "latency_ms":
                continue
            s2 = sum(half_width(steps, k, t) ** 2 for k in kinds)
            if older and t == "memory_mb":  # the definition step, with the model's own error
                s2 += half_width(steps, "memory_definition", t) ** 2 + nm.q[t] ** 2
            s = math.sqrt(s2)
            p = float(out.at[out.index[i], t])
            lo, hi = float(out.at[out.index[i], f"{t}_lo"]), float(out.at[out.index[i], f"{t}_hi"])
            hw_lo = max(math.log(p / lo) if lo > 0 else math.inf, s)
            hw_hi = max(math.log(hi / p) if hi > 0 else math.inf, s)
            out.at[out.index[i], f"{t}_lo"] = p * math.exp(-hw_lo) if math.isfinite(hw_lo) else 0.0
            open_top = (unbounded and t == "latency_ms") or not math.isfinite(hw_hi)
            out.at[out.index[i], f"{t}_hi"] = math.inf if open_top else p * math.exp(hw_hi)
    return out, reasons, widened


@pytest.fixture(scope="module")
def zoo_rows():
    """Network rows of carb.zoo networks, each repeated at batches 1 to 64 (the figures that grow with the batch
    scaled with it: SYNTHETIC rows, many beyond the model's fitted range), in fp32, bf16 and fp16."""
    from carb import graph
    from carb.families import zoo

    nm = load(MODEL)
    cfgs = zoo.sample_configs(per_family=1, seed=5)[:12]
    tables = []
    for c in cfgs:
        with torch.device("meta"):
            module = zoo.build(c)
        tables.append(graph.capture(module, (1, 3, c.input_size, c.input_size), precision="fp32"))
    base, *_ = _network_rows(tables, nm.layer)
    parts = []
    for b in (1, 2, 4, 8, 16, 64):
        r = base.copy()
        for col in ("flops", "input_bytes", "peak_live_bytes", "layer_sum_ms"):
            if col in r:
                r[col] = r[col] * b
        r["batch"] = b
        parts.append(r)
    rows = pd.concat(parts * 5, ignore_index=True)  # 360 rows
    rng = np.random.default_rng(0)
    precisions = list(rng.choice(["fp32", "bf16", "fp16"], len(rows)))
    return nm, rows, precisions


@pytest.mark.parametrize("where", ["own", "other", "other_native_bf16", "calibrated_bf16", "no_precisions"])
def test_standing_equals_the_per_row_rules(zoo_rows, where):
    nm, rows, precisions = zoo_rows
    machine = fingerprint_of(nm) if where == "own" else OTHER
    if where == "other_native_bf16":
        machine = replace(OTHER, native=("bf16",))
    if where == "calibrated_bf16":
        nm = load(MODEL)
        nm.meta["calibration_precisions"] = ["bf16"]
    if where == "no_precisions":
        nm = load(MODEL)
        nm.layer.precisions = None
    pred = nm.predict_rows(rows)
    got, st = standing(nm, rows, pred, precisions, machine)
    want, reasons, widened = _reference(nm, rows, pred, precisions, machine)
    assert len(rows) >= 300 and 0 < sum(widened) and (where != "own" or not all(widened))
    assert st.widened == widened and st.outside == reasons
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # the widened rows moved, the others kept their bounds to the bit (memory widens by the definition step alone)
    keep = ~np.array(widened)
    cols = [c for c in pred.columns if not (older_memory(nm) and c.startswith("memory_mb"))]
    pd.testing.assert_frame_equal(got.loc[keep, cols], pred.loc[keep, cols], check_exact=True)


def test_memory_of_the_older_definition_widens_until_calibrated_or_refitted(zoo_rows):
    """The shipped models' memory counts library pages the worker no longer counts: their memory
    intervals widen by the measured definition step; a model recording the worker's baseline,
    or calibrated on memory, keeps its own."""
    import copy

    from carb.measure.cpu import MEMORY_BASELINE

    nm, rows, precisions = zoo_rows
    own = fingerprint_of(nm)
    pred = nm.predict_rows(rows)
    got, st = standing(nm, rows, pred, precisions, own)
    fitted_range = ~np.asarray(st.widened)
    assert fitted_range.any()
    half = np.log(got["memory_mb_hi"] / got["memory_mb"]).to_numpy()[fitted_range]
    expect = math.hypot(steps_of(nm)["memory_definition"]["memory_mb"]["q90_abs_log"], nm.q["memory_mb"])
    assert np.allclose(half, expect)
    pd.testing.assert_series_equal(got["latency_ms_hi"][fitted_range], pred["latency_ms_hi"][fitted_range])
    newer = copy.deepcopy(nm)
    newer.meta["memory_baseline"] = MEMORY_BASELINE
    calibrated = copy.deepcopy(nm)
    calibrated.calibration["memory_mb"] = {"coef": [0.0, 1.0]}
    for m in (newer, calibrated):
        assert not older_memory(m)
        g, _ = standing(m, rows, pred, precisions, own)
        pd.testing.assert_series_equal(g["memory_mb_hi"][fitted_range], pred["memory_mb_hi"][fitted_range])
