"""carb report on a small SYNTHETIC dataset and a tiny screening made with a SYNTHETIC
predictor: files, self-containment, the CLI's errors, and the page in headless Chromium."""

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from carb.decide.screen import screen
from carb.families import space
from carb.families.features import compute
from carb.report import MAX_EXPLORER_POINTS, ReportError, load_screen, write_report
from tests._helpers import chromium, chromium_dump_dom

SVG_NS = "http://www.w3.org/2000/svg"  # a namespace name in the page's script, never fetched


def synthetic_dataset(n=160, device="synthetic-a", factor=1.0, seed=0):
    """SYNTHETIC measurements of ``n`` cpu-space configs: latency from FLOPs, memory from
    bytes, energy = 15 W x latency, with 5% noise. A valid CARB dataset (schema, config ids)."""
    rng = np.random.default_rng(seed)
    cands = space.load("cpu").to_frame().sample(n, random_state=seed).reset_index(drop=True)
    f = compute(cands)
    noise = np.exp(rng.normal(0, 0.05, n))
    lat = factor * (0.1 + f.flops.to_numpy(float) / 2e8) * noise
    mem = 20 + (f.weight_bytes + f.live_activation_bytes).to_numpy(float) / 1e6
    return cands.assign(device=device, status="ok", message=None, latency_ms=lat, memory_mb=mem, energy_j=0.015 * lat)


class Synthetic:
    """SYNTHETIC predictor for the screening: the same made-up device, +-10% intervals."""

    targets_ = ["energy_j", "latency_ms", "memory_mb"]

    def predict(self, df):
        f = compute(df)
        lat = 0.1 + f.flops.to_numpy(float) / 2e8
        point = {
            "latency_ms": lat,
            "energy_j": 0.015 * lat,
            "memory_mb": 20 + (f.weight_bytes + f.live_activation_bytes).to_numpy(float) / 1e6,
        }
        out = pd.DataFrame(index=df.index)
        for t in self.targets_:
            out[t], out[f"{t}_lo"], out[f"{t}_hi"] = point[t], 0.9 * point[t], 1.1 * point[t]
        return out


@pytest.fixture(scope="module")
def screen_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("screen")
    res = screen(
        space.load("cpu").to_frame().sample(600, random_state=1), Synthetic(), {"latency_ms": 5.0, "memory_mb": 60.0}
    )
    res.shortlist.to_parquet(d / "shortlist.parquet")
    res.feasible.to_parquet(d / "feasible.parquet")
    (d / "summary.json").write_text(json.dumps(res.summary, default=float))
    assert 5 < len(res.shortlist) < len(res.feasible)
    return d


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("data") / "synthetic-a.parquet"
    synthetic_dataset().to_parquet(p)
    return p


@pytest.fixture(scope="module")
def report(tmp_path_factory, data_file, screen_dir):
    out = tmp_path_factory.mktemp("report")
    path = write_report(out, data=[str(data_file)], screen_dir=screen_dir)
    return path


def _explorer_json(page):
    m = re.search(r'<script type="application/json" id="carb-data">(.*?)</script>', page, re.S)
    return json.loads(m.group(1))


def test_report_files_and_numbers(report, screen_dir):
    out = report.parent
    assert report.name == "report.html"
    for f in ("report.json", "pareto.png", "measured_vs_predicted.png", "importance.png"):
        assert (out / f).stat().st_size > 1000, f
    assert not (out / "transfer.png").exists()  # one device: no heat map
    # 160 sampled configs link only 14 architectures across batch sizes: too few for a curve
    assert not (out / "scaling.png").exists()
    doc = json.loads((out / "report.json").read_text())
    assert doc["model"]["held_out"] and doc["model"]["checked_on"] == "synthetic-a"
    assert set(doc["accuracy"]) == {"energy_j", "latency_ms", "memory_mb"}
    assert doc["accuracy"]["latency_ms"]["r2_log"] > 0.8
    scal = {s["target"]: s for s in doc["scaling"]}
    assert scal["latency_ms"]["factor"] > 1 and scal["memory_mb"]["per_image_gain"] > 1
    short = pd.read_parquet(screen_dir / "shortlist.parquet")
    assert doc["pareto"]["source"] == "screening" and doc["pareto"]["shortlist"] == len(short)
    assert any("one device only" in n for n in doc["notes"])
    assert any("curve not drawn: 14 architectures" in n for n in doc["notes"])
    assert "no curve (14 architectures measured at two or more batch sizes" in report.read_text()
    assert {r["input"] for r in doc["importance"]} >= {"batch", "architecture"}


