"""A decision never rests on extrapolation: a config the target model predicts outside its domain is never
accepted, and a model of another family or device kind than the space is refused unless asked for.

The models are fitted on SYNTHETIC data (made-up costs from the closed-form features); the predictors of the
rule tests are SYNTHETIC too.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from carb.decide import calls
from carb.decide.screen import RISKS, device_kind, foreign_reason, screen
from carb.families import features, space
from tests._helpers import SyntheticPredictor


def synthetic(space_name: str, n: int, seed: int = 0) -> pd.DataFrame:
    """SYNTHETIC dataset of ``n`` configs of a space: costs made up from the features, for code paths only."""
    s = space.load(space_name)
    df = features.compute(s.to_frame(s.sample(n, seed=seed, method="uniform")))
    rng = np.random.default_rng(seed)
    df["device"], df["status"] = "synthetic", "ok"
    df["memory_mb"] = (df.model_bytes + df.input_bytes + df.live_activation_bytes) / 1e6 * 1.3 + 20
    df["latency_ms"] = (df.flops / 2e10 + df.n_ops * 2e-6) * 1e3 * np.exp(rng.normal(0, 0.05, len(df)))
    df["energy_j"] = df.latency_ms / 1e3 * 15
    return df.reset_index(drop=True)


def fit(df: pd.DataFrame):
    from carb.model import CARB

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CARB(preset="fast", random_state=0).fit(df)


class Flagging(SyntheticPredictor):
    """SYNTHETIC predictor that flags the configs of batch above ``max_batch`` as extrapolated (None: no column)."""

    def __init__(self, max_batch: int | None = 8, **kw) -> None:
        super().__init__(**kw)
        self.max_batch = max_batch

    def predict(self, df):
        out = super().predict(df)
        if self.max_batch is not None:
            out["extrapolated"] = df["batch"].to_numpy() > self.max_batch
        return out


@pytest.fixture(scope="module")
def cands():
    return space.load("screening").to_frame()


@pytest.fixture(scope="module")
def cpu_space():
    return space.load("cpu").to_frame()


@pytest.fixture(scope="module")
def small_fp32_model():
    """CARB fitted on SYNTHETIC fp32 rows of the cpu space at batch <= 8: bf16 and batch 16/32 lie outside."""
    df = synthetic("cpu", 700)
    return fit(df[(df.precision == "fp32") & (df.batch <= 8)])


@pytest.fixture(scope="module")
def nb201_bundle(tmp_path_factory):
    """A bundle of CARB fitted on SYNTHETIC NAS-Bench-201 cells: another family than the cpu space's ResNets."""
    from carb.model import save

    d = tmp_path_factory.mktemp("foreign") / "nb201-model"
    save(fit(synthetic("nb201", 300)), d)
    return d


@pytest.fixture(scope="module")
def gpu_bundle(tmp_path_factory):
    """A bundle of CARB fitted on SYNTHETIC rows of the cpu space that records an H200 as its device."""
    from carb.model import save

    d = tmp_path_factory.mktemp("foreign") / "h200-model"
    save(fit(synthetic("cpu", 300)), d, training={"device": "h200"})
    return d


# -- the calls --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["interval", "joint"])
def test_an_extrapolated_config_is_never_accepted_by_either_rule(cands, rule):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    res = screen(cands, Flagging(), budgets, rule=rule)
    d = res.decisions
    ext = d["extrapolated"].to_numpy(bool)
    assert ext.any() and (~ext).any()
    assert not (d["decision"][ext] == "accept").any()
    # without the flag the same rule accepts some of them: the guard, not the budgets, holds them back
    raw = calls(d.drop(columns="extrapolated"), budgets, res.summary["confidence"], rule)
    assert (raw[ext] == "accept").sum() > 0
    # withheld accepts become measure; rejects stand where the interval is over a budget
    assert set(d["decision"][ext & (raw == "accept")]) == {"measure"}
    assert (d["decision"][ext & (raw == "reject")] == "reject").all()
    assert not res.feasible["extrapolated"].any() and set(res.feasible.config_id) <= set(d.config_id[~ext])
    e = res.summary["extrapolated"]
    assert e["configs"] == int(ext.sum()) and e["of"] == len(cands) and e["accept"] == 0
    assert e["measure"] + e["reject"] == e["configs"]


@pytest.mark.parametrize("risk", [r for r in RISKS if r != "decide"])
def test_two_way_risks_never_call_an_extrapolated_config_within_budget(cands, risk):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    res = screen(cands, Flagging(), budgets, risk=risk)
    d = res.decisions
    ext = d["extrapolated"].to_numpy(bool)
    assert not res.feasible["extrapolated"].any() and not res.shortlist["extrapolated"].any()
    assert set(d["decision"][ext]) <= {"measure", "reject"} and (d["decision"][ext] == "measure").any()
    # an in-domain config keeps the risk's two-way call
    plain = screen(cands, Flagging(max_batch=None), budgets, risk=risk).decisions
    assert (d["decision"][~ext].to_numpy() == plain["decision"][~ext].to_numpy()).all()


