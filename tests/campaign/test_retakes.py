"""Retakes of visits timed in another state of the machine: the state rules of
carb.campaign.rounds on synthetic rows, and a campaign's retakes with a synthetic backend
(its values are made up here; which visits run in the slow state is a schedule the test sets)."""

import json

import numpy as np
import pandas as pd
import pytest

from carb.campaign import rounds as states
from carb.campaign.runner import retake_summary, run_campaign
from carb.campaign.store import Store
from carb.families import space
from carb.measure.base import Backend, Measurement, Protocol
from carb.measure.protocol import summarize
from carb.measure.sentinel import Sentinel
from tests._helpers import SENT

SLOW_SENTINEL, SLOW_CONFIG = 2.0, 1.2  # the slow state: the sentinel x2, a config only x1.2 (as measured)


class TwoStateBackend(Backend):
    """Synthetic: a config's latency is its depth in ms (x1.2 in the slow state), the sentinel's
    3 ms (x2 in the slow state); config visits number ``slow`` (0-based, in call order) run in
    the slow state. Timed with the paired sentinel when a campaign sets ``paired_sentinel``."""

    device = "cpu"

    def __init__(self, slow=(), interrupt_at=None):
        self.protocol = Protocol(max_time_s=2.0)
        self.slow = set(slow)
        self.visits = 0  # config visits so far
        self.interrupt_at = interrupt_at
        self.paired_sentinel = None

    def provenance(self):
        return {"threads": 2, "synthetic": True}

    def measure(self, config, protocol=None):
        if config == SENT:
            return Measurement(
                status="ok",
                latency_ms=summarize([3.0] * 8),
                timed_s=0.0,
                wall_s=0.0,
                extra={"latency_samples_ms": [3.0] * 8},
            )
        if self.interrupt_at is not None and self.visits >= self.interrupt_at:
            raise KeyboardInterrupt
        slow = self.visits in self.slow
        self.visits += 1
        lat = config.depth * (SLOW_CONFIG if slow else 1.0)
        samples = [lat * f for f in np.linspace(0.998, 1.002, 8)]
        extra = {"latency_samples_ms": samples, "slow": slow}
        if self.paired_sentinel is not None:
            s = 3.0 * (SLOW_SENTINEL if slow else 1.0)
            extra.update(pair_ratio=[lat / s] * 4, pair_sentinel_ms=[s] * 4)
        # memory: 10 MB in either state, less on later visits (as 2-thread peaks drifted on cpu-avx2-2t)
        return Measurement(
            status="ok",
            latency_ms=summarize(samples),
            memory_mb=10.0 - 0.1 * self.visits,
            timed_s=0.0,
            wall_s=0.0,
            extra=extra,
        )


def sentinel():
    return Sentinel(
        configs=(SENT,), protocol=Protocol(max_time_s=0.2), every_s=1e9, window_s=60.0, name="synthetic-paired"
    )


CFGS = [c for c in space.load("tiny")][:6]


def run(tmp_path, backend, retakes, name="r.duckdb"):
    with Store(tmp_path / name) as store:
        r = run_campaign(CFGS, backend, store, sentinel=sentinel(), rounds=2, retakes=retakes)
        rows = store.measurements().set_index("config_id")
        visits = store.con.execute("SELECT config_id, round, extra FROM rounds ORDER BY config_id, round").fetchall()
    return r, rows, visits