def test_report_is_self_contained(report, screen_dir):
    page = report.read_text()
    # no resource from elsewhere: every image is inline, no external script, style or font
    assert not re.search(r'(src|href)\s*=\s*["\']?\s*(https?:)?//', page, re.I)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//|<link\b|\bfetch\(|XMLHttpRequest|<iframe", page, re.I)
    assert "http://" not in page.replace(SVG_NS, "") and "https://" not in page
    assert page.count('src="data:image/png;base64,') == 3  # no scaling curve from 14 architectures
    data = _explorer_json(page)
    short = pd.read_parquet(screen_dir / "shortlist.parquet")
    assert data["n_shortlist"] == len(short) == sum(data["points"]["shortlist"])
    assert len(data["points"]["label"]) == len(pd.read_parquet(screen_dir / "feasible.parquet"))
    assert data["default_axes"] == ["latency_ms", "flops_per_image"]
    assert data["points"]["lo"]["latency_ms"][0] < data["points"]["values"]["latency_ms"][0]


def test_report_two_devices_measured_front_and_model(tmp_path, data_file):
    from carb.model import CARB, save

    a = pd.read_parquet(data_file)
    b = synthetic_dataset(device="synthetic-b", factor=2.5)
    model = CARB(preset="fast").fit(a)
    save(model, tmp_path / "model")
    path = write_report(tmp_path / "out", data=[a, b], model=tmp_path / "model")
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (tmp_path / "out" / "transfer.png").exists()
    tr = doc["transfer"]
    assert tr["devices"] == ["synthetic-a", "synthetic-b"] and len(tr["matrix"]) == 2 * 2 * 3
    pairs = {(p["a"], p["b"], p["target"]): p for p in tr["pairs"]}
    assert pairs[("synthetic-a", "synthetic-b", "memory_mb")]["factor"] == pytest.approx(1.0)
    # a given model is checked on every row (in-sample) and said so
    assert doc["model"]["held_out"] is False and doc["model"]["description"].startswith("model bundle")
    assert doc["accuracy"]["latency_ms"]["n"] == len(a)
    # without a screening, the explorer shows the measured front of the first dataset
    assert doc["pareto"]["source"] == "measured" and doc["pareto"]["device"] == "synthetic-a"
    data = _explorer_json(path.read_text())
    assert data["n_shortlist"] == doc["pareto"]["shortlist"] and len(data["points"]["label"]) == len(a)


def test_report_caps_explorer_points(tmp_path, monkeypatch):
    import carb.report as rep

    monkeypatch.setattr(rep, "MAX_EXPLORER_POINTS", 50)
    df = synthetic_dataset(n=300)
    path = write_report(tmp_path, data={"synthetic": df}, transfer=False)
    data = _explorer_json(path.read_text())
    n_short = data["n_shortlist"]
    assert len(data["points"]["label"]) == 50 + n_short and data["n_feasible_total"] == 300 - n_short
    assert MAX_EXPLORER_POINTS == 5000


@pytest.fixture(scope="module")
def empty_report(tmp_path_factory, data_file):
    """A screening nothing passes: the report still stands, with an empty explorer."""
    d = tmp_path_factory.mktemp("empty-screen")
    res = screen(space.load("cpu").to_frame().sample(100, random_state=2), Synthetic(), {"latency_ms": 1e-6})
    assert res.summary["feasible"] == 0
    res.shortlist.to_parquet(d / "shortlist.parquet")
    res.feasible.to_parquet(d / "feasible.parquet")
    (d / "summary.json").write_text(json.dumps(res.summary, default=float))
    return write_report(tmp_path_factory.mktemp("empty-report"), data=[str(data_file)], screen_dir=d, transfer=False)


def test_report_with_empty_screening(empty_report):
    doc = json.loads((empty_report.parent / "report.json").read_text())
    assert doc["pareto"]["feasible"] == 0 and doc["pareto"]["shortlist"] == 0
    assert not (empty_report.parent / "pareto.png").exists() and doc["accuracy"]
    data = _explorer_json(empty_report.read_text())
    assert data["n_shortlist"] == 0 and data["points"]["label"] == []


def test_report_errors(tmp_path, data_file):
    with pytest.raises(ReportError, match="no such dataset"):
        write_report(tmp_path, data=["nope-dataset"])
    with pytest.raises(ReportError, match="not a carb screen output"):
        write_report(tmp_path, data=[str(data_file)], screen_dir=tmp_path)
    with pytest.raises(ReportError, match="--model"):
        write_report(tmp_path, data=[str(data_file)], model=tmp_path)
    with pytest.raises(ReportError, match="holdout"):
        write_report(tmp_path, data=[str(data_file)], holdout=1.0)
    with pytest.raises(ReportError, match="no such folder"):
        load_screen(tmp_path / "missing")


def _app():
    from carb.cli.report import report

    app = typer.Typer()
    app.command("report")(report)

    @app.command()
    def other() -> None:  # a second command, so typer keeps "report" as a subcommand name
        pass

    return app


def test_cli_report(tmp_path, data_file, screen_dir):
    runner = CliRunner()
    r = runner.invoke(
        _app(),
        ["report", "--data", str(data_file), "--screen", str(screen_dir), "--out", str(tmp_path / "out"), "--json"],
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout[r.stdout.index("{") :])
    assert doc["pareto"]["shortlist"] == len(pd.read_parquet(screen_dir / "shortlist.parquet"))
    assert (tmp_path / "out" / "report.html").exists()


