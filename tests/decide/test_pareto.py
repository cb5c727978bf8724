"""Pareto front and hypervolume on small hand-made (synthetic) tables."""

import numpy as np
import pandas as pd
import pytest

from carb.decide import pareto


def five_points() -> pd.DataFrame:
    """Five hand-made configs: a, b, c on the front; d dominated by b, e by a."""
    return pd.DataFrame(
        {
            "config_id": list("abcde"),
            "latency_ms": [1.0, 2.0, 3.0, 2.5, 1.0],
            "flops_per_image": [1.0, 5.0, 9.0, 4.0, 0.5],
        }
    )


OBJ = [("latency_ms", "min"), ("flops_per_image", "max")]


def test_front_respects_directions():
    df = five_points()
    # d is dominated by b (slower, less capacity); e by a (same latency, less capacity)
    assert list(df.config_id[pareto.front_mask(df, OBJ)]) == ["a", "b", "c"]
    only_min = [("latency_ms", "min")]
    assert set(df.config_id[pareto.front_mask(df, only_min)]) == {"a", "e"}


def test_nan_never_on_front():
    df = five_points()
    df.loc[2, "latency_ms"] = np.nan
    assert "c" not in set(df.config_id[pareto.front_mask(df, OBJ)])


def test_hypervolume_and_recall():
    df = five_points()
    b = pareto.bounds_of(df, OBJ)
    full = pareto.hypervolume(df, OBJ, b)
    front = pareto.hypervolume(df[pareto.front_mask(df, OBJ)], OBJ, b)
    part = pareto.hypervolume(df[df.config_id.isin(["a", "b"])], OBJ, b)
    assert full == pytest.approx(front) and 0 < part < front
    assert pareto.pareto_recall(["a", "b", "x"], df, OBJ) == pytest.approx(2 / 3)


def test_parse_objectives():
    assert pareto.parse_objectives(["min:latency_ms", "max:flops_per_image", "memory_mb"]) == [
        ("latency_ms", "min"),
        ("flops_per_image", "max"),
        ("memory_mb", "min"),
    ]
    with pytest.raises(ValueError, match="expected min:COLUMN"):
        pareto.parse_objectives(["best:latency_ms"])
