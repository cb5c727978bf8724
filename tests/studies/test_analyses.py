"""carb.studies.analyses on SYNTHETIC data (made-up costs with known growth factors and device
ratios), plus the transfer helper on HELP's public FBNet GPU latency."""

import numpy as np
import pandas as pd
import pytest

from carb.families import space
from carb.families.features import compute
from carb.model.gbm import GBMRegressor
from carb.studies import analyses as analysis
from carb.studies import help_fbnet

BATCHES = [1, 2, 4, 8, 16, 32, 64, 128]


def synthetic_scaling_data(seed=0):
    """SYNTHETIC: every cpu-space architecture at a few batch sizes, costs multiplicative in an
    architecture factor and a batch curve (so the within-architecture profile is exact):
    latency = c * (1 + b/8) ms, energy = e * (0.5 + b) J, memory = m * (1 + 0.05 b) MB.
    The sampling is biased like real campaigns: big architectures mostly at small batches,
    so plain medians per batch mix different architectures and are off."""
    rng = np.random.default_rng(seed)
    archs = space.load("cpu").to_frame()
    archs = archs[archs.batch == 1].drop(columns=["batch", "config_id"]).reset_index(drop=True)
    size = np.log(compute(archs.assign(batch=1)).flops.to_numpy(float))
    size = (size - size.min()) / np.ptp(size)  # 0 (smallest) .. 1 (largest)
    rows = []
    for i, a in archs.iterrows():
        # big architectures are measured at small batches, small ones at large batches
        p = np.exp(-3 * size[i] * np.log2(BATCHES) / 7)
        for b in rng.choice(BATCHES, size=rng.integers(1, 4), replace=False, p=p / p.sum()):
            rows.append({**a.to_dict(), "batch": int(b), "arch_size": size[i]})
    df = pd.DataFrame(rows)
    c = np.exp(3 * df.arch_size)
    b = df.batch.to_numpy(float)
    return df.assign(
        device="synthetic",
        status="ok",
        latency_ms=c * (1 + b / 8),
        energy_j=0.1 * c * (0.5 + b),
        memory_mb=20 * np.exp(df.arch_size) * (1 + 0.05 * b),
    )


@pytest.fixture(scope="module")
def scal():
    return synthetic_scaling_data()


def test_scaling_recovers_known_growth_factors(scal):
    r = analysis.scaling(scal)
    s = r.summary.set_index("target")
    assert s.loc["latency_ms", "factor"] == pytest.approx((1 + 128 / 8) / (1 + 1 / 8), rel=1e-6)
    assert s.loc["energy_j", "factor"] == pytest.approx(128.5 / 1.5, rel=1e-6)
    assert s.loc["memory_mb", "factor"] == pytest.approx((1 + 0.05 * 128) / 1.05, rel=1e-6)
    for t in ("latency_ms", "energy_j", "memory_mb"):
        assert s.loc[t, "per_image_gain"] == pytest.approx(128 / s.loc[t, "factor"], rel=1e-9)
        assert s.loc[t, "n_archs_linked"] > 100 and s.loc[t, "note"] == ""
    # per-image latency c (1/b + 1/8) is within 10% of its lowest (at 128) from b >= 47.4: 64
    assert s.loc["latency_ms", "saturation_batch"] == 64
    # the knee of 1 + b/8 is at b = 8: launch-bound below (slope ~0), throughput-bound above (~1)
    assert 4 <= s.loc["latency_ms", "boundary_batch"] <= 16
    assert s.loc["latency_ms", "slope_launch"] < 0.35 and s.loc["latency_ms", "slope_throughput"] > 0.75
    # the profile's per-image cost falls monotonically for latency, and the columns agree
    p = r.profile[r.profile.target == "latency_ms"].sort_values("batch")
    assert list(p.batch) == BATCHES and (np.diff(p.cost_per_image) < 0).all()
    assert np.allclose(p.cost_per_image * p.batch, p.cost)
    assert p.elasticity.iloc[1:].between(0, 1).all()


