"""A measured class whose ops each follow a roofline of their own better than the class roofline and
forest is priced by those rooflines (SYNTHETIC measurements here, from a known formula: they test the
choice and the plumbing; the shipped models' choice rests on their measured layers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb import netmodel
from carb.families import layers as L
from carb.netmodel.layers import OWN, _work, fallback_unit


def synthetic_latency_ms(rows: pd.DataFrame) -> np.ndarray:
    """Each op a roofline of its own; max pooling costs per window read, average pooling per byte."""
    cls = netmodel.op_class(rows)
    work = _work(rows, cls)
    nbytes = rows["bytes"].to_numpy(float)
    y = 0.004 + rows["flops"].to_numpy(float) / 1e7 + nbytes / 4e6
    op = rows["op"].astype(str).to_numpy()
    y[op == "maxpool"] = 0.003 + work[op == "maxpool"] / 2e8
    y[op == "avgpool"] = 0.02 + nbytes[op == "avgpool"] / 5e5
    return y


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    """The shapes (only) of layers of the shipped layers-cpu-avx2-1t dataset: every op of the layers space."""
    df = pd.read_parquet(Path(L.__file__).parents[1] / "data" / "layers-cpu-avx2-1t.parquet")
    df = df[df["op"] != "se"]
    df = pd.concat([df[df["op"] != "conv"], df[df["op"] == "conv"].sample(150, random_state=0)])
    return L.layer_frame(df).reset_index(drop=True)


@pytest.fixture(scope="module")
def fitted(rows) -> netmodel.LayerModel:
    return netmodel.LayerModel.fit(rows, synthetic_latency_ms(rows), trees=30)


def test_a_class_of_two_rooflines_is_priced_by_its_ops_own(rows, fitted) -> None:
    assert "pool" in fitted.own_ops
    pool = fitted.own_ops["pool"]
    assert pool["roofline"] < 0.9 * pool["forest"] and pool["n"] == int((netmodel.op_class(rows) == "pool").sum())
    assert {OWN + "maxpool", OWN + "avgpool"} <= set(fitted.fallback)
    m = netmodel.op_class(rows) == "pool"
    got = fitted.predict(rows[m].reset_index(drop=True))
    np.testing.assert_allclose(got, synthetic_latency_ms(rows[m].reset_index(drop=True)), rtol=1e-3)
    # still known: measured
    assert fitted.known(rows[m]).all()


def test_a_class_the_forest_prices_well_keeps_it(rows, fitted) -> None:
    # the dense convolutions follow one roofline exactly: no own-op rooflines beat it clearly
    assert "conv" not in fitted.own_ops


def test_the_choice_survives_saving(rows, fitted, tmp_path) -> None:
    back = netmodel.LayerModel.from_doc(fitted.to_doc(), fitted.forest)
    assert back.own_ops == fitted.own_ops
    np.testing.assert_allclose(back.predict(rows), fitted.predict(rows))


def test_the_shipped_model_prices_pooling_by_its_own_rooflines() -> None:
    nm = netmodel.load("layers-cpu-avx2-1t")
    assert "pool" in nm.layer.own_ops
    df = pd.read_parquet(Path(L.__file__).parents[1] / "data" / "layers-cpu-avx2-1t.parquet")
    lf = L.layer_frame(df[df["op"] == "maxpool"].head(3)).reset_index(drop=True)
    cls = netmodel.op_class(lf)
    coef = nm.layer.fallback[OWN + str(fallback_unit(lf, cls)[0])]["coef"]
    want = coef[0] + coef[1] * _work(lf, cls, nm.layer.features) + coef[2] * lf["bytes"].to_numpy(float)
    np.testing.assert_allclose(nm.layer.predict(lf), want)
