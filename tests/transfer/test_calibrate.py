"""Few-shot calibration with SYNTHETIC devices (costs made up from the static features)."""

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from carb.families import space
from carb.families.features import compute
from carb.transfer.calibrate import choose_samples, fit_calibrated


class Device:
    """Made-up device: latency = scale * flops^p * batch^g; memory from bytes."""

    def __init__(self, scale, p=1.0, g=0.0, noise=0.0, seed=0):
        self.scale, self.p, self.g, self.noise, self.seed = scale, p, g, noise, seed
        self.targets_ = ["latency_ms", "memory_mb"]

    def truth(self, df):
        f = compute(df)
        rng = np.random.default_rng(self.seed)
        lat = self.scale * (f.flops.to_numpy() / 1e6) ** self.p * f.batch.to_numpy() ** self.g
        lat = lat * np.exp(rng.normal(0, self.noise, len(df)))
        mem = 20 + (f.weight_bytes + f.live_activation_bytes).to_numpy() / 1e6
        return pd.DataFrame({"latency_ms": lat, "memory_mb": mem}, index=df.index)

    def predict(self, df):
        t = self.truth(df)
        for c in list(t.columns):
            t[f"{c}_lo"], t[f"{c}_hi"] = t[c] * 0.9, t[c] * 1.1
        return t


@pytest.fixture(scope="module")
def cands():
    return space.load("cpu").to_frame()


def test_sampler_spreads_over_cost_and_space(cands):
    src = Device(0.01)
    pick = choose_samples(cands, src, 10, seed=0)
    assert len(pick) == 10 and pick.config_id.is_unique
    lat = src.predict(pick).latency_ms
    all_lat = src.predict(cands).latency_ms
    # one per decile of predicted cost: covers the range
    assert lat.min() <= all_lat.quantile(0.1) and lat.max() >= all_lat.quantile(0.9)
    assert pick.batch.nunique() >= 3
    assert choose_samples(cands, src, 10, seed=0).config_id.tolist() == pick.config_id.tolist()


@pytest.mark.parametrize("k", [6, 12])
def test_sampler_reaches_each_precision_at_its_low_memory_batch_1_corner_and_the_largest_batch(cands, k):
    """SYNTHETIC source over the cpu space (fp32 and bf16, batches 1-32): the K hold, per
    precision, the batch-1 config of least predicted memory (where a shortlist under budgets
    lies), and a config of the largest batch, without growing past k."""
    src = Device(0.01)
    pick = choose_samples(cands, src, k, seed=0)
    assert len(pick) == k and pick.config_id.is_unique
    mem = src.predict(cands).memory_mb
    for p in ("bf16", "fp32"):
        corner = mem[(cands.precision == p) & (cands.batch == 1)].idxmin()
        assert corner in pick.index, p
    assert pick.batch.max() == cands.batch.max()
    lat = src.predict(pick).latency_ms
    assert lat.max() >= src.predict(cands).latency_ms.quantile(0.85)  # the rest still spread up the cost range
    # one precision: its corner and the largest batch, the rest spread as before
    fp32 = cands[cands.precision == "fp32"]
    one = choose_samples(fp32, src, k, seed=0)
    assert set(one.precision) == {"fp32"} and one.batch.min() == 1 and one.batch.max() == 32
    assert mem[fp32[fp32.batch == 1].index].idxmin() in one.index


def test_sampler_without_corners_takes_one_config_per_cost_bin(cands):
    """SYNTHETIC source: ``corners=False`` (an ablation) keeps k configs, one in each quantile bin of
    predicted latency, and so leaves the corners to chance; with them the same k hold them."""
    src = Device(0.01)
    k = 12
    plain = choose_samples(cands, src, k, seed=0, corners=False)
    assert len(plain) == k and plain.config_id.is_unique
    rank = src.predict(cands).latency_ms.rank(method="first").astype(int) - 1
    bins = np.array_split(np.arange(len(cands)), k)
    bin_of = {int(r): i for i, b in enumerate(bins) for r in b}
    assert sorted(bin_of[int(rank[i])] for i in plain.index) == list(range(k))
    mem = src.predict(cands).memory_mb
    corners = {mem[(cands.precision == p) & (cands.batch == 1)].idxmin() for p in ("bf16", "fp32")}
    assert corners <= set(choose_samples(cands, src, k, seed=0).index)
    assert not corners <= set(plain.index)


