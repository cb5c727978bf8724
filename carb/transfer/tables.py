"""A calibration as tables: each target's map and its reach, or the K networks before and after.

``carb calibrate`` prints these; a Python user reads the same frames (:func:`maps_table`, :func:`networks_table`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

__all__ = ["map_text", "maps_table", "networks_table", "reach_text"]


def map_text(m: Any) -> str:
    """A calibration map as a formula of the source prediction ``s`` (``log y = a + b·log s``, ``y = s + c``, ...)."""
    from .calibrate import NnlsMap

    if isinstance(m, NnlsMap):
        terms = ["%.3g" % m.intercept] + [f"{w:.3g}·{f}" for w, f in zip(m.coef, [*m.features, "s"]) if w]
        return "y = " + " + ".join(terms)
    if m.add:  # the additive map: a fixed amount on top of the source's prediction
        return f"y = s {'+' if m.add > 0 else '-'} {abs(m.add):.3g}"
    terms = ["%.3g" % m.coef[0], "%.3g·log s" % m.coef[1]] + (
        ["%.3g·log batch" % m.coef[2]] if len(m.coef) == 3 else []
    )
    return "log y = " + " + ".join(terms)


def reach_text(r: Any, target: str) -> tuple[str, str]:
    """The K's range of source predictions and batches, and how the interval widens beyond it (flagged extrapolated).

    ``("-", "-")`` where the map records no reach.
    """
    if r is None:
        return "-", "-"
    unit = target.rsplit("_", 1)[-1].replace("mb", "MB").replace("j", "J")
    rng = f"{r.s_range[0]:.3g}-{r.s_range[1]:.3g} {unit}, batch {r.batch_range[0]:g}-{r.batch_range[1]:g}"
    if r.rate is None:
        return rng, "flagged extrapolated, not widened (too few K to measure how)"
    return rng, f"flagged extrapolated; interval x{np.exp(r.rate * np.log(2)):.2f} wider per doubling beyond"


def maps_table(model: Any) -> pd.DataFrame:
    """A calibrated config model's map per target: its K, formula, interval widening, and the K's reach.

    Args:
        model: a :class:`carb.transfer.calibrate.CalibratedModel`.

    Returns:
        One row per target, as text: ``target``, ``K``, ``map``, ``interval widening (x)``, ``measured range (K)``
        and ``beyond it``.
    """
    rows = [
        [name, str(m.n), map_text(m), f"{np.exp(m.q):.2f}", *reach_text(model.reach_.get(name), name)]
        for name, m in model.maps_.items()
    ]
    cols = ["target", "K", "map", "interval widening (x)", "measured range (K)", "beyond it"]
    return pd.DataFrame(rows, columns=cols)


def networks_table(res: Any) -> tuple[pd.DataFrame, str]:
    """The K networks of a network model's calibration: measured, the source model's and the calibrated figures.

    Args:
        res: what :func:`carb.transfer.here.calibrate_here` returned for a network model.

    Returns:
        One row per network, as text (``network``, ``measured ms``, ``source model ms``, ``calibrated ms``,
        ``measured MB``, ``calibrated MB``), and a line with the source model's median latency error on them and
        the calibrated model's 90% latency interval.
    """
    from carb.netmodel import network_row

    nm, model, fit_rows = res.source, res.model, res.measured
    rows_k = pd.DataFrame([network_row(t, nm.layer)[0] for t in res.tables])  # calibration keeps the layer model
    before, after = nm.predict_rows(rows_k), model.predict_rows(rows_k)
    rows = [
        [
            res.labels.get(r["config_id"], str(r["config_id"])),
            f"{r['latency_ms']:.2f}",
            f"{before['latency_ms'].iloc[i]:.2f}",
            f"{after['latency_ms'].iloc[i]:.2f}",
            f"{r['memory_mb']:.1f}",
            f"{after['memory_mb'].iloc[i]:.1f}",
        ]
        for i, (_, r) in enumerate(fit_rows.iterrows())
    ]
    cols = ["network", "measured ms", "source model ms", "calibrated ms", "measured MB", "calibrated MB"]
    log_err = np.abs(np.log(before["latency_ms"].to_numpy() / fit_rows["latency_ms"].to_numpy()))
    line = (
        f"source model on these networks: median latency error {100 * (np.exp(np.median(log_err)) - 1):.1f}% "
        f"before calibration; the calibrated model's 90% latency interval is x/÷"
        f"{np.exp(model.calibration.get('latency_ms', {}).get('q', model.q.get('latency_ms', 0))):.2f}"
    )
    return pd.DataFrame(rows, columns=cols), line