def test_the_probable_front_never_counts_an_extrapolated_config_as_sure(cands):
    # every config within budget: only the flag keeps some from being sure front members
    budgets = {"latency_ms": 1e6}
    res = screen(cands, Flagging(), budgets, shortlist_share=None)
    d = res.decisions
    ext = d["extrapolated"].to_numpy(bool)
    assert set(d["decision"][ext]) == {"measure"} and set(d["decision"][~ext]) == {"accept"}
    short = res.shortlist
    assert (short.loc[short["extrapolated"], "decision"] == "measure").all()
    assert not (short["extrapolated"] & (short["decision"] == "accept")).any()


def test_stage1_never_prunes_on_an_extrapolated_source_prediction(cands):
    budgets = {"latency_ms": 5.0}
    target = SyntheticPredictor(scale=2.0)
    plain = screen(cands, target, budgets, source=Flagging(max_batch=None, scale=1.0, noise=0.2))
    flagged = screen(cands, target, budgets, source=Flagging(max_batch=8, scale=1.0, noise=0.2))
    assert plain.summary["after_stage1"] < len(cands)
    kept = set(flagged.decisions.config_id)
    assert set(cands.config_id[cands.batch > 8]) <= kept
    assert set(plain.decisions.config_id) <= kept


def test_in_domain_screening_is_unchanged(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    for kw in ({}, {"rule": "joint"}, {"risk": "safe"}, {"risk": "point", "front": "probable"}):
        with_flag = screen(cands, Flagging(max_batch=10**9), budgets, **kw)
        without = screen(cands, SyntheticPredictor(), budgets, **kw)
        assert with_flag.summary["extrapolated"]["configs"] == 0
        a, b = with_flag.decisions, without.decisions
        assert list(a.config_id) == list(b.config_id) and list(a.decision) == list(b.decision)
        assert list(with_flag.shortlist.config_id) == list(without.shortlist.config_id)
        assert without.summary["extrapolated"] == {
            "configs": 0,
            "of": len(cands),
            "accept": 0,
            "measure": 0,
            "reject": 0,
        }
        assert not without.decisions["extrapolated"].any()


def test_a_model_fitted_on_synthetic_data_accepts_nothing_outside_its_domain(cpu_space, small_fp32_model):
    budgets = {"latency_ms": 1e6, "memory_mb": 1e6}  # every config within budget by any interval
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = screen(cpu_space, small_fp32_model, budgets)
    d = res.decisions.merge(cpu_space[["config_id", "precision", "batch"]], on="config_id")
    outside = (d.precision != "fp32") | (d.batch > 8)
    assert d.loc[outside, "extrapolated"].all()
    assert (d.loc[d.extrapolated, "decision"] == "measure").all()
    assert (d.loc[~d.extrapolated, "decision"] == "accept").all() and (~d.extrapolated).sum() > 100
    assert res.summary["decisions"]["accept"] == int((~d.extrapolated).sum())


# -- a foreign model ----------------------------------------------------------------------


def test_device_kinds():
    assert [device_kind(x) for x in ("cpu", "cpu-avx2-1t", "gold_6226", "raspi4", "pixel3")] == ["cpu"] * 5
    assert [device_kind(x) for x in ("h200", "cuda:0", "edgegpu", "titan_rtx_b256", "1080ti_b1")] == ["gpu"] * 5
    assert [device_kind(x) for x in ("edgetpu", "fpga", "eyeriss")] == ["tpu", "fpga", "asic"]
    assert [device_kind(x) for x in ("screening", "tiny", "nb201", None, "")] == [None] * 5


def test_a_model_of_another_family_is_refused_unless_allowed(cpu_space, nb201_bundle):
    from carb.model import load

    model = load(nb201_bundle)
    why = foreign_reason(cpu_space, model)
    assert why and "nb201" in why and "cifar, imagenet" in why
    with pytest.raises(ValueError, match="allow_foreign=True"):
        screen(cpu_space, model, {"latency_ms": 1e6})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = screen(cpu_space, model, {"latency_ms": 1e6}, allow_foreign=True)
    assert res.decisions["extrapolated"].all() and res.summary["decisions"]["accept"] == 0
    assert res.feasible.empty
    # its own family is in its domain
    assert foreign_reason(space.load("nb201").to_frame().head(50), model) is None


def test_a_model_of_another_device_kind_is_refused_unless_allowed(cpu_space, gpu_bundle):
    from carb.model import load

    model = load(gpu_bundle)
    assert foreign_reason(cpu_space, model) is None  # no device to compare with: not checked
    assert foreign_reason(cpu_space, model, device="h100") is None  # the same kind
    assert "h200 (a gpu)" in foreign_reason(cpu_space, model, device="cpu")
    with pytest.raises(ValueError, match="allow_foreign"):
        screen(cpu_space, model, {"latency_ms": 1e6}, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = screen(cpu_space, model, {"latency_ms": 1e6}, device="cpu", allow_foreign=True)
        inside = screen(cpu_space, model, {"latency_ms": 1e6}, device="cuda")
    assert res.decisions["extrapolated"].all() and res.summary["decisions"]["accept"] == 0
    assert inside.summary["decisions"]["accept"] > 0


def test_a_bundle_that_records_its_machine_fingerprint_is_checked_by_its_device(tmp_path, cpu_space):
    from carb.model import load, save

    fp = {"device": "cuda", "name": "NVIDIA H200"}
    save(fit(synthetic("cpu", 300)), tmp_path / "m", training={"fingerprint": fp})
    why = foreign_reason(cpu_space, load(tmp_path / "m"), device="cpu")
    assert why and "NVIDIA H200 (a gpu)" in why
    save(fit(synthetic("cpu", 300)), tmp_path / "c", training={"fingerprint": {"device": "cpu", "name": "AMD EPYC"}})
    assert foreign_reason(cpu_space, load(tmp_path / "c"), device="cpu") is None


# -- the command ---------------------------------------------------------------------------


def test_cli_refuses_a_foreign_family_model_in_one_line(tmp_path, cli, nb201_bundle):
    args = ("screen", "--space", "cpu", "--target-model", nb201_bundle, "--budget", "latency_ms=1e6")
    rc, out, err = cli(*args, "--out", tmp_path / "no")
    assert rc == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "nb201" in err and "--allow-foreign-model" in err
    assert not (tmp_path / "no" / "summary.json").exists()

    rc, out, err = cli(*args, "--allow-foreign-model", "--out", tmp_path / "yes")
    assert rc == 0, err
    n = len(space.load("cpu").to_frame())
    line = [x for x in out.splitlines() if "outside the target model's training domain" in x]
    assert len(line) == 1 and line[0].startswith(f"{n:,} of {n:,} configs (100.0%)"), out
    assert "never accepted" in line[0]
    s = json.loads((tmp_path / "yes" / "summary.json").read_text())
    assert s["decisions"]["accept"] == 0 and s["extrapolated"]["configs"] == n and "nb201" in s["foreign_model"]
    short = pd.read_csv(tmp_path / "yes" / "shortlist.csv")
    assert short["extrapolated"].all()
    assert pd.read_csv(tmp_path / "yes" / "measure.csv")["extrapolated"].all()
    # the printed table shows the flag
    table = out.split("shortlist (", 1)[1]
    assert "domain" in table and "outside" in table


def test_cli_refuses_a_model_of_another_device_kind(tmp_path, cli, gpu_bundle):
    base = ("screen", "--target-model", gpu_bundle, "--budget", "latency_ms=1e6")
    rc, _, err = cli(*base, "--space", "cpu", "--out", tmp_path / "a")
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "h200 (a gpu)" in err and "for a cpu:" in err, err
    # a space whose name says no device is not checked; --device says it
    rc, _, err = cli(*base, "--space", "tiny", "--out", tmp_path / "b")
    assert rc == 0, err
    rc, _, err = cli(*base, "--space", "tiny", "--device", "cpu", "--out", tmp_path / "c")
    assert rc == 2 and "h200" in err
    rc, out, err = cli(*base, "--space", "cpu", "--device", "cuda", "--out", tmp_path / "d")
    assert rc == 0, err


def test_cli_in_domain_prints_no_outside_line(tmp_path, cli, small_fp32_model):
    from carb.model import save

    save(small_fp32_model, tmp_path / "m")
    f = tmp_path / "inside.toml"
    f.write_text('[[grid]]\ndepth = [20]\nwidth = [0.5]\nbatch = [1, 2, 4]\nprecision = ["fp32"]\ninput_size = [32]\n')
    rc, out, err = cli(
        "screen", "--space", f, "--target-model", tmp_path / "m", "--budget", "latency_ms=1e6", "--out", tmp_path / "o"
    )
    assert rc == 0, err
    assert "outside the target model's training domain" not in out
    assert "domain" not in out.split("shortlist (", 1)[1].split("wrote ", 1)[0]  # no flag column
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert (
        s["extrapolated"]["configs"] == 0 and s["decisions"]["accept"] == s["candidates"] and s["foreign_model"] is None
    )