@pytest.mark.parametrize("k", [5, 10, 20])
def test_calibration_recovers_a_new_device(cands, k):
    src = Device(0.01, p=1.0, g=0.0)
    tgt = Device(0.03, p=0.9, g=-0.15, noise=0.05, seed=1)  # 3x slower, flatter in load
    pick = choose_samples(cands, src, k, seed=0)
    measured = pick.join(tgt.truth(pick))
    model = fit_calibrated(src, measured)
    rest = cands[~cands.config_id.isin(pick.config_id)]
    pred, truth = model.predict(rest), tgt.truth(rest)
    rho = spearmanr(pred.latency_ms, truth.latency_ms).statistic
    mape = np.mean(np.abs(pred.latency_ms / truth.latency_ms - 1))
    raw_mape = np.mean(np.abs(src.predict(rest).latency_ms / truth.latency_ms - 1))
    assert rho > 0.95
    if k >= 8:  # with the batch term the map can express the target's flatter load scaling
        assert mape < 0.25 and mape < 0.7 * raw_mape
    cover = np.mean((truth.latency_ms >= pred.latency_ms_lo) & (truth.latency_ms <= pred.latency_ms_hi))
    assert cover > 0.7
    assert set(model.targets_) == {"latency_ms", "memory_mb"}


def test_calibration_needs_measurements(cands):
    src = Device(0.01)
    one = cands.head(1).assign(latency_ms=1.0, memory_mb=20.0, status="ok")
    with pytest.raises(ValueError, match="at least 2"):
        fit_calibrated(src, one)
    with pytest.raises(ValueError, match="too few"):
        choose_samples(cands, src, 1)


def test_nnls_map_is_carb_transfers_and_round_trips(cands, tmp_path):
    """`method="nnls"`: the HELP-style few-shot map of carb.transfer over the source model
    (synthetic devices); it predicts, gives intervals, and is saved and loaded as data."""
    import json

    from carb.model import CARB
    from carb.transfer.calibrate import NnlsMap, load_predictor

    train = cands.sample(300, random_state=0)
    with pytest.warns(UserWarning, match="not training energy_j"):  # the synthetic device has no energy
        src_model = CARB(preset="fast").fit(train.join(Device(0.01).truth(train)))
    tgt = Device(0.03, p=1.0, noise=0.03, seed=2)
    pick = choose_samples(cands, src_model, 12, seed=0)
    model = fit_calibrated(src_model, pick.join(tgt.truth(pick)), method="nnls")
    assert all(isinstance(m, NnlsMap) for m in model.maps_.values()) and model.meta["method"] == "nnls"
    rest = cands[~cands.config_id.isin(pick.config_id)].sample(400, random_state=1)
    pred, truth = model.predict(rest), tgt.truth(rest)
    assert spearmanr(pred.latency_ms, truth.latency_ms).statistic > 0.9
    assert (pred.latency_ms_lo <= pred.latency_ms).all() and (pred.latency_ms <= pred.latency_ms_hi).all()
    src_dir = tmp_path / "src"
    from carb.model import save

    save(src_model, src_dir)
    model.save(tmp_path / "cal", source_dir=src_dir)
    doc = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert doc["maps"]["latency_ms"]["kind"] == "nnls"
    again = load_predictor(tmp_path / "cal").predict(rest)
    np.testing.assert_allclose(again.latency_ms, pred.latency_ms, rtol=1e-6)
    with pytest.raises(ValueError, match="expected 'log' or 'nnls'"):
        fit_calibrated(src_model, pick.join(tgt.truth(pick)), method="magic")


