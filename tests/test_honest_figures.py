"""Issue 13, section 4: HELP's trimmed protocol, grouped folds, deterministic benchmarks,
the report's refusal to draw a batch curve from too few architectures, log-axis labels
that do not overlap."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from carb.datasets import help_fbnet as hf
from carb.report import figures as _figures
from carb.transfer import HELP_TRIM, SourceModels, fewshot_help_fbnet, trim_middle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_cpu_transfer as bct  # noqa: E402
import bench_help_fewshot as bhf  # noqa: E402


# -- HELP's trimming ------------------------------------------------------------------------


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
    assert set(tied[-len(set(tied) & set(kept)):]) == set(tied) & set(kept)


def test_trimmed_protocol_on_help_data():
    wide = hf.load(wide=True)
    y = {d: wide[f"latency_ms_{d}"].to_numpy() for d in ("raspi4", "fpga")}
    prot = bhf.protocol(y, list(y), trimmed=True)
    for d, lat in y.items():
        pool, test = prot["pool"][d], prot["test"][d]
        assert len(pool) == 3200 and len(test) == 800
        assert set(pool) <= set(range(4000)) and set(test) <= set(range(4000, 5000))
        # the middle 80% by this device's latency: nothing kept below the cut, nothing above
        lat32 = lat.astype(np.float32)  # HELP compares float32 latencies
        order = np.sort(lat32[4000:])
        assert lat32[test].min() >= order[100] and lat32[test].max() <= order[899]
    assert not np.array_equal(prot["test"]["raspi4"], prot["test"]["fpga"])  # per device
    full = bhf.protocol(y, list(y), trimmed=False)
    assert len(full["test"]["fpga"]) == 1000


def test_source_rows_restrict_each_model():
    rng = np.random.default_rng(1)
    X = rng.random((60, 3))  # SYNTHETIC
    y = X @ [1.0, 2.0, 3.0] + rng.normal(0, 0.01, 60)
    y_nan = y.copy()
    y_nan[40:] = np.nan  # outside the rows: never read
    a = SourceModels().fit(X, {"d": y_nan}, rows={"d": np.arange(40)})
    b = SourceModels().fit(X[:40], {"d": y[:40]})
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    with pytest.raises(ValueError):
        SourceModels().fit(X, {"d": y_nan})


def test_fewshot_help_fbnet_trim_option():
    wide = hf.load(wide=True)
    ids = np.arange(0, 4000, 400)
    meas = pd.DataFrame({"arch_id": ids, "latency_ms": wide.set_index("arch_id").loc[ids, "latency_ms_raspi4"]})
    p_all, _ = fewshot_help_fbnet(meas, table=wide)
    p_trim, m = fewshot_help_fbnet(meas, table=wide, trim=True)
    assert not np.allclose(p_all.latency_ms, p_trim.latency_ms)
    # the same as source models fitted by hand on each device's trimmed pool
    counts = hf.block_counts(wide)
    X = pd.concat([counts, wide[list(bhf.PASSTHROUGH)]], axis=1)
    d = hf.SOURCE_DEVICES[0]
    lat = wide[f"latency_ms_{d}"].to_numpy(float)[:4000]
    by_hand = SourceModels("ridge", columns=list(counts.columns)).fit(X.iloc[:4000], {d: lat},
                                                                      rows={d: trim_middle(np.arange(4000), lat)})
    np.testing.assert_allclose(m.sources.predict(X, [d]), by_hand.predict(X), rtol=1e-12)


# -- determinism -------------------------------------------------------------------------------


def test_help_baseline_and_score_reproduce():
    wide = hf.load(wide=True)
    devices = ["pixel3", "raspi4"]
    y = {d: wide[f"latency_ms_{d}"].to_numpy() for d in devices}
    onehot = hf.layer_onehot(wide)
    prot = bhf.protocol(y, devices, trimmed=True)
    ref = np.array(hf.reference_arch_ids())
    runs = []
    for jobs in (1, 2):  # LightGBM deterministic: the thread count changes nothing
        base = bhf.Baseline(onehot, y, ["pixel3"], jobs, pools=prot["pool"])
        runs.append((base.logpred, bhf.score(base.predict, "raspi4", y, 10, True, range(2), ref, prot)))
    np.testing.assert_array_equal(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]


def test_cpu_transfer_calibration_rows_reproduce():
    from carb import datasets
    from carb.model import CARB

    src = datasets.load("cpu-1t").head(400)
    tgt = datasets.load("cpu-2t")
    tgt = tgt[tgt.status == "ok"].head(150).reset_index(drop=True)
    frames = []
    for _ in range(2):  # the source model is refitted too: its learners must be deterministic
        source = CARB(preset="fast", random_state=0, n_jobs=1).fit(src)
        frames.append(bct.calibration_rows(tgt, source, seeds=[0], ks=[5]))
    pd.testing.assert_frame_equal(frames[0], frames[1])
    assert set(frames[0]["method"]) == {"source", "active", "random", "nnls", "active, slope carried"}


def test_device_model_folds_group_whole_architectures():
    # SYNTHETIC frame: 12 architectures, each at two input sizes, two class counts, two batches
    rows = [dict(family="resnet", block="basic", depth=d, width=w, early_downsample=False,
                 input_size=s, classes=c, batch=b)
            for d, w in itertools.product((8, 14, 20), (0.5, 1.0, 1.5, 2.0))
            for s, c, b in itertools.product((32, 64), (10, 100), (1, 8))]
    df = pd.DataFrame(rows)
    folds = bct.arch_folds(df, folds=5, seed=0)
    per_arch = pd.Series(folds).groupby([df.depth, df.width]).nunique()
    assert (per_arch == 1).all()  # every input size and class count of an architecture: one fold
    assert len(set(folds)) == 5
    np.testing.assert_array_equal(folds, bct.arch_folds(df, folds=5, seed=0))


# -- report figures ---------------------------------------------------------------------------


def _scaling_data(n_archs: int, seed: int = 0) -> pd.DataFrame:
    """SYNTHETIC measurements: ``n_archs`` architectures at batch 1, 2, 4, 8, latency
    growing with the batch, 5% noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for a in range(n_archs):
        base = rng.uniform(1, 20)
        for b in (1, 2, 4, 8):
            rows.append(dict(family="resnet", block="basic", depth=8 + 6 * a, width=1.0, early_downsample=False,
                             input_size=32, classes=10, batch=b, precision="fp32", status="ok",
                             latency_ms=base * b ** 0.8 * np.exp(rng.normal(0, 0.05)),
                             memory_mb=30 + b * np.exp(rng.normal(0, 0.05))))
    return pd.DataFrame(rows)