def test_visits_in_the_slow_state_are_retaken_and_the_rows_pooled_from_the_fast_ones(tmp_path):
    # 12 first visits (6 configs x 2 rounds); 3 of them slow, every retake fast
    b = TwoStateBackend(slow={1, 4, 9})
    r, rows, visits = run(tmp_path, b, retakes=2)
    assert r.measured == 6 and b.visits == 12 + 3  # one retake per slow visit, each came back
    assert r.retakes == {
        "ref_ms": pytest.approx(3.0),
        "factor": 1.25,
        "n": 12,
        "off": 3,
        "off_sentinel_ms": pytest.approx(6.0),
        "visits": 3,
        "back": 3,
        "left": 0,
    }
    # every row now pools two fast visits: its latency is the config's depth exactly
    for cfg in CFGS:
        assert rows.loc[cfg.config_id, "latency_ms"] == pytest.approx(cfg.depth, rel=1e-3)
    # nothing lost: the slow first visits stay in the rounds table beside their retakes
    extras = [json.loads(e) for _, _, e in visits]
    assert len(visits) == 15 and sum(e["slow"] for e in extras) == 3
    with Store(tmp_path / "r.duckdb", read_only=True) as store:  # the same figures from the store alone
        assert retake_summary(store, store.platforms()[0], None, 2) == r.retakes
    retaken = rows[rows.extra.str.contains("pooled_visits")]
    assert len(retaken) == 3
    for e in retaken.extra.map(json.loads):
        assert e["retakes"] == 1 and any(i >= 2 for i in e["pooled_visits"])
    # memory is not a speed state's: a retaken row keeps its first visits' median peak
    with Store(tmp_path / "r.duckdb", read_only=True) as store:
        peaks = store.con.execute("SELECT config_id, round, memory_mb FROM rounds").fetchall()
    first = {}
    for cid, idx, mb in peaks:
        if idx < 2:
            first.setdefault(cid, []).append(mb)
    for cid in retaken.index:
        assert retaken.loc[cid, "memory_mb"] == pytest.approx(np.median(first[cid]))
        assert json.loads(retaken.loc[cid, "extra"])["memory_visits"] == [0, 1]


def test_without_retakes_the_slow_visits_stay_pooled(tmp_path):
    b = TwoStateBackend(slow={1, 4, 9})
    r, rows, _ = run(tmp_path, b, retakes=0)
    assert b.visits == 12 and r.retakes is None
    lat = np.array([rows.loc[c.config_id, "latency_ms"] / c.depth for c in CFGS])
    assert (lat > 1.05).sum() == 3  # the median of a fast and a slow visit's samples: off by up to x1.2


def test_a_state_that_lasts_keeps_the_nearest_visit_and_stops_after_the_tries(tmp_path):
    # visit 2's retakes (numbers 12 and 13) are slow too: it is left as measured, tried twice
    b = TwoStateBackend(slow={2, 12, 13})
    r, rows, visits = run(tmp_path, b, retakes=2)
    assert b.visits == 14
    assert r.retakes["off"] == 1 and r.retakes["back"] == 0 and r.retakes["left"] == 1 and r.retakes["visits"] == 2
    assert len(visits) == 14


def test_a_kill_during_the_retakes_resumes_with_those_still_due(tmp_path):
    b = TwoStateBackend(slow={1, 4, 9}, interrupt_at=13)  # the 2nd retake never runs
    r1, _, _ = run(tmp_path, b, retakes=2)
    assert r1.interrupted
    b2 = TwoStateBackend()  # the machine fast from now on
    r2, rows, visits = run(tmp_path, b2, retakes=2)
    assert r2.measured == 0 and b2.visits == 2  # the two retakes still due, no first visit again
    assert r2.retakes["off"] == 3 and r2.retakes["back"] == 3 and len(visits) == 15
    for cfg in CFGS:
        assert rows.loc[cfg.config_id, "latency_ms"] == pytest.approx(cfg.depth, rel=1e-3)
    b3 = TwoStateBackend()
    r3, rows3, _ = run(tmp_path, b3, retakes=2)  # nothing left: nothing measured
    assert b3.visits == 0 and r3.retakes == r2.retakes and rows3.equals(rows)


def test_a_kill_between_a_retake_and_its_pooling_pools_on_resume(tmp_path, monkeypatch):
    import carb.campaign.runner as campaign

    b = TwoStateBackend(slow={1})
    calls = []

    def dies(*a, **k):
        calls.append(a)
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign, "_repool", dies)
    r1, rows1, _ = run(tmp_path, b, retakes=2)
    assert r1.interrupted and calls and b.visits == 13
    cfg = CFGS[1]  # visit 1: the second config's first round
    cid = cfg.config_id
    assert rows1.loc[cid, "latency_ms"] > cfg.depth * 1.05  # stored retake, row not pooled yet
    monkeypatch.undo()
    b2 = TwoStateBackend()
    r2, rows2, _ = run(tmp_path, b2, retakes=2)
    assert b2.visits == 0 and rows2.loc[cid, "latency_ms"] == pytest.approx(cfg.depth, rel=1e-3)