def test_log_map_holds_its_ratio_outside_the_range_it_was_fitted_on():
    """SYNTHETIC costs: target = 2 s^0.8 measured between 2 and 600 ms; below and above,
    the map holds the ratio of its nearer end instead of carrying its slope on."""
    from carb.transfer import fit_log_map

    s = np.geomspace(2.0, 600.0, 12)
    y = 2.0 * s**0.8
    m = fit_log_map(s, y, np.ones_like(s))
    assert m.s_range == pytest.approx((2.0, 600.0)) and m.coef[1] == pytest.approx(0.8)
    inside = np.array([3.0, 50.0, 500.0])
    np.testing.assert_allclose(m.apply(inside, np.ones(3)), 2.0 * inside**0.8, rtol=1e-9)
    ratio_lo, ratio_hi = 2.0 * 2.0**0.8 / 2.0, 2.0 * 600.0**0.8 / 600.0
    np.testing.assert_allclose(m.apply(np.array([0.4, 1.0]), np.ones(2)), ratio_lo * np.array([0.4, 1.0]), rtol=1e-9)
    np.testing.assert_allclose(m.apply(np.array([3000.0]), np.ones(1)), ratio_hi * 3000.0, rtol=1e-9)
    m.s_range = None  # without its range the slope carries on outside it
    np.testing.assert_allclose(m.apply(np.array([0.4]), np.ones(1)), 2.0 * 0.4**0.8, rtol=1e-9)


def test_log_map_range_round_trips_and_old_files_load(cands, tmp_path):
    """SYNTHETIC devices: the calibrated model keeps the range it was fitted on through
    save/load; a calibration.json written before the range was kept loads without one."""
    from carb.model import CARB, save
    from carb.transfer.calibrate import load_predictor

    train = cands.sample(300, random_state=0)
    with pytest.warns(UserWarning, match="not training energy_j"):
        src_model = CARB(preset="fast").fit(train.join(Device(0.01).truth(train)))
    tgt = Device(0.03, p=0.9, noise=0.02, seed=3)
    pick = choose_samples(cands, src_model, 12, seed=0)
    model = fit_calibrated(src_model, pick.join(tgt.truth(pick)))
    lm = model.maps_["latency_ms"]
    src_k = src_model.predict(pick)["latency_ms"].to_numpy()
    assert lm.s_range == pytest.approx((src_k.min(), src_k.max()))
    save(src_model, tmp_path / "src")
    model.save(tmp_path / "cal", source_dir=tmp_path / "src")
    # a sample with the space's ends, beyond the K's range of source predictions
    by_cost = src_model.predict(cands)["latency_ms"].sort_values().index
    rest = cands.loc[cands.sample(300, random_state=4).index.union(by_cost[:5]).union(by_cost[-5:])]
    again = load_predictor(tmp_path / "cal")
    assert again.maps_["latency_ms"].s_range == pytest.approx(lm.s_range)
    np.testing.assert_allclose(again.predict(rest).latency_ms, model.predict(rest).latency_ms, rtol=1e-9)
    # an old file: no s_range key (re-sealed with its checksum, as the old code wrote it)
    _as_written_before(tmp_path / "cal", "s_range")
    old = load_predictor(tmp_path / "cal")
    assert old.maps_["latency_ms"].s_range is None
    carried = model.predict(rest)  # the same maps with the slope carried on
    for m in model.maps_.values():
        m.s_range = None
    np.testing.assert_allclose(old.predict(rest).latency_ms, model.predict(rest).latency_ms, rtol=1e-9)
    assert not np.allclose(carried.latency_ms, model.predict(rest).latency_ms)  # the range mattered here


