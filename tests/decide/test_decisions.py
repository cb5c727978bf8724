"""Three-way budget calls, the probable front and locally adaptive conformal intervals
Predictors and residuals here are SYNTHETIC (made up from static features or
drawn from known distributions); the model test uses a slice of the shipped cpu-1t data."""

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from carb.decide import pareto
from carb.decide.screen import predict_at, screen
from carb.decide.validate import decision_metrics, truly_feasible, validate_against_truth
from carb.families import space
from carb.model.conformal import ConformalScale, conformal_quantile
from tests._helpers import SyntheticPredictor, run_carb


@pytest.fixture(scope="module")
def cands():
    return space.load("screening").to_frame()


def test_three_way_calls_follow_the_intervals(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    r = screen(cands, SyntheticPredictor(rel=0.2), budgets, risk="decide", confidence=0.9)
    assert r.summary["rule"] == "interval"  # the default
    d = r.decisions
    # reject: one target over its budget with chance >= 0.9 (one-sided); accept: every
    # target's whole two-sided 90% interval within its budget
    over = (1 - d[["latency_ms_p_within", "memory_mb_p_within"]].to_numpy()).max(axis=1) >= 0.9
    hi_within = (d.latency_ms_hi <= 20) & (d.memory_mb_hi <= 200)
    assert (d.decision == np.where(over, "reject", np.where(hi_within, "accept", "measure"))).all()
    # rejecting at one-sided 90% rejects every config whose 90% interval lies wholly over a
    # budget (one-sided 95%), and decides some that one-sided 95% would send to measure
    lo_over = (d.latency_ms_lo > 20) | (d.memory_mb_lo > 200)
    assert (d.decision[lo_over] == "reject").all() and (d.decision[~lo_over] == "reject").any()
    assert np.allclose(d.p_within, d.latency_ms_p_within * d.memory_mb_p_within)
    counts = r.summary["decisions"]
    assert sum(counts.values()) == len(cands) and min(counts.values()) > 0
    assert r.summary["decided_share"] == pytest.approx(1 - counts["measure"] / len(cands))
    assert set(r.feasible.config_id) == set(d.config_id[d.decision == "accept"])
    assert set(r.measure.config_id) == set(d.config_id[d.decision == "measure"])
    # the measure list starts with the configs most likely on the front
    assert r.measure.p_front.is_monotonic_decreasing
    # each config to measure has its upper bound over at least one budget, and is counted
    # under each budget it reaches over
    m = r.measure
    over = {t: int((m[f"{t}_hi"] > b).sum()) for t, b in budgets.items()}
    assert r.summary["measure_by_budget"] == over and over["latency_ms"] > 0
    assert ((m.latency_ms_hi > 20) | (m.memory_mb_hi > 200)).all()
    # crowding: the share of candidates predicted within the intervals' median half-width
    for t, b in budgets.items():
        c = r.summary["crowding"][t]
        hw = np.median(np.log(d[f"{t}_hi"] / d[f"{t}_lo"]) / 2)
        assert c["half_width_rel"] == pytest.approx(np.expm1(hw))
        assert c["share_within"] == pytest.approx((np.abs(np.log(d[t] / b)) < hw).sum() / len(cands))
        assert 0 <= c["share_within"] < 1
    assert r.summary["crowding"]["latency_ms"]["share_within"] > 0


def test_joint_rule_calls_from_the_chance_of_meeting_every_budget(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    r = screen(cands, SyntheticPredictor(rel=0.2), budgets, confidence=0.9, rule="joint")
    assert r.summary["rule"] == "joint"
    d = r.decisions
    pw = d[["latency_ms_p_within", "memory_mb_p_within"]].to_numpy()
    assert np.allclose(d.p_within, pw.prod(axis=1))
    expect = np.where((1 - pw).max(axis=1) >= 0.9, "reject", np.where(pw.prod(axis=1) >= 0.9, "accept", "measure"))
    assert (d.decision == expect).all() and set(d.decision) == {"accept", "measure", "reject"}
    # the chance is monotone in the distance to the budget, and 1/2 at the budget
    one = d.assign(x=np.log(20.0 / d.latency_ms)).sort_values("x")
    assert one.latency_ms_p_within.is_monotonic_increasing
    # the interval rule (accept only when each target's whole interval is within; the same
    # rejects) decides no more configs
    old = screen(cands, SyntheticPredictor(rel=0.2), budgets, confidence=0.9, rule="interval")
    assert old.summary["decisions"]["measure"] >= r.summary["decisions"]["measure"]
    with pytest.raises(ValueError, match="rule"):
        screen(cands, SyntheticPredictor(), budgets, rule="vote")


def test_confidence_widens_the_measure_zone(cands):
    budgets = {"latency_ms": 20.0}
    target = SyntheticPredictor(rel=0.2)
    m = [
        screen(cands, target, budgets, risk="decide", confidence=c).summary["decisions"]["measure"]
        for c in (0.5, 0.9, 0.99)
    ]
    assert m[0] < m[1] < m[2]
    with pytest.raises(ValueError, match="confidence"):
        screen(cands, SyntheticPredictor(), budgets, risk="decide", confidence=1.0)
    # below one half a config could be both accepted and rejected: refused for calls only
    with pytest.raises(ValueError, match="at least 0.5"):
        screen(cands, SyntheticPredictor(), budgets, risk="decide", confidence=0.4)
    assert screen(cands, SyntheticPredictor(), budgets, risk="safe", confidence=0.4).summary["confidence"] == 0.4
    # a predictor without coverage=: its 90% interval rescaled as a normal error would be
    p = predict_at(SyntheticPredictor(rel=0.2), cands.head(5), 0.9)
    assert np.allclose(p.latency_ms_hi / p.latency_ms, 1.2)
    wide = predict_at(SyntheticPredictor(rel=0.2), cands.head(5), 0.99)
    assert (wide.latency_ms_hi > p.latency_ms_hi).all() and (wide.latency_ms_lo < p.latency_ms_lo).all()


def test_probable_front_without_uncertainty_is_the_point_front(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    sharp = SyntheticPredictor(rel=0.0)  # no uncertainty at all: every draw is the point prediction
    point = screen(cands, sharp, budgets, risk="safe")
    prob = screen(cands, sharp, budgets, risk="decide", samples=20, shortlist_share=None)
    assert set(prob.shortlist.config_id) == set(point.shortlist.config_id)
    assert (prob.shortlist.p_front == 1.0).all() and (prob.decisions.p_front.fillna(0).isin([0.0, 1.0])).all()
    assert list(prob.shortlist["rank"]) == list(range(1, len(prob.shortlist) + 1))


def test_probable_front_keeps_more_under_uncertainty(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    point = screen(cands, SyntheticPredictor(rel=0.3), budgets, risk="point")
    prob = screen(
        cands,
        SyntheticPredictor(rel=0.3),
        budgets,
        risk="decide",
        samples=200,
        front_min_prob=0.0,
        shortlist_share=None,
    )
    # every config of the predicted front has a chance; ranked by it
    assert set(point.shortlist.config_id) <= set(prob.shortlist.config_id)
    assert prob.shortlist.p_front.is_monotonic_decreasing and len(prob.shortlist) > len(point.shortlist)
    # deterministic for a seed
    again = screen(
        cands,
        SyntheticPredictor(rel=0.3),
        budgets,
        risk="decide",
        samples=200,
        front_min_prob=0.0,
        shortlist_share=None,
    )
    assert list(again.shortlist.config_id) == list(prob.shortlist.config_id)


def test_dominated_by_and_sampled_front():
    objs = [("a", "min"), ("b", "max")]
    pts = pd.DataFrame({"a": [1.0, 2.0, 5.0], "b": [5.0, 1.0, 0.5]})
    others = pd.DataFrame({"a": [1.5], "b": [2.0]})
    assert list(pareto.dominated_by(pts, others, objs)) == [False, True, True]
    assert not pareto.dominated_by(pts, others.iloc[:0], objs).any()
    X = np.array([[0.0, 0.0], [1.0, 1.0], [-1.0, 2.0]])
    freq = pareto.sampled_front_frequency([(X, np.array([True, True, True])), (X, np.array([False, True, True]))], 3)
    assert list(freq) == [0.5, 0.5, 1.0]


def test_decision_metrics_counts():
    calls = np.array(["accept", "accept", "reject", "measure", "reject", "measure"])
    feas = np.array([True, False, False, True, True, False])
    m = decision_metrics(calls, feas)
    assert m["n"] == 4 and m["measure"] == 2 and m["decided"] == pytest.approx(4 / 6)
    assert m["accuracy"] == pytest.approx(2 / 4) and m["false_accept_rate"] == pytest.approx(1 / 2)
    assert m["false_reject_rate"] == pytest.approx(1 / 2)
    assert m["accuracy_after_measuring"] == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="unknown budget call"):
        decision_metrics(np.array(["maybe"]), np.array([True]))


def test_validate_scores_decided_configs(cands):
    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    r = screen(cands, SyntheticPredictor(rel=0.2), budgets, risk="decide")
    truth = SyntheticPredictor(rel=0.0, noise=0.15).predict(cands)[["latency_ms", "memory_mb"]]
    truth = cands.assign(**{c: truth[c] for c in truth.columns}, status="ok")
    v = validate_against_truth(
        list(r.feasible.config_id),
        list(r.shortlist.config_id),
        truth,
        budgets,
        [("latency_ms", "min"), ("memory_mb", "min")],
        measure_ids=list(r.measure.config_id),
    )
    d = v["decisions"]
    assert d["measure"] == r.summary["decisions"]["measure"]
    calls = np.where(
        cands.config_id.isin(set(r.measure.config_id)),
        "measure",
        np.where(cands.config_id.isin(set(r.feasible.config_id)), "accept", "reject"),
    )
    assert d == decision_metrics(calls, truly_feasible(truth, budgets))


def test_conformal_scale_covers_each_regime():
    """SYNTHETIC residuals whose spread depends on batch and precision: one width misses
    per regime, the normalized Mondrian width holds in each, on fresh draws."""
    rng = np.random.default_rng(0)

    def draw(n):
        batch = rng.choice([1, 2, 4, 8, 16, 32], n).astype(float)
        wide = rng.integers(0, 2, n).astype(float)
        pred = rng.normal(0, 1, n)
        sd = 0.05 * np.where(batch <= 2, 3.0, 1.0) * np.where(wide == 1, 1.5, 1.0)
        return rng.standard_t(5, n) * sd, batch, wide, pred

    r, b, w, p = draw(6000)
    cs = ConformalScale.fit(r, b, w, p)
    r2, b2, w2, p2 = draw(20000)
    inside = np.abs(r2) <= cs.halfwidth(b2, w2, p2, 0.9)
    plain = np.abs(r2) <= conformal_quantile(np.sort(np.abs(r)), 0.9)
    # ~2,000 training scores per regime: the coverage a regime reaches has a standard
    # deviation of ~0.007 (seeds 0-3 gave 0.879-0.913), so 0.025 is a 3.5-sigma bound
    for m in (b2 <= 2, (b2 > 2) & (b2 <= 8), b2 > 8, w2 == 1, w2 == 0):
        assert abs(inside[m].mean() - 0.9) < 0.025
    assert abs(plain[b2 <= 2].mean() - 0.9) > 0.05  # what the fix is for
    # any coverage from the kept scores; nested
    assert (cs.halfwidth(b2, w2, p2, 0.8) < cs.halfwidth(b2, w2, p2, 0.9)).all()
    back = ConformalScale.from_json(json.loads(json.dumps(cs.to_json())))
    assert np.array_equal(back.halfwidth(b2, w2, p2, 0.9), cs.halfwidth(b2, w2, p2, 0.9))
    assert len(cs.knots) == 5 and len(back.knots) == 5
    # a bundle written before the hinges (no "knots"): read as it was written
    old = cs.to_json()
    del old["knots"]
    old["coef"] = old["coef"][:8]
    assert not ConformalScale.from_json(old).knots


def test_conformal_scale_follows_the_tail_of_the_errors():
    """SYNTHETIC residuals whose typical size is the same everywhere but whose share of large
    errors (6x) rises from 0 to 20% with the prediction (as measurement outliers do): a
    scale fitted by least squares to log |r| (the default) follows their typical size and
    misses in the tails' regions; the quantile scale (``tail=0.9``) holds ~90% in each
    quarter."""
    from carb.model.conformal import quantile_lstsq

    rng = np.random.default_rng(0)

    def draw(n):
        pred = rng.uniform(-2, 2, n)
        big = rng.random(n) < 0.2 * (pred + 2) / 4
        return 0.05 * rng.standard_normal(n) * np.where(big, 6.0, 1.0), np.ones(n), np.ones(n), pred

    r, b, w, p = draw(6000)
    r2, b2, w2, p2 = draw(40000)
    quarters = [(p2 >= lo) & (p2 < lo + 1) for lo in (-2, -1, 0, 1)]
    q_scale = ConformalScale.fit(r, b, w, p, tail=0.9)
    ls_scale = ConformalScale.fit(r, b, w, p)
    assert ls_scale.coef == ConformalScale.fit(r, b, w, p, tail=None).coef
    inside = np.abs(r2) <= q_scale.halfwidth(b2, w2, p2, 0.9)
    inside_ls = np.abs(r2) <= ls_scale.halfwidth(b2, w2, p2, 0.9)
    # seeds 0-3: quantile scale 0.888-0.909 per quarter; least squares 0.859-0.933
    for m in quarters:
        assert abs(inside[m].mean() - 0.9) < 0.025
    assert max(abs(inside_ls[m].mean() - 0.9) for m in quarters) > 0.025  # what it is for
    with pytest.raises(ValueError, match="tail"):
        ConformalScale.fit(r, b, w, p, tail=1.5)
    # the solver: a known linear 0.9-quantile
    x = rng.uniform(0, 1, 20000)
    B = np.column_stack([np.ones_like(x), x])
    u = 1.0 + 2.0 * x + rng.standard_normal(20000)
    c = quantile_lstsq(B, u, 0.9, np.zeros((2, 2)), np.zeros(2))
    assert np.allclose(c, [1.0 + 1.2816, 2.0], atol=0.08)
    assert abs(np.mean(u > B @ c) - 0.1) < 0.005


def test_interval_tail_and_spread_are_settings_of_the_estimator(tmp_path):
    """``interval_tail`` fits the named target's interval scale by quantile regression and
    leaves the others on least squares; a number applies to every target; ``interval_spread=False``
    drops the blend members' spread from the scale; the settings survive a bundle and bad
    ones are refused."""
    from carb import datasets
    from carb.model import CARB, load, save

    df = datasets.load("cpu-2t").head(300)
    base = CARB(preset="fast", random_state=0).fit(df)
    tailed = CARB(preset="fast", random_state=0, interval_tail={"memory_mb": 0.9}).fit(df)
    assert tailed.models_["latency_ms"].interval.coef == base.models_["latency_ms"].interval.coef
    assert tailed.models_["memory_mb"].interval.coef != base.models_["memory_mb"].interval.coef
    every = CARB(preset="fast", random_state=0, interval_tail=0.9).fit(df)
    assert every.models_["memory_mb"].interval.coef == tailed.models_["memory_mb"].interval.coef
    assert every.models_["latency_ms"].interval.coef != base.models_["latency_ms"].interval.coef
    # the default preset blends two or more members: its scale reads their spread unless told not to
    small = datasets.load("cpu-2t").head(200)
    lp = {"xgb": {"n_estimators": 20}, "et": {"n_estimators": 10}}
    spread = CARB(random_state=0, learner_params=lp).fit(small)
    plain = CARB(random_state=0, learner_params=lp, interval_spread=False).fit(small)
    used = [t for t, m in spread.models_.items() if m.interval.uses_spread]
    assert used and not any(m.interval.uses_spread for m in plain.models_.values())
    assert (spread.predict(small.head(20))[used[0]] == plain.predict(small.head(20))[used[0]]).all()
    save(tailed, tmp_path / "b")
    back = load(tmp_path / "b")
    assert back.interval_tail == {"memory_mb": 0.9} and back.interval_spread is True
    for bad in (1.5, {"memory": 0.9}, {"memory_mb": 0.0}):
        with pytest.raises(ValueError, match="interval_tail"):
            CARB(preset="fast", interval_tail=bad).fit(df)


def test_carb_intervals_at_any_coverage_and_old_bundles(tmp_path):
    from carb import datasets
    from carb.model import CARB, load, save

    data = datasets.load("cpu-1t").head(400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = CARB(preset="fast").fit(data)
    X = data.head(50)
    p9, p8 = m.predict(X), m.predict(X, coverage=0.8)
    assert p9.equals(m.predict(X, coverage=0.9))
    assert (p8.latency_ms_hi < p9.latency_ms_hi).all() and (p8.latency_ms_lo > p9.latency_ms_lo).all()
    assert (p8.latency_ms == p9.latency_ms).all()
    with pytest.raises(ValueError, match="coverage"):
        m.predict(X, coverage=1.5)
    save(m, tmp_path / "b")
    assert load(tmp_path / "b").predict(X, coverage=0.8).equals(p8)
    # a bundle written before the adaptive intervals: the constant half-width, as then
    man = json.loads((tmp_path / "b" / "manifest.json").read_text())
    for e in man["targets"].values():
        del e["interval"]
    from carb.model import doc_checksum

    man["manifest_sha256"] = doc_checksum(man, "manifest_sha256")  # as that carb would have written it
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(man))
    old = load(tmp_path / "b").predict(X)
    hw = {t: m.models_[t].halfwidth for t in m.targets_}
    assert np.allclose(np.log(old.latency_ms_hi / old.latency_ms), hw["latency_ms"])


def test_cli_screen_decide_and_validate(tmp_path, cli):
    """`carb screen --confidence` writes the measure set and prints the calls; `carb validate
    --data` scores the decided configs; bad input is one line and exit code 2. Models: CARB
    `fast` on slices of the shipped cpu-1t / cpu-2t measurements. The first screen and
    validate run as installed (subprocesses); the variations after them run in-process
    (the ``cli`` fixture: the same ``carb.cli.main``, without seconds of imports each)."""
    from carb import datasets
    from carb.model import CARB, save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in ("cpu-1t", "cpu-2t"):
            d = datasets.load(name)
            save(CARB(preset="fast").fit(d[d.status == "ok"].head(500)), tmp_path / name)

    def carb(*args):
        return run_carb(*args, timeout=600)

    out = tmp_path / "scr"
    p = carb(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cpu-2t",
        "--source-model",
        tmp_path / "cpu-1t",
        "--budget",
        "latency_ms=5",
        "--budget",
        "memory_mb=35",
        "--confidence",
        "0.8",
        "--out",
        out,
    )
    assert p.returncode == 0, p.stderr
    assert "budget calls at 80% confidence" in p.stdout and "decided" in p.stdout
    s = json.loads((out / "summary.json").read_text())
    m = pd.read_parquet(out / "measure.parquet")
    assert s["risk"] == "decide" and s["confidence"] == 0.8 and len(m) == s["decisions"]["measure"] > 0
    assert sum(s["decisions"].values()) == s["candidates"]
    # the shortlist's table says each config's call and its chance of being on the front
    # (the probable front also holds configs to measure)
    sl = pd.read_parquet(out / "shortlist.parquet")
    head = p.stdout[p.stdout.index("shortlist (") :]
    assert "call" in head and "P(front)" in head
    first = head.splitlines()[4]  # title, top rule, header, rule, then rank 1
    assert sl.iloc[0]["decision"] in first and f"{sl.iloc[0]['p_front']:.2f}" in first
    # a share cap too small for the probable front: a hint names the share that leaves room for it
    code, tiny_out, err = cli(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cpu-2t",
        "--source-model",
        tmp_path / "cpu-1t",
        "--budget",
        "latency_ms=5",
        "--budget",
        "memory_mb=35",
        "--confidence",
        "0.8",
        "--shortlist-share",
        "0.002",
        "--out",
        tmp_path / "tiny",
    )
    assert code == 0, err
    st = json.loads((tmp_path / "tiny" / "summary.json").read_text())
    assert f"--shortlist-share {st['share_for_front']:g} keeps room" in " ".join(tiny_out.split())
    v = carb("validate", "--screen", out, "--data", "cpu-2t", "--json")
    assert v.returncode == 0, v.stderr
    d = json.loads(v.stdout)["decisions"]
    assert 0 < d["decided"] < 1 and 0 <= d["accuracy"] <= 1
    assert json.loads(v.stdout)["truth_latency"] == "raw medians"  # cpu-2t has no speed index
    # a truth timed with the paired sentinel is read at its median speed (SYNTHETIC correction: x3)
    t2 = datasets.load("cpu-2t", features=False)
    t2 = t2.assign(latency_ms_norm=3 * t2.latency_ms, extra=json.dumps({"pair_ratio": [1.0]}))
    t2.to_parquet(tmp_path / "paired.parquet")
    code, vp_out, err = cli("validate", "--screen", out, "--data", tmp_path / "paired.parquet", "--json")
    assert code == 0, err
    jp = json.loads(vp_out)
    assert jp["truth_latency"].startswith("drift-corrected")
    assert jp["decisions"] != d  # three times slower configs: other calls are right
    code, _, err = cli(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cpu-2t",
        "--budget",
        "latency_ms=5",
        "--confidence",
        "1.5",
        "--out",
        tmp_path / "bad",
    )
    assert code == 2 and err.startswith("error: --confidence 1.5") and "Traceback" not in err
    code, _, err = cli(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cpu-2t",
        "--budget",
        "latency_ms=5",
        "--confidence",
        "0.3",
        "--out",
        tmp_path / "low",
    )
    assert code == 2 and "at least 0.5" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(
        "screen",
        "--space",
        "cpu",
        "--target-model",
        tmp_path / "cpu-2t",
        "--budget",
        "latency_ms=5",
        "--risk",
        "safe",
        "--out",
        tmp_path / "old",
    )
    assert code == 0 and not (tmp_path / "old" / "measure.parquet").exists(), err
    code, _, err = cli("validate", "--screen", tmp_path / "old", "--device", "cpu", "--measure-first")
    assert code == 2 and "no measure set" in err


def test_default_is_decide_with_a_share_capped_shortlist(cands):
    """The library default matches the CLI (three-way calls, probable front), and the
    probable shortlist holds at most SHORTLIST_SHARE of the candidates, the likeliest on
    the front: the same configs as the uncapped shortlist's head."""
    from carb.decide.screen import SHORTLIST_SHARE

    budgets = {"latency_ms": 20.0, "memory_mb": 200.0}
    free = screen(cands, SyntheticPredictor(rel=0.3), budgets, samples=200, front_min_prob=0.0, shortlist_share=None)
    assert free.summary["risk"] == "decide" and free.summary["front"] == "probable"
    cap = int(np.ceil(SHORTLIST_SHARE * len(cands)))
    assert len(free.shortlist) > cap  # the cap binds in this case
    capped = screen(cands, SyntheticPredictor(rel=0.3), budgets, samples=200, front_min_prob=0.0)
    assert len(capped.shortlist) == cap == capped.summary["shortlist_share_cap"]
    assert capped.summary["pruning_ratio"] == pytest.approx(1 - cap / len(cands))
    assert list(capped.shortlist.config_id) == list(free.shortlist.config_id[:cap])
    # the probable front's expected size is the sum of the configs' chances of being on it
    ef = free.summary["expected_front"]
    assert ef == pytest.approx(float(free.decisions["p_front"].fillna(0).sum())) and ef > 1
    # a cap with less than FRONT_ROOM times that room says which share would give it; that share does
    from carb.decide.screen import FRONT_ROOM

    tight = screen(
        cands,
        SyntheticPredictor(rel=0.3),
        budgets,
        samples=200,
        front_min_prob=0.0,
        shortlist_share=max(1 / len(cands), 0.5 * ef / len(cands)),
    )
    want = tight.summary["share_for_front"]
    assert want * len(cands) >= FRONT_ROOM * tight.summary["expected_front"] and want <= 1
    roomy = screen(cands, SyntheticPredictor(rel=0.3), budgets, samples=200, front_min_prob=0.0, shortlist_share=want)
    assert "share_for_front" not in roomy.summary
    # a smaller absolute cap wins; a bad share is one clear error
    assert len(screen(cands, SyntheticPredictor(rel=0.3), budgets, samples=50, max_shortlist=7).shortlist) == 7
    with pytest.raises(ValueError, match="shortlist_share"):
        screen(cands, SyntheticPredictor(rel=0.3), budgets, shortlist_share=0.0)


def test_carb_spread_scale_and_chance_within_budget(tmp_path):
    """The default preset blends XGBoost and ExtraTrees: its interval scale reads their
    spread (saved and reloaded exactly), and ``predict(budgets=)`` gives the chance of
    being within a budget that agrees with the intervals from the same scores. Model:
    CARB `default` on a slice of the shipped cpu-1t measurements."""
    from carb import datasets
    from carb.model import CARB, load, save

    data = datasets.load("cpu-1t")
    data = data[data.status == "ok"].head(400)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = CARB(preset="default").fit(data)
    assert any(m.models_[t].reads_spread for t in m.targets_)
    X = data.tail(60)
    p = m.predict(X, coverage=0.8)
    # a budget at a config's own 80% upper bound: within with chance >= 90%; at its lower
    # bound: <= 10%; at the point: 1/2 (symmetric scores)
    for t in ("latency_ms", "memory_mb"):
        for col, f, check in (
            (f"{t}_hi", 1.001, lambda v: v >= 0.9),
            (f"{t}_lo", 0.999, lambda v: v <= 0.1),
            (t, 1.0, lambda v: np.isclose(v, 0.5)),
        ):
            got = np.array(
                [
                    m.predict(X.iloc[[i]], budgets={t: f * float(p[col].iloc[i])})[f"{t}_p_within"].iloc[0]
                    for i in range(0, 60, 12)
                ]
            )
            assert check(got).all(), (t, col, got)
    q = m.predict(X, budgets={"latency_ms": float(X.latency_ms.median())})
    assert q.latency_ms_p_within.between(0, 1).all() and "memory_mb_p_within" not in q.columns
    # one config: the chance rises with the budget, from ~0 to ~1
    one = X.iloc[[0]]
    ch = [
        m.predict(one, budgets={"latency_ms": f * float(p.latency_ms.iloc[0])}).latency_ms_p_within.iloc[0]
        for f in (0.5, 0.9, 1.0, 1.1, 2.0)
    ]
    assert np.all(np.diff(ch) >= 0) and ch[0] < 0.05 and ch[-1] > 0.95
    save(m, tmp_path / "b")
    assert load(tmp_path / "b").predict(X, coverage=0.8).equals(p)


def test_screen_hint_when_much_is_left_to_measure():
    """`carb screen` says how wide the target's intervals are when less than 80% was decided
    (SYNTHETIC decisions table)."""
    from carb.decide.screening import width_hint as _width_hint

    d = pd.DataFrame(
        {
            "latency_ms": [10.0, 10.0, 10.0],
            "latency_ms_lo": [5.0, 5.0, 5.0],
            "latency_ms_hi": [20.0] * 3,
            "memory_mb": [40.0] * 3,
            "memory_mb_lo": [40 / 1.1] * 3,
            "memory_mb_hi": [44.0] * 3,
        }
    )
    s = {"decided_share": 0.6, "confidence": 0.9, "budgets": {"latency_ms": 12.0, "memory_mb": 50.0}}
    h = _width_hint(s, d)
    assert h.startswith("hint: 40% were too close") and "latency_ms x/÷2.0" in h and "memory_mb ±10%" in h
    assert _width_hint({**s, "decided_share": 0.85}, d) is None
    assert _width_hint({**s, "budgets": {"energy_j": 1.0}}, d) is None  # no interval for that target
    from carb.decide.screening import crowd_hint as _crowd_hint

    crowd = {
        "memory_mb": {"half_width_rel": 0.028, "share_within": 0.31},
        "latency_ms": {"half_width_rel": 0.14, "share_within": 0.05},
    }
    s = {**s, "decisions": {"accept": 1, "measure": 2, "reject": 0}, "crowding": crowd}
    h = _crowd_hint(s)
    assert (
        h.startswith("hint: the space crowds")
        and "31% of the candidates are predicted within ±2.8% of the memory_mb budget" in h
    )
    assert "latency_ms budget" not in h  # 5%: under the crowding threshold
    assert _crowd_hint({**s, "decisions": {"accept": 3, "measure": 0, "reject": 0}}) is None  # nothing to measure
    assert _crowd_hint({**s, "crowding": {"memory_mb": {"half_width_rel": 0.03, "share_within": 0.05}}}) is None
    assert _crowd_hint({"decided_share": 1.0}) is None  # two-way calls: no decisions, no crowding
