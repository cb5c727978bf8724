"""carb.demo through the real pipeline with synthetic measurements: precisions the CPU runs on
fallback kernels (its flags faked), the source setting, drift and machine states met while
measuring (retakes, recalibration), the sitting's floor, and the figures' axis labels."""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np
import pandas as pd
import pytest

import carb.measure
from carb import demo
from carb.families import space
from tests._helpers import run_carb


def _isa(bf16: bool):
    return lambda: {
        "flags": ["avx2"] + (["avx512_bf16"] if bf16 else []),
        "torch_capability": "AVX2",
        "native": {"bf16": bf16, "fp16": False},
    }


def test_foreign_precisions_reads_the_cpu() -> None:
    from carb.measure import foreign_precisions

    assert foreign_precisions("cpu", ["bf16", "fp32"], _isa(False)()) == ["bf16"]
    assert foreign_precisions("cuda:0", ["bf16", "fp32"], _isa(False)()) == []  # GPUs: not judged by CPU flags
    assert foreign_precisions("cpu", ["bf16", "fp32"], _isa(True)()) == []
    unread = {"flags": None, "torch_capability": None, "native": None}
    assert foreign_precisions("cpu", ["bf16", "fp32"], unread) == []  # unreadable flags: leave the space whole


def test_cpu_isa_is_recorded_in_provenance() -> None:
    from carb.measure import host_facts

    isa = host_facts()["cpu_isa"]
    assert set(isa) == {"flags", "torch_capability", "native"}
    if isa["flags"] is not None:  # a Linux /proc/cpuinfo
        assert isa["native"]["bf16"] == any(f in isa["flags"] for f in ("avx512_bf16", "amx_bf16", "avx_ne_convert"))


def test_demo_leaves_out_a_precision_the_cpu_runs_on_fallback_kernels(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))
    seen: list[set] = []

    def measure(frame, what, again=False):
        f = frame.reset_index(drop=True)
        seen.append(set(f["precision"]))
        lat = 0.5 + f["batch"].to_numpy(float) * f["depth"].to_numpy(float) * 0.1  # synthetic costs
        return f.assign(status="ok", latency_ms=lat, memory_mb=30.0 + f["batch"].to_numpy(float), energy_j=np.nan)

    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = demo.run_demo(
            demo.DemoSettings(out=tmp_path / "d", samples=6, validate=3, control=3), measure=measure, say=said.append
        )
    # calibration, its second visits and validation: no bf16 measured
    assert len(seen) == 3 and all(p == {"fp32"} for p in seen)
    why = s["precisions_left_out"]["bf16"]
    assert "no native bf16" in why and "median" in why  # with cpu-1t's own bf16 / fp32 ratio
    assert any(m.startswith("cpu space without bf16") for m in said)
    space_fp32 = int((space.load("cpu").to_frame()["precision"] == "fp32").sum())
    assert s["screening"]["candidates"] == space_fp32
    assert set(pd.read_csv(tmp_path / "d" / "shortlist.csv")["precision"]) == {"fp32"}
    assert s["source_dataset"] == "cpu-1t"  # the default source


