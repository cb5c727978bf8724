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