@pytest.mark.parametrize(
    "args, words",
    [
        (["--data", "nope-dataset"], "no such dataset"),
        (["--data", "{data}", "--screen", "{tmp}/missing"], "--screen"),
        (["--data", "{data}", "--screen", "{tmp}/notscreen"], "not a carb screen output"),
        (["--data", "{data}", "--model", "{tmp}/missing"], "--model"),
        (["--data", "{data}", "--holdout", "0"], "--holdout"),
    ],
)
def test_cli_report_usage_errors(tmp_path, data_file, args, words):
    from carb.cli import UsageError

    args = [a.format(data=data_file, tmp=tmp_path) for a in args]
    (tmp_path / "notscreen").mkdir()  # a folder, but no carb screen output
    r = CliRunner().invoke(_app(), ["report", *args, "--out", str(tmp_path / "out")])
    assert isinstance(r.exception, UsageError), r.output
    msg = str(r.exception)
    assert words in msg and "\n" not in msg


# -- the page in a real browser -----------------------------------------------------------------


def _load_in_chromium(page: Path, tmp: Path, fragment: str = "") -> tuple[str, str]:
    """Open the page headless, let its scripts run, return (DOM after scripts, browser log)."""
    p = chromium_dump_dom(page.resolve().as_uri() + fragment, tmp, extra=("--enable-logging=stderr", "--v=0"))
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout, p.stderr


def _body(dom: str) -> dict[str, str]:
    m = re.search(r"<body\b([^>]*)>", dom)
    return dict(re.findall(r'data-([a-z]+)="([^"]*)"', m.group(1)))


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_report_in_headless_chromium(report, screen_dir, tmp_path):
    short = pd.read_parquet(screen_dir / "shortlist.parquet")
    feas = pd.read_parquet(screen_dir / "feasible.parquet")
    dom, log = _load_in_chromium(report, tmp_path / "profile")
    body = _body(dom)
    assert body["ready"] == "1", body
    assert body["errors"] == "0", body
    # the page writes nothing to the console; Chromium logs any page console line as ":CONSOLE:<line>"
    assert not re.search(r"Uncaught|:CONSOLE[:(]", log), log[-3000:]
    # the Pareto plot draws one point per shortlisted config
    assert int(body["points"]) == len(short)
    assert len(re.findall(r'<circle class="pareto-point', dom)) == len(short)
    assert int(body["feasible"]) == len(feas) - len(short)
    assert int(body["visible"]) == len(feas)

    # a budget in the URL hides the configs over it (and nothing else)
    dom, _ = _load_in_chromium(report, tmp_path / "profile2", "#latency_ms=1.5&x=latency_ms&y=memory_mb")
    body = _body(dom)
    assert body["errors"] == "0" and int(body["visible"]) == int((feas.latency_ms <= 1.5).sum())
    assert 0 < int(body["visible"]) < len(feas)


@pytest.mark.skipif(chromium() is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_empty_report_in_headless_chromium(empty_report, tmp_path):
    dom, log = _load_in_chromium(empty_report, tmp_path / "profile")
    body = _body(dom)
    assert body["ready"] == "1" and body["errors"] == "0" and body["points"] == "0", body
    assert "no configs to show" in dom and not re.search(r"Uncaught|:CONSOLE[:(]", log)


def test_report_reads_the_drift_corrected_latency_of_paired_rows(tmp_path):
    # SYNTHETIC: the machine's speed varied row to row; the raw medians are the clean latency
    # divided by it and the rows carry the paired sentinel's correction (latency_ms_norm)
    df = synthetic_dataset(n=160)
    speed = np.random.default_rng(3).uniform(0.6, 1.5, len(df))
    df = df.assign(
        latency_ms_norm=df.latency_ms,
        speed_index=speed,
        sentinel_ms=1.0 / speed,
        latency_ms=df.latency_ms / speed,
        extra=json.dumps({"pair_ratio": [1.0]}),
    )
    p = tmp_path / "synthetic-drift.parquet"
    df.to_parquet(p)
    write_report(tmp_path / "r", data=[str(p)], transfer=False)
    doc = json.loads((tmp_path / "r" / "report.json").read_text())
    assert doc["data"][0]["latency"].startswith("drift-corrected")
    # the fitted model is checked against the clean values: 5% noise, not the speed's 60-150%
    assert doc["accuracy"]["latency_ms"]["mape"] < 0.15
    assert "drift-corrected (latency_ms_norm)" in (tmp_path / "r" / "report.html").read_text()


def test_a_frame_is_data_not_the_name_of_the_nb201_report() -> None:
    from carb.report import _names_nb201

    frame = pd.DataFrame({"a": [1, 2]})
    assert not _names_nb201(frame) and not _names_nb201([frame]) and not _names_nb201([frame, frame])
    assert _names_nb201("nb201") and _names_nb201(["nb201"]) and not _names_nb201(["nb201", "cpu-1t"])