def test_retakes_need_rounds_and_a_sentinel(tmp_path):
    with Store(tmp_path / "e.duckdb") as store:
        with pytest.raises(ValueError, match="rounds > 1"):
            run_campaign(CFGS, TwoStateBackend(), store, sentinel=sentinel(), rounds=1, retakes=1)
        with pytest.raises(ValueError, match="sentinel"):
            run_campaign(CFGS, TwoStateBackend(), store, sentinel=None, rounds=2, retakes=1)
        with pytest.raises(ValueError, match=">= 0"):
            run_campaign(CFGS, TwoStateBackend(), store, sentinel=sentinel(), rounds=2, retakes=-1)


def test_retake_summary_of_a_store_without_sentinels(tmp_path):
    with Store(tmp_path / "n.duckdb") as store:
        run_campaign(CFGS, TwoStateBackend(), store, sentinel=None, rounds=2)
        assert retake_summary(store, store.platforms()[0], CFGS, 2) == {"note": "no speed index"}


def test_machine_state_is_the_largest_group_never_between_two():

    # SYNTHETIC sentinels: two states of the machine, 0.5 and 1.1 ms
    assert states.machine_state([0.52, 0.53, 1.1, 1.1, 1.12, 0.54]) == pytest.approx(0.53)  # a tie: the faster
    assert states.machine_state([0.52, 1.1, 1.1, 1.12, 0.54]) == pytest.approx(1.1)
    assert states.machine_state([]) is None and states.machine_state([np.nan, 0]) is None
    rows = pd.DataFrame({"status": ["ok", "ok", "failed", "ok"], "sentinel_ms": [1.0, 1.05, 0.5, 2.0]})
    assert states.machine_state(rows) == pytest.approx(np.sqrt(1.05))  # in log; the failed row is no evidence
    off = states.off_state(rows, 1.0)
    assert off.tolist() == [False, False, False, True]
    assert states.off_state(rows.drop(columns="sentinel_ms"), 1.0).tolist() == [False] * 4


def test_retake_off_state_keeps_the_visit_nearest_the_reference():
    """SYNTHETIC rows: configs a-e, c and d timed in the slow state (sentinel 1.1 ms against
    0.5 ms); the first retake brings c back and d stays slow, the second fails for d (its
    slow visit is kept, nothing lost); e has no sentinel."""
    from carb.campaign import speed as drift

    rows = pd.DataFrame(
        {
            "config_id": list("abcde"),
            "status": "ok",
            "sentinel_ms": [0.5, 0.52, 1.1, 1.12, np.nan],
            "latency_ms": [1.0, 2.0, 3.6, 4.8, 5.0],
        }
    )
    calls = []

    def again(f):
        calls.append(sorted(f.config_id))
        if len(calls) == 1:
            return pd.DataFrame(
                {"config_id": ["c", "d"], "status": "ok", "sentinel_ms": [0.51, 1.3], "latency_ms": [3.0, 9.9]}
            )
        return pd.DataFrame({"config_id": ["d"], "status": "failed", "sentinel_ms": [0.5], "latency_ms": [np.nan]})

    out, d = states.retake_off_state(rows, again)
    assert calls == [["c", "d"], ["d"]]  # only the visits still off, at most RETAKES times
    assert out.latency_ms.tolist()[:4] == [1.0, 2.0, 3.0, 4.8]  # c retaken; d's retake was farther: kept
    assert out.retakes.tolist() == [0, 0, 1, 2, 0]
    assert d["ref_ms"] == pytest.approx(np.sqrt(0.5 * 0.52)) and (d["off"], d["visits"], d["back"], d["left"]) == (
        2,
        3,
        1,
        1,
    )
    line = states.state_line(d)
    assert line.startswith("2 of 4 validation visits were timed in another state") and "1 left" in line
    # no retakes asked for, or every visit in the reference state: nothing measured again
    out0, d0 = states.retake_off_state(rows, again, tries=0)
    assert len(calls) == 2 and d0["off"] == 2 and d0["left"] == 2 and out0.latency_ms.tolist()[2] == 3.6
    _, d1 = states.retake_off_state(rows.iloc[:2], again)
    assert len(calls) == 2 and states.state_line(d1) is None
    assert states.retake_off_state(rows.drop(columns="sentinel_ms"), again)[1] == {"note": drift.NO_INDEX}
