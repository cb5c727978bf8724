"""carb.calibrate(model, "here"): K chosen networks measured and the model mapped, saved and kept; the rules checked.

The measuring step here is a SYNTHETIC device (``measure=``): a network model's own prediction times 1.4, so the
map it fits is known. Real measurements of the same path run in tests/cli/test_predict_machine.py and the package
doctest.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import carb
from carb.params import InvalidParameterError
from carb.transfer import cache
from carb.transfer.here import calibrate_here

MODEL = "layers-cpu-avx2-1t"


def _device(factor: float, fail: set[int] = frozenset()):
    """A SYNTHETIC device: each network's latency is the shipped model's prediction times ``factor``."""
    nm = carb.load_model(MODEL)
    calls = []

    def measure(frame: pd.DataFrame, what: str, again: bool = False, allocator: str = "default") -> pd.DataFrame:
        from carb.families import config_from_row
        from carb.netmodel import capture_config, predict_tables

        calls.append((what, len(frame), allocator))
        preds = predict_tables([capture_config(config_from_row(r)) for r in frame.to_dict("records")], nm)
        lat = np.array([p.latency_ms for p in preds]) * factor
        status = ["error" if i in fail else "ok" for i in range(len(frame))]
        return frame.assign(
            status=status, message=["synthetic failure" if s != "ok" else "" for s in status], latency_ms=lat,
            memory_mb=[p.memory_mb for p in preds], energy_j=np.nan, sentinel_ms=0.6,
        )  # fmt: skip

    return measure, calls


def test_a_network_model_is_calibrated_saved_and_kept_for_this_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("CARB_CACHE_DIR", str(tmp_path / "c"))
    measure, calls = _device(1.4, fail={1})
    said = []
    res = calibrate_here(MODEL, samples=4, out=tmp_path / "cal", cache=True, measure=measure, say=said.append)
    # two rounds, the model's own allocator in each; the second visits the 3 measured ok in the first
    assert res.kind == "network" and calls == [("calibrating", 4, "retain"), ("calibrating, round 2 of 2", 3, "retain")]
    assert len(res.tables) == 3 and len(res.left_out) == 1 and "synthetic failure" in res.left_out[0][1]
    assert any(s.startswith("left out of the calibration") for s in said)
    assert (tmp_path / "cal" / "netmodel.json").is_file() and res.out == tmp_path / "cal"
    assert res.cached is not None and any(m.where == "cache" for m in carb.list_models())
    # the map learnt the synthetic 1.4x
    nm = carb.load_model(MODEL)
    from carb.netmodel import network_row

    rows = pd.DataFrame([network_row(t, nm.layer)[0] for t in res.tables])
    got = res.model.predict_rows(rows)["latency_ms"].to_numpy() / nm.predict_rows(rows)["latency_ms"].to_numpy()
    assert np.median(got) == pytest.approx(1.4, rel=0.1)


def test_the_front_door_returns_the_model_and_the_rules_hold(tmp_path):
    measure, _ = _device(0.8)
    nm = carb.calibrate(MODEL, "here", samples=3, measure=measure)
    assert type(nm).__name__ == "NetModel" and nm.meta["samples"] == 3
    with pytest.raises(InvalidParameterError, match="samples: must be an integer >= 2"):
        carb.calibrate(MODEL, "here", samples=1)
    with pytest.raises(ValueError, match="samples 2: a network model calibrates on at least 3"):
        calibrate_here(MODEL, samples=2, measure=measure)
    with pytest.raises(ValueError, match="precisions: for a config model"):
        calibrate_here(MODEL, samples=3, precisions=["fp32"], measure=measure)
    with pytest.raises(ValueError, match="measured: 'there'"):
        carb.calibrate(MODEL, "there")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(ValueError, match="not empty"):
        calibrate_here(MODEL, samples=3, out=tmp_path / "full", measure=measure)
    assert cache.entries() == [] or all(e.path.exists() for e in cache.entries())


def test_ops_are_priced_by_their_speed_here_against_the_convolutions(tmp_path):
    """SYNTHETIC device: layers run at their campaign latency times 0.5, pad and 3-D max pools at 0.8 (1.6x the
    convolutions' factor), networks at the model's prediction times 0.5: the op factors come out as 1.6 and 1."""
    from carb.netmodel.op_scale import op_layers

    there = op_layers(MODEL).set_index("config_id")
    slow = {"pad": 0.8, "maxpool3d": 0.8}
    networks, calls = _device(0.5)

    def measure(frame: pd.DataFrame, what: str, again: bool = False, allocator: str = "default") -> pd.DataFrame:
        if "ops" not in what and not frame["config_id"].isin(there.index).all():
            return networks(frame, what, again, allocator)
        calls.append((what, len(frame), allocator))
        t = there.loc[frame["config_id"]]
        lat = t["there_ms"].to_numpy() * t["op_unit"].map(lambda u: slow.get(u, 0.5)).to_numpy()
        return frame.assign(status="ok", message="", latency_ms=lat, memory_mb=20.0, energy_j=np.nan, sentinel_ms=0.6)

    res = calibrate_here(MODEL, samples=3, measure=measure, ops=True)
    scale = res.model.layer.op_scale
    assert scale["pad"] == pytest.approx(1.6) and scale["maxpool3d"] == pytest.approx(1.6)
    assert scale["bn"] == pytest.approx(1.0) and "conv" not in scale  # the reference itself
    assert calls[0][0] == "calibrating the ops" and res.ops is not None and res.ops["here_ms"].notna().all()
    assert res.model.meta["op_scale"]["layers"] == len(there)
    # a pad layer is priced 1.6x what the networks' factor alone makes it; a convolution as that factor makes it
    from torch import nn

    from carb import graph

    plain = calibrate_here(MODEL, samples=3, measure=networks)
    for mod, ratio in ((nn.ZeroPad2d(2), 1.6), (nn.Conv2d(16, 16, 3), 1.0)):
        t = graph.capture(mod, (1, 16, 32, 32)).layers
        got = res.model.layer.predict(t)[0] / plain.model.layer.predict(t)[0]
        assert got == pytest.approx(ratio, rel=1e-6)
    # saved and loaded back with its factors
    res2 = calibrate_here(MODEL, samples=3, measure=measure, ops=True, out=tmp_path / "ops")
    assert carb.load_model(tmp_path / "ops").layer.op_scale == pytest.approx(res2.model.layer.op_scale)
    with pytest.raises(ValueError, match="ops: 'elsewhere' has no shipped layer dataset"):
        op_layers("elsewhere")