def test_demo_source_setting_trains_on_that_dataset(tmp_path, monkeypatch) -> None:
    # cpu-avx2-1t was measured on a CPU of this kind (AVX2, no native bf16): its source model is
    # trained on its 592 rows, at their campaign's median speed (the paired sentinel's rows)
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))

    def measure(frame, what, again=False):
        f = frame.reset_index(drop=True)
        lat = 0.5 + f["batch"].to_numpy(float) * f["depth"].to_numpy(float) * 0.1  # synthetic costs
        return f.assign(status="ok", latency_ms=lat, memory_mb=30.0 + f["batch"].to_numpy(float), energy_j=np.nan)

    said: list[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = demo.run_demo(
            demo.DemoSettings(out=tmp_path / "d", samples=6, validate=3, control=3, source="cpu-avx2-1t"),
            measure=measure,
            say=said.append,
        )
    assert s["source_dataset"] == "cpu-avx2-1t" and s["source_model"]["rows"] == 592
    assert any("trained on 592 configs measured on cpu-avx2-1t (shipped)" in m for m in said), said
    # trained on these rows now, whichever source an earlier demo of the process trained
    assert not any("earlier in this process" in m for m in said), said
    # the source data has no bf16 to compare with: the reason says what the CPU lacks, no ratio
    assert "no native bf16" in s["precisions_left_out"]["bf16"]
    assert "median" not in s["precisions_left_out"]["bf16"]


def test_demo_cli_refuses_an_unknown_source_before_measuring(tmp_path) -> None:
    r = run_carb("demo", "--out", tmp_path / "d", "--source", "nope")
    assert r.returncode == 2 and r.stderr.startswith("error: --source nope: ") and len(r.stderr.splitlines()) == 1
    assert not (tmp_path / "d" / "demo.duckdb").exists()


def test_demo_precisions_setting_wins(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(carb.measure, "cpu_isa", _isa(False))
    with pytest.raises(ValueError, match="no config of `cpu` left"):
        demo.run_demo(
            demo.DemoSettings(out=tmp_path / "d", samples=6, precisions=("fp16",)),
            measure=lambda f, w: f,
            say=lambda m: None,
        )


@pytest.mark.parametrize(
    "cpuinfo,native",
    [
        ("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n", {"bf16": False, "fp16": False}),
        ("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16\n", {"bf16": True, "fp16": False}),
        ("processor\t: 0\nFeatures\t: fp asimd asimdhp bf16 sve\n", {"bf16": True, "fp16": True}),  # Arm
        ("processor\t: 0\n", None),  # no flags line: nothing claimed
    ],
)
def test_cpu_isa_from_cpuinfo(monkeypatch, cpuinfo, native) -> None:
    import builtins
    import io

    real_open = builtins.open  # /proc/cpuinfo reads as the case's text; every other file as it is
    monkeypatch.setattr(
        builtins,
        "open",
        lambda path, *a, **k: io.StringIO(cpuinfo) if path == "/proc/cpuinfo" else real_open(path, *a, **k),
    )
    assert carb.measure.cpu_isa()["native"] == native


def test_demo_reports_drift_first_and_scores_raw_and_corrected(tmp_path, cpu1t_source):
    """run_demo with a synthetic measure(): calibration rows at sentinel 1.0 ms, validation
    rows measured 25% slower (latency and sentinel x1.25): synthetic values, real pipeline."""
    from carb.demo import DemoSettings, run_demo

    source = cpu1t_source  # as the demo trains it

    def measure(frame, what, again=False):
        # a synthetic device 1.5x the source's prediction, 1.25x slower still while validating
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        slow = 1.25 if what == "validating" else 1.0
        return f.assign(
            status="ok",
            latency_ms=p["latency_ms"].to_numpy() * 1.5 * slow,
            memory_mb=p["memory_mb"].to_numpy(),
            energy_j=np.nan,
            sentinel_ms=0.6 * slow,
        )

    said = []
    s = run_demo(
        DemoSettings(out=tmp_path / "demo", samples=6, validate=3, control=3), measure=measure, say=said.append
    )
    d = s["drift"]
    assert d["speed_change"] == pytest.approx(1 / 1.25 - 1) and d["exceeds"]
    assert "slower" in d["line"]
    # the drift line comes before the validation figures when it exceeds the noise
    assert said.index(d["line"]) < next(i for i, m in enumerate(said) if m.startswith("validated on"))
    raw, corr = s["validation_median_abs_error"]["latency_ms"], s["validation_median_abs_error_corrected"]["latency_ms"]
    # the map learnt the 1.5x; raw, only the drift is left (pred / measured - 1 = 1 / 1.25 - 1)
    assert raw == pytest.approx(0.2, abs=0.02) and corr < 0.02
    # the corrected values sit on the map: every one inside its interval, whatever the raw coverage
    assert s["validation_interval_coverage_corrected"]["latency_ms"] == 1.0
    val = pd.read_csv(tmp_path / "demo" / "validation.csv")
    assert val.latency_ms_corrected.to_numpy() == pytest.approx(val.latency_ms.to_numpy() / 1.25)
    # the budget calls are scored against the corrected latencies too
    from carb.decide.validate import decision_metrics, truly_feasible

    vc = s["validation_corrected"]
    assert vc["reference"] == "the calibration's median sentinel speed" and vc["reference_ms"] == pytest.approx(0.6)
    want = decision_metrics(
        val.call.to_numpy(), truly_feasible(val.assign(latency_ms=val.latency_ms_corrected), s["budgets"])
    )
    assert {k: vc[k] for k in want} == pytest.approx(want)
    # false accepts both ways, raw and drift-corrected: said, and kept in summary.json
    from carb.decide.validate import false_accept_line

    assert false_accept_line(s["validation"]) in said
    assert any(m.startswith("drift-corrected: budget accuracy") and m.endswith(false_accept_line(vc)) for m in said)
    kept = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert kept["validation"]["false_accepts_line"] == false_accept_line(s["validation"])
    assert kept["validation_corrected"]["false_accepts_line"] == false_accept_line(vc)
    # synthetic truth is a line of the source's prediction in log: the sitting's floor is ~0
    assert s["validation_floor_median_abs_error"]["latency_ms"] < 1e-6
    assert s["validation_floor_median_abs_error_raw"]["latency_ms"] < 1e-6
    assert any(m.startswith("this sitting's floor") and "raw" in m for m in said)
    assert not any("added scatter" in m for m in said)


def test_demo_says_when_the_drift_correction_adds_scatter(tmp_path, cpu1t_source):
    """SYNTHETIC: the device's latencies are an exact line of the source's prediction, but
    the validation rows' sentinels scatter (+-40%, as a sentinel that does not follow the
    configs): corrected, they scatter too, and the demo says the correction added scatter."""
    from carb.demo import DemoSettings, run_demo

    source = cpu1t_source
    rng = np.random.default_rng(0)

    def measure(frame, what, again=False):
        f = frame.reset_index(drop=True)
        p = source.predict(f)
        sent = 0.6 * (np.exp(rng.uniform(-0.4, 0.4, len(f))) if what == "validating" else np.ones(len(f)))
        return f.assign(
            status="ok",
            latency_ms=p["latency_ms"].to_numpy() * 1.5,
            memory_mb=p["memory_mb"].to_numpy(),
            energy_j=np.nan,
            sentinel_ms=sent,
        )

    said = []
    # retakes=0: the scattered sentinels would otherwise be measured again (test below)
    s = run_demo(
        DemoSettings(out=tmp_path / "demo", samples=6, validate=5, control=5, retakes=0),
        measure=measure,
        say=said.append,
    )
    assert s["validation_floor_median_abs_error_raw"]["latency_ms"] < 1e-6
    assert s["validation_floor_median_abs_error"]["latency_ms"] > 0.05
    assert any("added scatter" in m for m in said)


def test_sitting_floor_is_the_in_sample_map_error():
    """sitting_floor fits log y = a + b log(source) on the rows themselves: synthetic
    truth 2 x source^0.8 with every other row 10% high leaves a median error near 5%."""
    from carb.demo import sitting_floor

    class Source:
        def predict(self, df):
            return pd.DataFrame({"latency_ms": df["s"].to_numpy(float)})

    rows = pd.DataFrame({"s": np.geomspace(0.5, 500, 16)})
    bump = np.where(np.arange(16) % 2 == 0, 1.1, 1.0)
    truth = pd.DataFrame({"latency_ms": 2 * rows.s**0.8 * bump})
    fl = sitting_floor(Source(), rows, truth, ["latency_ms", "memory_mb"])
    assert set(fl) == {"latency_ms"}  # no truth column for memory
    # the fit sits midway in log between the two groups: each misses by about sqrt(1.1) - 1
    assert fl["latency_ms"] == pytest.approx(np.sqrt(1.1) - 1, rel=0.05)
    exact = sitting_floor(Source(), rows, pd.DataFrame({"latency_ms": 2 * rows.s**0.8}), ["latency_ms"])
    assert exact["latency_ms"] < 1e-9


def _two_state_demo(out, source, slow_of, retakes=2):
    """run_demo on a SYNTHETIC device 1.5x the source's latency with two states, as a
    2-thread worker on our VMs: in the slow one the sentinel takes 1.0 ms against 0.5 and a
    config 1.2x (no one ratio corrects both). ``slow_of(what, again, n, asked)``: which of
    the n configs of a call are timed in the slow state. Returns (summary, said, asked), asked
    the (what, again, n) of every measure() call."""
    from carb.demo import DemoSettings, run_demo

    asked, said = [], []

    def measure(frame, what, again=False):
        f = frame.reset_index(drop=True)
        slow = np.broadcast_to(slow_of(what, again, len(f), asked), len(f))
        asked.append((what, again, len(f)))
        p = source.predict(f)["latency_ms"].to_numpy() * 1.5
        return f.assign(
            status="ok",
            latency_ms=p * np.where(slow, 1.2, 1.0),
            memory_mb=50.0,
            energy_j=np.nan,
            sentinel_ms=np.where(slow, 1.0, 0.5),
        )

    s = run_demo(
        DemoSettings(out=out, samples=6, validate=4, control=4, retakes=retakes), measure=measure, say=said.append
    )
    return s, said, asked


AGAIN = "measuring again (another machine state)"
#: the K configs not measured again in calibration, visited once more: their memory scatter
SCATTER = "measuring again (the scatter between visits)"


def test_demo_measures_again_the_visits_of_another_machine_state(tmp_path, cpu1t_source):
    """Half the validation visits fall in the slow state; measured again they come back in
    the fast one and the demo's error is the map's (~0), where without retakes it is the
    state's."""

    def slow_of(what, again, n, asked):
        return (np.arange(n) % 2 == 0) & (what == "validating")

    s, said, asked = _two_state_demo(tmp_path / "d2", cpu1t_source, slow_of)
    st = s["machine_state"]["validation"]
    assert (st["off"], st["back"], st["left"], st["visits"]) == (4, 4, 0, 4) and st["ref_ms"] == pytest.approx(0.5)
    assert s["machine_state"]["calibration"]["off"] == 0
    assert asked == [("characterizing", False, 6), (SCATTER, True, 6), ("validating", False, 8), (AGAIN, True, 4)]
    assert any(m.startswith("4 of 8 validation visits were timed in another state") for m in said)
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01
    val = pd.read_csv(tmp_path / "d2" / "validation.csv")
    assert (val.sentinel_ms == 0.5).all() and sorted(val.retakes) == [0] * 4 + [1] * 4
    s0, said0, asked0 = _two_state_demo(tmp_path / "d0", cpu1t_source, slow_of, retakes=0)
    assert len(asked0) == 2 and s0["machine_state"]["validation"]["left"] == 4
    # the second demo of the process on cpu-1t's rows: the source trained before serves
    assert any(m.endswith("(trained on these rows earlier in this process)") for m in said0), said0
    # without retakes the slow half corrected by the sentinel's 2x: 1.2 / 2 = 0.6 of the truth
    assert s0["validation_median_abs_error_corrected"]["latency_ms"] > 0.2


def test_demo_recalibrates_in_the_faster_state_validation_ran_in(tmp_path, cpu1t_source):
    """The whole calibration is timed in the slow state, validation and every retake in the
    fast one. The demo measures the K configs again in the validation's state and refits
    the map on them: its error is the map's (~0); without retakes it is the state's (1.2x:
    20%)."""

    def slow_of(what, again, n, asked):
        return what == "characterizing"

    s, said, asked = _two_state_demo(tmp_path / "d2", cpu1t_source, slow_of)
    st = s["machine_state"]
    assert st["recalibrated"] and st["calibration"]["back"] == 6 and st["calibration"]["ref_ms"] == pytest.approx(0.5)
    assert st["calibration"]["first"]["off"] == 0 and st["validation"]["off"] == 0
    assert asked == [("characterizing", False, 6), (SCATTER, True, 6), ("validating", False, 8), (AGAIN, True, 6)]
    assert any(
        m.startswith("6 of 6 calibration visits timed in another state than the faster state validation ran in")
        for m in said
    )
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01
    k = pd.read_csv(tmp_path / "d2" / "characterized.csv")
    assert (k.sentinel_ms == 0.5).all() and (k.retakes == 1).all()
    s0, _, asked0 = _two_state_demo(tmp_path / "d0", cpu1t_source, slow_of, retakes=0)
    assert len(asked0) == 2 and not s0["machine_state"]["recalibrated"]
    assert s0["validation_median_abs_error"]["latency_ms"] == pytest.approx(0.2, abs=0.02)  # predicted 1.2x


def test_demo_measures_the_calibration_again_after_a_slow_spell(tmp_path, cpu1t_source):
    """3 of 6 calibration visits in the slow state and both of their retakes during
    calibration too (a spell of tens of seconds); validation and later retakes in the fast
    state. After validation the 3 are measured again, come back, and the map is refitted
    on K visits of one state."""

    def slow_of(what, again, n, asked):
        if what == "characterizing":
            return np.arange(n) % 2 == 1
        return again and not any(w == "validating" for w, _, _ in asked)  # the spell ends with calibration

    s, said, asked = _two_state_demo(tmp_path / "d", cpu1t_source, slow_of)
    st = s["machine_state"]
    assert st["recalibrated"] and st["calibration"]["first"]["left"] == 3 and st["calibration"]["back"] == 3
    # K, two retakes in the spell, the 3 others once more, validation, one after it
    assert [n for _, _, n in asked] == [6, 3, 3, 3, 8, 3]
    assert any(
        m.startswith("3 of 3 calibration visits timed in another state than the calibration's state") for m in said
    )
    assert s["validation_median_abs_error"]["latency_ms"] < 0.01


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

    from carb.demo import draw_figures

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
    feas = pd.DataFrame(
        {"latency_ms": np.exp(rng.uniform(-1, 1.3, 200)), "flops_per_image": 10 ** rng.uniform(5.6, 8.4, 200)}
    )
    draw_figures(tmp_path, calib, val, feas, feas.head(30), ["memory_mb", "latency_ms"])
    assert (tmp_path / "measured_vs_predicted.png").exists() and (tmp_path / "pareto.png").exists()
    assert len(seen) == 2
    for fig in seen:
        assert _overlapping_labels(fig) == []


def test_demo_summary_table_says_false_accepts_both_ways(tmp_path, monkeypatch):
    import io

    from rich.console import Console

    from carb.cli import demo as cli_demo
    from carb.decide.validate import decision_metrics

    # SYNTHETIC calls and truth: 2 of 3 over-budget configs accepted, 2 of 4 accepts over budget
    v = decision_metrics(
        np.array(["accept"] * 4 + ["reject", "measure"]), np.array([True, True, False, False, False, True])
    )
    summary = {
        "screening": {"candidates": 10, "shortlist": 4, "pruning_ratio": 0.6},
        "validation": v,
        "validation_corrected": {**v, "reference": "the calibration's median sentinel speed"},
        "budgets": {"latency_ms": 1.0},
        "validation_median_abs_error": {},
        "timings": {"total_s": 1.0},
    }
    buf = io.StringIO()
    monkeypatch.setattr(cli_demo, "console", Console(file=buf, width=400))  # one table row per line
    cli_demo._print_summary(summary, tmp_path)
    out = buf.getvalue()
    assert "2 of 3 over-budget configs accepted (66.7%)" in out
    assert "2 of 4 accepted are over budget (50.0%)" in out
    corrected = next(x for x in out.splitlines() if "drift-corrected" in x)
    assert "2 of 3 over-budget configs accepted" in corrected and "2 of 4 accepted are over budget" in corrected