def test_log_map_additive_form_is_chosen_for_a_fixed_offset_only():
    """SYNTHETIC costs: a target holding a fixed 0.5 more than the source (y = s + 0.5) is
    fitted by the additive map when it is offered, a pure factor (y = 1.3 s) is not; and
    without ``additive`` no map adds a constant."""
    from carb.transfer import fit_log_map

    rng = np.random.default_rng(0)
    s = np.geomspace(20.0, 200.0, 20)
    y = (s + 0.5) * np.exp(rng.normal(0, 0.001, 20))
    m = fit_log_map(s, y, np.ones_like(s), additive=True)
    assert m.add == pytest.approx(0.5, abs=0.05) and m.coef == [0.0, 1.0]
    small = np.array([5.0, 10.0])  # below the K's range the constant still holds
    np.testing.assert_allclose(m.apply(small, np.ones(2)), small + m.add, rtol=1e-9)
    assert fit_log_map(s, y, np.ones_like(s)).add == 0.0
    f = fit_log_map(s, 1.3 * s * np.exp(rng.normal(0, 0.001, 20)), np.ones_like(s), additive=True)
    assert f.add == 0.0 and f.coef[0] == pytest.approx(np.log(1.3), abs=0.01)
    # a negative constant never takes a cost to zero far below the K points
    neg = fit_log_map(s, s - 10.0, np.ones_like(s), additive=True)
    assert neg.add == pytest.approx(-10.0) and (neg.apply(np.array([1.0, 5.0]), np.ones(2)) > 0).all()


def test_calibrated_memory_offset_round_trips_and_old_files_load(cands, tmp_path):
    """SYNTHETIC devices: memory measured a fixed 0.6 MB above the source's is calibrated
    by the additive map (latency is never offered it); the constant survives save/load,
    and a calibration.json without ``add`` (written before it existed) loads with none."""
    from carb.model import CARB, save
    from carb.transfer.calibrate import load_predictor

    train = cands.sample(300, random_state=0)
    src_dev = Device(0.01)
    with pytest.warns(UserWarning, match="not training energy_j"):
        src_model = CARB(preset="fast").fit(train.join(src_dev.truth(train)))
    pick = choose_samples(cands, src_model, 12, seed=0)
    meas = pick.join(src_model.predict(pick)[["latency_ms", "memory_mb"]])
    meas["memory_mb"] += 0.6  # a second runtime's fixed buffers, say
    meas["latency_ms"] += 0.6  # the same shift on latency: not offered the additive map there
    model = fit_calibrated(src_model, meas)
    assert model.maps_["memory_mb"].add == pytest.approx(0.6, abs=1e-6)
    assert model.maps_["latency_ms"].add == 0.0
    save(src_model, tmp_path / "src")
    model.save(tmp_path / "cal", source_dir=tmp_path / "src")
    rest = cands.sample(200, random_state=4)
    want = src_model.predict(rest).memory_mb.to_numpy() + 0.6
    np.testing.assert_allclose(load_predictor(tmp_path / "cal").predict(rest).memory_mb, want, rtol=1e-6)
    _as_written_before(tmp_path / "cal", "add")
    assert load_predictor(tmp_path / "cal").maps_["memory_mb"].add == 0.0


def _as_written_before(cal_dir, key):
    """Make a calibrated model's calibration.json look as written before ``key`` existed:
    the key dropped from every map, re-sealed with its checksum as the old code wrote it."""
    import json

    from carb.model import doc_checksum

    f = cal_dir / "calibration.json"
    doc = json.loads(f.read_text())
    for m in doc["maps"].values():
        m.pop(key, None)
    doc["calibration_sha256"] = doc_checksum(doc, "calibration_sha256")
    f.write_text(json.dumps(doc))