def test_plain_medians_would_be_biased(scal):
    """Why the within-architecture profile: on this sampling the plain medians per batch
    give a latency factor far from the true 15.1x."""
    med = scal.groupby("batch").latency_ms.median()
    naive = med.loc[128] / med.loc[1]
    assert abs(naive / ((1 + 16) / 1.125) - 1) > 0.3
    p = analysis.scaling(scal).profile
    assert not np.allclose(p.cost, p.median_measured, rtol=0.05)


def test_scaling_one_regime_and_missing_targets():
    """A pure power law (cost ~ b) is one regime: no boundary; an all-NaN target (a CPU
    without an energy sensor) is reported, not an error."""
    df = synthetic_scaling_data(seed=1)
    df = df.assign(latency_ms=df.latency_ms / (1 + df.batch / 8) * df.batch, energy_j=np.nan)
    s = analysis.scaling(df).summary.set_index("target")
    assert s.loc["latency_ms", "factor"] == pytest.approx(128, rel=1e-6)
    assert np.isnan(s.loc["latency_ms", "boundary_batch"])
    assert s.loc["latency_ms", "slope_launch"] == pytest.approx(1, abs=1e-6)
    assert "not measured" in s.loc["energy_j", "note"] and np.isnan(s.loc["energy_j", "factor"])


def test_scaling_without_linked_architectures_falls_back_to_medians(scal):
    """Each architecture at one batch size only: the plain medians, said in a note."""
    one = scal.drop_duplicates([c for c in analysis.ARCH_COLUMNS], keep="first")
    s = analysis.scaling(one).summary.set_index("target")
    med = one.groupby("batch").latency_ms.median()
    assert s.loc["latency_ms", "n_archs_linked"] == 0 and "plain medians" in s.loc["latency_ms", "note"]
    assert s.loc["latency_ms", "factor"] == pytest.approx(med.iloc[-1] / med.iloc[0])


def test_scaling_per_device_and_errors(scal):
    two = pd.concat([scal, scal.assign(device="synthetic-2x", latency_ms=2 * scal.latency_ms)])
    r = analysis.scaling(two)
    assert sorted(set(r.summary.device)) == ["synthetic", "synthetic-2x"]
    f = r.summary[r.summary.target == "latency_ms"].set_index("device").factor
    assert f["synthetic"] == pytest.approx(f["synthetic-2x"], rel=1e-9)  # a constant factor does not change growth
    one = analysis.scaling(two, device="synthetic-2x")
    assert set(one.summary.device) == {"synthetic-2x"}
    with pytest.raises(ValueError, match="not in the data"):
        analysis.scaling(two, device="nope")
    with pytest.raises(ValueError, match="batch"):
        analysis.scaling(scal.drop(columns="batch"))
    assert "factor" in r.to_dict()["definitions"]
    # by precision: one profile per precision, the same growth here (the synthetic costs ignore it)
    bp = analysis.scaling(scal, by="precision").summary
    assert sorted(set(bp.precision)) == ["bf16", "fp32"] and len(bp) == 2 * 3
    assert bp[bp.target == "energy_j"].factor.to_numpy() == pytest.approx([128.5 / 1.5] * 2, rel=1e-6)
    with pytest.raises(ValueError, match="by"):
        analysis.scaling(scal, by="nope")


# -- transfer --------------------------------------------------------------------------------


def synthetic_device_pair(n=400, seed=0):
    """SYNTHETIC: a table of made-up archs with two numeric inputs; device A's latency is a
    smooth function of them, B = 2 x A exactly, C = A ** 0.5; memory B = 0.9 x A."""
    rng = np.random.default_rng(seed)
    x1, x2 = rng.uniform(0, 1, n), rng.uniform(0, 1, n)
    base = pd.DataFrame({"arch_id": np.arange(n), "x1": x1, "x2": x2})
    lat = np.exp(1 + 2 * x1 + x2**2)
    mem = 30 + 100 * x2
    return {
        "A": base.assign(latency_ms=lat, memory_mb=mem),
        "B": base.assign(latency_ms=2 * lat, memory_mb=0.9 * mem),
        "C": base.assign(latency_ms=np.sqrt(lat), memory_mb=mem),
    }


