"""carb.report.figures: a batch-scaling curve is drawn only from enough linked
architectures (synthetic measurements)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from carb.report import figures as _figures


def _scaling_data(n_archs: int, seed: int = 0) -> pd.DataFrame:
    """SYNTHETIC measurements: ``n_archs`` architectures at batch 1, 2, 4, 8, latency
    growing with the batch, 5% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for a in range(n_archs):
        base = rng.uniform(1, 20)
        for b in (1, 2, 4, 8):
            rows.append(
                dict(
                    family="resnet",
                    block="basic",
                    depth=8 + 6 * a,
                    width=1.0,
                    early_downsample=False,
                    input_size=32,
                    classes=10,
                    batch=b,
                    precision="fp32",
                    status="ok",
                    latency_ms=base * b**0.8 * np.exp(rng.normal(0, 0.05)),
                    memory_mb=30 + b * np.exp(rng.normal(0, 0.05)),
                )
            )
    return pd.DataFrame(rows)


def test_scaling_curve_needs_enough_architectures(tmp_path):
    from carb.studies import analyses as analysis

    few = analysis.scaling(_scaling_data(3).assign(device="few"))
    many = analysis.scaling(_scaling_data(_figures.MIN_LINKED_ARCHS, seed=1).assign(device="many"))
    why = _figures.scaling_not_drawn(few.summary)
    lat = few.summary.target == "latency_ms"
    assert why[lat].iloc[0].startswith("curve not drawn: 3 architectures")
    assert (why[few.summary.target == "energy_j"] == "").all()  # no energy: its own note, no curve to refuse
    assert _figures.scaling_curves(few.profile, few.summary, tmp_path / "few.png") is None
    assert not (tmp_path / "few.png").exists()
    assert (_figures.scaling_not_drawn(many.summary) == "").all()
    both = (pd.concat([few.profile, many.profile]), pd.concat([few.summary, many.summary], ignore_index=True))
    path = _figures.scaling_curves(*both, tmp_path / "both.png")
    assert path is not None and path.stat().st_size > 1000