def test_a_precision_outside_the_k_is_flagged(cands):
    src, tgt = Device(0.01), Device(0.03, seed=1)
    fp32 = cands[cands.precision == "fp32"]
    pick = choose_samples(fp32, src, 8, seed=0)
    model = fit_calibrated(src, pick.join(tgt.truth(pick)))
    assert model.meta["precisions"] == ["fp32"]
    with pytest.warns(UserWarning, match=r"precision its K measurements did not include \(bf16; calibrated on fp32\)"):
        pred = model.predict(cands)
    bf16 = (cands.precision != "fp32").to_numpy()
    assert pred["extrapolated"].to_numpy()[bf16].all()
    # an fp32 row is flagged only beyond the K's range (source prediction or batch)
    src_pred = src.predict(cands)
    beyond = np.zeros(len(cands), bool)
    for t, r in model.reach_.items():
        beyond |= r.beyond(src_pred[t].to_numpy(), cands.batch.to_numpy()) > 0
    assert (pred["extrapolated"].to_numpy()[~bf16] == beyond[~bf16]).all() and not beyond[~bf16].all()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the K's own precision, inside the K's range: no warning, no flag
        assert not model.predict(pick)["extrapolated"].any()


def test_log_map_max_terms_limits_the_candidate_maps():
    """SYNTHETIC costs on a line in log (y = 2 s^1.3, batches 1..4): the full map fits the
    slope; ``max_terms=1`` keeps to the identity or one factor, ``max_terms=2`` to the line."""
    from carb.transfer import fit_log_map

    rng = np.random.default_rng(1)
    s = np.geomspace(1.0, 100.0, 12)
    batch = np.tile([1.0, 2.0, 4.0], 4)
    y = 2.0 * s**1.3 * np.exp(rng.normal(0, 0.01, 12))
    assert fit_log_map(s, y, batch).coef[1] == pytest.approx(1.3, abs=0.05)
    one = fit_log_map(s, y, batch, max_terms=1)
    assert len(one.coef) == 2 and one.coef[1] == 1.0
    two = fit_log_map(s, y * batch**0.5, batch, max_terms=2)
    assert len(two.coef) == 2 and two.coef[1] != 1.0  # the line, never the batch term


def test_a_refitted_source_and_its_calibrations_reproduce():
    """A source model refitted on the same rows, and calibrations fitted on the same K (active
    and random choice; log and NNLS maps), predict the same to the last digit: the learners are
    deterministic. Rows from the shipped cpu-1t and cpu-2t datasets."""
    import warnings

    from carb import datasets
    from carb.model import CARB

    src = datasets.load("cpu-1t").head(400)
    tgt = datasets.load("cpu-2t")
    tgt = tgt[tgt.status == "ok"].head(150).reset_index(drop=True)
    runs = []
    for _ in range(2):  # the source model is refitted too
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a few cpu-2t rows lie outside cpu-1t's training domain
            source = CARB(preset="fast", random_state=0, n_jobs=1).fit(src)
            active = choose_samples(tgt, source, 5, seed=0)
            drawn = tgt.sample(5, random_state=0)
            runs.append(
                [
                    source.predict(tgt),
                    fit_calibrated(source, active).predict(tgt),
                    fit_calibrated(source, drawn).predict(tgt),
                    fit_calibrated(source, active, method="nnls").predict(tgt),
                ]
            )
    for first, again in zip(*runs):
        pd.testing.assert_frame_equal(first, again)


def test_a_calibrated_model_carries_the_extrapolated_flag(tmp_path) -> None:
    """Synthetic rows (not measurements): a source trained on batch <= 8 only, calibrated,
    then asked about batch 256: the flag of the source comes through the calibration."""
    import warnings

    import numpy as np

    from carb.families import space
    from carb.model import CARB
    from carb.transfer.calibrate import fit_calibrated

    frame = space.load("cpu").to_frame()
    small = frame[frame.batch <= 8].head(80).reset_index(drop=True)
    df = small.assign(latency_ms=small.batch * small.depth * 0.01, memory_mb=10 + small.batch * 0.5, status="ok")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = CARB(preset="fast").fit(df)
        cal = fit_calibrated(src, df.head(6))
        big = frame[frame.batch > 8].head(3).reset_index(drop=True)
        p = cal.predict(big)
    assert "extrapolated" in p.columns and bool(np.all(p["extrapolated"]))