def test_scaling_curve_needs_enough_architectures(tmp_path):
    from carb.studies import analyses as analysis

    few = analysis.scaling(_scaling_data(3).assign(device="few"))
    many = analysis.scaling(_scaling_data(_figures.MIN_LINKED_ARCHS, seed=1).assign(device="many"))
    why = _figures.scaling_not_drawn(few.summary)
    lat = few.summary.target == "latency_ms"
    assert why[lat].iloc[0].startswith("curve not drawn: 3 architectures")
    assert (why[few.summary.target == "energy_j"] == "").all()  # no energy: its own note, no curve to refuse
    assert _figures.scaling_curves(few.profile, few.summary, tmp_path / "few.png") is None
    assert not (tmp_path / "few.png").exists()
    assert (_figures.scaling_not_drawn(many.summary) == "").all()
    both = (pd.concat([few.profile, many.profile]), pd.concat([few.summary, many.summary], ignore_index=True))
    path = _figures.scaling_curves(*both, tmp_path / "both.png")
    assert path is not None and path.stat().st_size > 1000


def _overlapping_labels(fig) -> list[tuple[str, str]]:
    """Pairs of visible tick labels on one axis whose boxes overlap, once drawn."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # the figure is closed after saving: draw it on a fresh canvas
    canvas.draw()
    renderer = canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            labels = [t for t in axis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
            boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels]
            for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
                if a.overlaps(b):
                    bad.append((ta, tb))
    return bad


def test_demo_figure_log_labels_do_not_overlap(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from carb import demo

    seen = []
    real = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: (seen.append(self), real(self, *a, **k))[1])
    # SYNTHETIC values in the ranges the demo met on cpu-2t: memory 20..115 MB (under a decade,
    # where matplotlib labels minor ticks 2x10^1, 3x10^1, 4x10^1 ... and they collide), latency 0.25..190 ms
    rng = np.random.default_rng(0)

    def frame(n, lo, hi):
        mem = np.exp(rng.uniform(np.log(lo[0]), np.log(hi[0]), n))
        lat = np.exp(rng.uniform(np.log(lo[1]), np.log(hi[1]), n))
        out = pd.DataFrame({"memory_mb": mem, "latency_ms": lat})
        for t in ("memory_mb", "latency_ms"):
            p = out[t] * np.exp(rng.normal(0, 0.1, n))
            out[f"pred_{t}"], out[f"pred_{t}_lo"], out[f"pred_{t}_hi"] = p, 0.8 * p, 1.25 * p
        return out

    calib, val = frame(12, (30, 1.0), (115, 127)), frame(16, (20, 0.25), (111, 188))
    feas = pd.DataFrame({"latency_ms": np.exp(rng.uniform(-1, 1.3, 200)), "flops_per_image": 10 ** rng.uniform(5.6, 8.4, 200)})
    demo._figures(tmp_path, calib, val, feas, feas.head(30), ["memory_mb", "latency_ms"])
    assert (tmp_path / "measured_vs_predicted.png").exists() and (tmp_path / "pareto.png").exists()
    assert len(seen) == 2
    for fig in seen:
        assert _overlapping_labels(fig) == []