def test_transfer_matrix_on_synthetic_pairs():
    data = synthetic_device_pair()
    r = analysis.transfer(data, model_factory=lambda: GBMRegressor(interval_folds=0, n_estimators=150))
    assert r.key == "arch_id" and r.devices == ["A", "B", "C"]
    assert len(r.matrix) == 3 * 3 * 2 and (r.matrix.n_test > 80).all()
    m = r.matrix.set_index(["train", "test", "target"])
    lat = lambda a, b, k: m.loc[(a, b, "latency_ms"), k]  # noqa: E731
    # in-device accuracy is high; A's model misses B's factor 2 but ranks and shapes it right
    assert lat("A", "A", "r2_log") > 0.95 and lat("B", "B", "r2_log") > 0.95
    assert lat("A", "B", "bias") == pytest.approx(0.5 * lat("A", "A", "bias"), rel=1e-9)
    assert lat("A", "B", "r2_log") < 0.5 * lat("A", "A", "r2_log")
    assert lat("A", "B", "r2_log_factor") == pytest.approx(lat("A", "A", "r2_log_factor"), abs=1e-9)
    assert lat("A", "B", "spearman") == pytest.approx(lat("A", "A", "spearman"), abs=1e-12)
    # measured relations: exact factors and log-log slopes
    p = r.pairs.set_index(["a", "b", "target"])
    assert p.loc[("A", "B", "latency_ms"), "factor"] == pytest.approx(2.0, rel=1e-12)
    assert p.loc[("B", "A", "latency_ms"), "factor"] == pytest.approx(0.5, rel=1e-12)
    assert p.loc[("A", "B", "memory_mb"), "factor"] == pytest.approx(0.9, rel=1e-12)
    assert p.loc[("A", "B", "latency_ms"), "loglog_slope"] == pytest.approx(1.0, abs=1e-9)
    assert p.loc[("A", "C", "latency_ms"), "loglog_slope"] == pytest.approx(0.5, abs=1e-9)
    assert p.loc[("A", "B", "latency_ms"), "n_common"] == 400
    piv = r.pivot("spearman", "latency_ms")
    assert piv.shape == (3, 3) and list(piv.index) == ["A", "B", "C"]
    assert r.factors("latency_ms").loc["A", "B"] == pytest.approx(2.0)


def test_transfer_never_trains_on_test_configs():
    data = synthetic_device_pair(n=200)
    seen = {"fit": [], "predict": []}

    class Spy:
        targets_ = ["latency_ms"]

        def fit(self, df):
            seen["fit"].append(set(df.arch_id))
            return self

        def predict(self, df):
            seen["predict"].append(set(df.arch_id))
            return pd.DataFrame({"latency_ms": np.ones(len(df))}, index=df.index)

    r = analysis.transfer(
        {"A": data["A"], "B": data["B"].iloc[50:]}, targets=["latency_ms"], model_factory=Spy, test_fraction=0.3, seed=3
    )
    train = set().union(*seen["fit"])
    test = set().union(*seen["predict"])
    assert train and test and not (train & test)
    assert 0.2 < len(test) / 200 < 0.4
    # B lacks the first 50 archs: the pair statistics use the configs measured on both only
    assert r.pairs.set_index(["a", "b"]).loc[("A", "B"), "n_common"] == 150