def _halfwidth(pred, t):
    return np.log(pred[f"{t}_hi"].to_numpy() / pred[f"{t}_lo"].to_numpy()) / 2


def test_a_prediction_beyond_the_k_range_is_flagged_and_widened_by_the_measured_extrapolation_error(cands):
    """SYNTHETIC devices: K = 10 measured among mid-cost configs at batches 2-8 only, on a
    target whose growth with cost differs from the source's (y ~ s^0.8). Configs below or
    above the K's source predictions, or at a batch outside theirs, are flagged
    ``extrapolated`` and their intervals widen with the distance; configs inside keep the
    in-range interval. The widening is measured on the K: a target that is an exact factor
    of the source extrapolates without error and gets none."""
    import copy

    src = Device(0.01)
    tgt = Device(0.03, p=0.8, noise=0.02, seed=1)
    lat = src.predict(cands).latency_ms
    mid = cands[lat.between(lat.quantile(0.3), lat.quantile(0.7)) & cands.batch.between(2, 8)]
    pick = choose_samples(mid, src, 10, seed=0)
    model = fit_calibrated(src, pick.join(tgt.truth(pick)))
    reach = model.reach_["latency_ms"]
    assert reach.n > 0 and reach.rate > 0 and reach.batch_range == (2.0, 8.0)
    bare = copy.copy(model)
    bare.reach_ = {}  # the same maps without their reach
    with pytest.warns(UserWarning, match="beyond the range its K measurements covered"):
        pred = model.predict(cands)
    plain = bare.predict(cands)
    s = src.predict(cands).latency_ms.to_numpy()
    d = reach.beyond(s, cands.batch.to_numpy())
    out = pred["extrapolated"].to_numpy()
    lo, hi = reach.s_range
    assert out[s < lo].all() and out[s > hi].all() and out[(cands.batch == 32).to_numpy()].all()
    inside = ~out
    assert inside.any() and (d[inside] == 0).all()
    np.testing.assert_allclose(_halfwidth(pred, "latency_ms")[inside], _halfwidth(plain, "latency_ms")[inside])
    wider = _halfwidth(pred, "latency_ms")[d > 0] - _halfwidth(plain, "latency_ms")[d > 0]
    np.testing.assert_allclose(wider, reach.rate * d[d > 0], rtol=1e-9)  # the measured rate times the distance
    assert (wider > 0).all()
    np.testing.assert_allclose(pred.latency_ms, plain.latency_ms)  # the point prediction does not move
    # the widening covers what the map misses beyond the K better than the in-range interval does
    truth = tgt.truth(cands)
    far = d > np.median(d[d > 0])
    covered = ((truth.latency_ms >= pred.latency_ms_lo) & (truth.latency_ms <= pred.latency_ms_hi)).to_numpy()
    covered_plain = ((truth.latency_ms >= plain.latency_ms_lo) & (truth.latency_ms <= plain.latency_ms_hi)).to_numpy()
    assert covered[far].mean() > covered_plain[far].mean()
    # an exact factor: the refits without the K's ends predict them exactly, nothing to widen
    exact = pick.join(src.truth(pick) * 3.0)
    flat = fit_calibrated(src, exact)
    assert flat.reach_["latency_ms"].rate == pytest.approx(0.0, abs=1e-9)
    with pytest.warns(UserWarning, match="beyond the range"):
        p = flat.predict(cands)
    assert p["extrapolated"].to_numpy()[d > 0].all()


