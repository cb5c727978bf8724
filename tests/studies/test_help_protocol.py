"""HELP's evaluation protocol on its FBNet data: the trimmed middle 80% of each device's
latencies (as HELP's loader runs it, ties kept in id order on every machine), and the
few-shot transfer's trim option."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from carb.datasets import help_fbnet as hf
from carb.studies.help_fbnet import HELP_PASSTHROUGH, HELP_TRIM, fewshot_help_fbnet, trim_middle
from carb.transfer import SourceModels


def test_trim_middle_keeps_help_positions():
    ids = np.arange(100, 110)
    cost = np.array([5.0, 9, 1, 7, 3, 8, 2, 6, 4, 0])  # SYNTHETIC; cheapest: id 109, dearest: id 101
    kept = trim_middle(ids, cost)
    assert HELP_TRIM == (0.1, 0.9)
    assert list(kept) == [100, 102, 103, 104, 105, 106, 107, 108]  # given order, 109 and 101 cut
    rng = np.random.default_rng(0)
    assert len(trim_middle(np.arange(4000), rng.random(4000))) == 3200
    assert len(trim_middle(np.arange(1000), rng.random(1000))) == 800
    with pytest.raises(ValueError):
        trim_middle(ids, cost, keep=(0.9, 0.1))
    with pytest.raises(ValueError):
        trim_middle(ids, cost[:5])


def test_trim_middle_breaks_ties_by_given_order():
    # SYNTHETIC: 900 costs of 30 whole values, as a phone's whole-millisecond latencies;
    # numpy's default float32 sort orders these ties by the CPU's SIMD kernel (on the
    # AVX2 EPYC here 865 of 900 positions differ from a stable sort), so the kept set
    # moved with the machine; it must be the same everywhere: ties kept in id order
    rng = np.random.default_rng(0)
    cost = rng.integers(0, 30, 900).astype(float)
    ids = np.arange(5000, 5900)
    kept = trim_middle(ids, cost)
    order = sorted(range(900), key=lambda i: (np.float32(cost[i]), i))  # ties by position
    assert list(kept) == sorted(ids[order[90:810]].tolist())
    # at the low cut, the cells of the cut's value that stay are its last ids
    lo_val = np.float32(cost[order[90]])
    tied = ids[np.float32(cost) == lo_val]
    assert set(tied[-len(set(tied) & set(kept)) :]) == set(tied) & set(kept)


def test_trimmed_protocol_on_help_data():
    """HELP's trimmed protocol: per device, the pool (arch ids 0..3999) and the test set
    (4000..4999) each cut to the middle 80% by that device's latency."""
    wide = hf.load(wide=True)
    train = np.arange(hf.TRAIN_ARCH_IDS.start, hf.TRAIN_ARCH_IDS.stop)
    test = np.arange(hf.TEST_ARCH_IDS.start, hf.TEST_ARCH_IDS.stop)
    assert len(test) == 1000  # untrimmed
    kept = {}
    for d in ("raspi4", "fpga"):
        lat = wide[f"latency_ms_{d}"].to_numpy()
        pool, kept[d] = trim_middle(train, lat[train]), trim_middle(test, lat[test])
        assert len(pool) == 3200 and len(kept[d]) == 800
        assert set(pool) <= set(range(4000)) and set(kept[d]) <= set(range(4000, 5000))
        # the middle 80% by this device's latency: nothing kept below the cut, nothing above
        lat32 = lat.astype(np.float32)  # HELP compares float32 latencies
        order = np.sort(lat32[4000:])
        assert lat32[kept[d]].min() >= order[100] and lat32[kept[d]].max() <= order[899]
    assert not np.array_equal(kept["raspi4"], kept["fpga"])  # per device


def test_fewshot_help_fbnet_trim_option():
    wide = hf.load(wide=True)
    ids = np.arange(0, 4000, 400)
    meas = pd.DataFrame({"arch_id": ids, "latency_ms": wide.set_index("arch_id").loc[ids, "latency_ms_raspi4"]})
    p_all, _ = fewshot_help_fbnet(meas, table=wide)
    p_trim, m = fewshot_help_fbnet(meas, table=wide, trim=True)
    assert not np.allclose(p_all.latency_ms, p_trim.latency_ms)
    # the same as source models fitted by hand on each device's trimmed pool
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[list(HELP_PASSTHROUGH)]], axis=1)
    d = hf.SOURCE_DEVICES[0]
    lat = wide[f"latency_ms_{d}"].to_numpy(float)[:4000]
    by_hand = SourceModels("ridge", columns=list(counts.columns)).fit(
        X.iloc[:4000], {d: lat}, rows={d: trim_middle(np.arange(4000), lat)}
    )
    np.testing.assert_allclose(m.sources.predict(X, [d]), by_hand.predict(X), rtol=1e-12)