def test_transfer_with_carb_on_synthetic_config_datasets():
    """The default model (CARB fast) on two SYNTHETIC CARB datasets with a known device
    factor; energy is all NaN on both (CPUs without a sensor): scored as missing."""
    cands = space.load("cpu").to_frame().sample(160, random_state=0).reset_index(drop=True)
    f = compute(cands)
    lat = 0.05 + f.flops.to_numpy(float) / 3e8
    mem = 20 + (f.weight_bytes + f.live_activation_bytes).to_numpy(float) / 1e6
    a = cands.assign(device="synthetic-a", status="ok", latency_ms=lat, memory_mb=mem, energy_j=np.nan)
    b = a.assign(device="synthetic-b", latency_ms=1.7 * lat)
    r = analysis.transfer({"synthetic-a": a, "synthetic-b": b})
    assert r.key == "config_id" and set(r.matrix.target) == {"latency_ms", "memory_mb"}
    p = r.pairs.set_index(["a", "b", "target"])
    assert p.loc[("synthetic-a", "synthetic-b", "latency_ms"), "factor"] == pytest.approx(1.7)
    m = r.matrix.set_index(["train", "test", "target"])
    assert m.loc[("synthetic-a", "synthetic-a", "latency_ms"), "r2_log"] > 0.9
    assert m.loc[("synthetic-a", "synthetic-b", "latency_ms"), "bias"] == pytest.approx(1 / 1.7, rel=0.15)


def test_transfer_errors():
    with pytest.raises(ValueError, match="at least one"):
        analysis.transfer({})
    with pytest.raises(ValueError, match="match"):
        analysis.transfer({"A": pd.DataFrame({"x": [1.0], "latency_ms": [1.0]})})
    with pytest.raises(ValueError, match="test_fraction"):
        analysis.transfer(synthetic_device_pair(), test_fraction=1.5)


def test_help_fbnet_gpu_transfer():
    """Real public data: latency of 600 FBNet archs on HELP's five batch-1 GPUs. Ranks carry
    over between GPUs almost perfectly; values need the device factor."""
    r = help_fbnet.help_fbnet_transfer(n_archs=600)
    assert r.devices == list(help_fbnet.HELP_GPU_BATCH1)
    sp = r.pivot("spearman", "latency_ms")
    assert (sp.to_numpy() > 0.85).all()
    diag = np.diag(r.pivot("r2_log", "latency_ms").to_numpy())
    assert (diag > 0.8).all()
    f = r.factors("latency_ms")
    # the 2080 Ti is faster than the 1080 Ti on these networks
    assert 0.4 < f.loc["1080ti_1", "2080ti_1"] < 0.95
    assert f.loc["2080ti_1", "1080ti_1"] == pytest.approx(1 / f.loc["1080ti_1", "2080ti_1"], rel=0.05)


# -- importance, front, labels ------------------------------------------------------------------


class BatchOnly:
    """SYNTHETIC predictor: latency depends on the batch only."""

    targets_ = ["latency_ms"]

    def predict(self, df):
        return pd.DataFrame({"latency_ms": 2.0 * df["batch"].to_numpy(float)}, index=df.index)


def test_importance_finds_the_only_input_used():
    cands = space.load("cpu").to_frame().sample(200, random_state=1).reset_index(drop=True)
    df = cands.assign(latency_ms=2.0 * cands.batch)
    imp = analysis.importance(BatchOnly(), df).set_index("input").importance
    assert imp["batch"] > 0.5
    assert imp.drop("batch").abs().max() == 0.0
    assert set(imp.index) == {"architecture", "input_size", "batch", "precision"}


def test_measured_front_and_labels():
    cands = space.load("cpu").to_frame().sample(120, random_state=2).reset_index(drop=True)
    f = compute(cands)
    df = cands.assign(
        status="ok", latency_ms=f.flops / 1e7 + 0.1, memory_mb=20 + f.live_activation_bytes / 1e6, energy_j=np.nan
    ).join(f[["flops_per_image"]])
    pts, front, objs = analysis.measured_front(df)
    assert [c for c, _ in objs] == ["latency_ms", "memory_mb", "flops_per_image"]  # energy: no values
    assert 0 < len(front) < len(pts) and list(front["rank"]) == list(range(1, len(front) + 1))
    lab = analysis.config_label(pts)
    assert lab.iloc[0].startswith(pts.family.iloc[0]) and f"b{pts.batch.iloc[0]}" in lab.iloc[0]