def test_the_reach_round_trips_and_a_calibration_without_one_loads(cands, tmp_path):
    """SYNTHETIC devices: the K's range and the widening beyond it are saved with the
    calibration and read back; a calibration.json without them (written before they
    existed) loads and flags nothing beyond the K."""
    import json
    import warnings

    from carb.model import CARB, doc_checksum, save
    from carb.transfer.calibrate import load_predictor

    train = cands.sample(300, random_state=0)
    with pytest.warns(UserWarning, match="not training energy_j"):
        src_model = CARB(preset="fast").fit(train.join(Device(0.01).truth(train)))
    tgt = Device(0.03, p=0.9, noise=0.02, seed=3)
    pick = choose_samples(cands, src_model, 12, seed=0)
    model = fit_calibrated(src_model, pick.join(tgt.truth(pick)))
    save(src_model, tmp_path / "src")
    model.save(tmp_path / "cal", source_dir=tmp_path / "src")
    rest = cands.sample(300, random_state=4)
    again = load_predictor(tmp_path / "cal")
    assert again.reach_ == model.reach_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pd.testing.assert_frame_equal(again.predict(rest), model.predict(rest))
        f = tmp_path / "cal" / "calibration.json"
        doc = json.loads(f.read_text())
        assert set(doc["reach"]) == set(model.targets_)
        del doc["reach"]
        doc["calibration_sha256"] = doc_checksum(doc, "calibration_sha256")
        f.write_text(json.dumps(doc))
        old = load_predictor(tmp_path / "cal")
        assert old.reach_ == {}
        p = old.predict(rest)
        src_flag = src_model.predict(rest)["extrapolated"].to_numpy()
    assert (p["extrapolated"].to_numpy() == src_flag).all()


def test_repeated_visits_of_the_k_widen_the_memory_intervals_by_their_measured_scatter(cands, tmp_path):
    """SYNTHETIC devices: three of the K visited again, their memory 10% higher on the second
    visit (a worker's buffers held or not) and latency unchanged. The memory intervals widen by
    that measured scatter (log), latency's do not; without other visits nothing widens, and the
    scatter is saved with the calibration."""
    import copy
    import warnings

    from carb.model import CARB, save
    from carb.transfer.calibrate import load_predictor, visit_scatter

    src = Device(0.01)
    tgt = Device(0.03, p=0.9, noise=0.02, seed=3)
    pick = choose_samples(cands, src, 12, seed=0)
    measured = pick.join(tgt.truth(pick)).assign(status="ok")
    again = measured.head(3).assign(memory_mb=lambda d: d.memory_mb * 1.1)
    visits = pd.concat([measured, again])
    model = fit_calibrated(src, measured, visits=visits)
    assert model.scatter_ == {"memory_mb": pytest.approx(np.log(1.1))}
    assert visit_scatter(measured, measured, ["memory_mb"], 0.9) == {}  # every config seen once: no pair
    assert fit_calibrated(src, measured).scatter_ == {}
    bare = copy.copy(model)
    bare.scatter_ = {}
    rest = cands.sample(200, random_state=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wide, plain = model.predict(rest), bare.predict(rest)
    np.testing.assert_allclose(wide.memory_mb_hi / plain.memory_mb_hi, 1.1, rtol=1e-9)
    np.testing.assert_allclose(plain.memory_mb_lo / wide.memory_mb_lo, 1.1, rtol=1e-9)
    np.testing.assert_allclose(wide.latency_ms_hi, plain.latency_ms_hi)
    train = cands.sample(300, random_state=0)
    with pytest.warns(UserWarning, match="not training energy_j"):
        src_model = CARB(preset="fast").fit(train.join(src.truth(train)))
    cal = fit_calibrated(src_model, measured, visits=visits)
    save(src_model, tmp_path / "src")
    cal.save(tmp_path / "cal", source_dir=tmp_path / "src")
    assert load_predictor(tmp_path / "cal").scatter_ == pytest.approx(cal.scatter_)
