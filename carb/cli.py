"""The ``carb`` command: thin Typer commands over the library.

Bad input (unknown space, bad value, unreadable file, store in use) prints one line
``error: ...`` on stderr and exits with code 2, never a traceback.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from carb.space import SpaceError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="CARB: energy, latency and peak memory of CNN inference, per device, before you profile.")
space_app = typer.Typer(no_args_is_help=True, help="Configuration spaces: list and inspect.")
dataset_app = typer.Typer(no_args_is_help=True, help="Measured datasets: summarize and export a store.")
app.add_typer(space_app, name="space")
app.add_typer(dataset_app, name="dataset")

# 120 columns when piped (rich would use 80), so tables of configs stay readable in logs
console = Console(width=None if sys.stdout.isatty() else 120)
err = Console(stderr=True)


class UsageError(Exception):
    """Bad input from the user: reported as one line with exit code 2."""


def fail(msg: str) -> None:
    raise UsageError(msg)


# -- space --------------------------------------------------------------------------------


@space_app.command("list")
def space_list(json_out: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List the built-in spaces with their sizes."""
    from carb import space

    rows = [(n, len(s), s.description.split("\n")[0]) for n in space.builtin_names() for s in [space.load(n)]]
    if json_out:
        print(json.dumps([{"name": n, "count": c, "description": d} for n, c, d in rows], indent=2))
        return
    t = Table("space", "configs", "description")
    for n, c, d in rows:
        t.add_row(n, f"{c:,}", d)
    console.print(t)


@space_app.command("show")
def space_show(name: str = typer.Argument(..., help="Built-in space name or TOML file."),
               json_out: bool = typer.Option(False, "--json", help="Print JSON (with `count`).")) -> None:
    """Show a space: its size and the values of each parameter."""
    from carb import space

    s = space.load(name)
    values = s.values()
    if json_out:
        print(json.dumps({"name": s.name, "source": s.source, "count": len(s), "description": s.description,
                          "values": values, "constraints": s.constraints}, indent=2))
        return
    console.print(f"[bold]{s.name}[/bold] ({s.source}): {len(s):,} configs")
    if s.description:
        console.print(s.description)
    t = Table("parameter", "values")
    for k, v in values.items():
        t.add_row(k, ", ".join(str(x) for x in v))
    console.print(t)


# -- characterize -------------------------------------------------------------------------


@app.command()
def characterize(
    space_name: Optional[str] = typer.Option(None, "--space", help="Built-in space name or TOML file."),
    sample: Optional[int] = typer.Option(None, "--sample", min=1, help="Measure a sample of N configs of the space."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample."),
    method: str = typer.Option("stratified", "--method", help="Sampling: stratified (space-filling) or uniform."),
    configs_file: Optional[Path] = typer.Option(None, "--configs", help="Parquet/CSV/JSONL file of configs to measure."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads to pin (default: 1)."),
    store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store; re-running resumes."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Label rows are stored under (default: cpu-<T>t or the GPU's name)."),
    lock_clocks: bool = typer.Option(True, "--lock-clocks/--no-lock-clocks", help="GPU: lock graphics/memory clocks (DVFS lockdown) and restore them after."),
    ci_target: Optional[float] = typer.Option(None, "--ci-target", min=0.0, help="Stop repeating at this relative 95%% CI of the median (default 0.02 CPU, 0.01 GPU)."),
    max_time: Optional[float] = typer.Option(None, "--max-time", min=0.0, help="Cap on sampling seconds per config."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0, help="Wall-clock limit per config, seconds."),
    rounds: Optional[int] = typer.Option(None, "--rounds", min=1, help="Visits per config at different moments, pooled (default: 3 on CPU, 1 on GPU)."),
    chunk: int = typer.Option(16, "--chunk", min=1, help="Configs visited round-robin together when --rounds > 1."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Measure again the configs stored with a failure status."),
    remeasure: bool = typer.Option(False, "--remeasure", help="Measure again into the remeasurements table (drift check)."),
    executor: str = typer.Option("local", "--executor", help="local (this machine) or ray (every worker slot of a Ray cluster; pip install 'carb[ray]')."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: RAY_ADDRESS, else a local cluster)."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="Ray: use at most this many worker slots (default: all)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON at the end."),
) -> None:
    """Measure configs into a campaign store, on this machine or a Ray cluster (resumable; Ctrl-C keeps what is done)."""
    from dataclasses import replace

    from carb import space
    from carb.campaign import read_config_file, run_campaign
    from carb.measure import get_backend
    from carb.measure.base import Protocol
    from carb.store import Store

    if (space_name is None) == (configs_file is None):
        fail("give exactly one of --space or --configs")
    if method not in ("stratified", "uniform"):
        fail(f"--method: unknown value {method!r} (expected stratified or uniform)")
    if configs_file is not None:
        configs = read_config_file(str(configs_file))
        if sample is not None:
            fail("--sample works with --space, not --configs")
    else:
        sp = space.load(space_name)
        configs = sp.sample(sample, seed=seed, method=method) if sample else list(sp)
    protocol = Protocol.default_for(device)
    overrides = {k: v for k, v in (("ci_target", ci_target), ("max_time_s", max_time), ("timeout_s", timeout))
                 if v is not None}
    protocol = replace(protocol, **overrides)
    if device != "cpu" and threads is not None:
        fail("--threads applies to --device cpu only")
    if executor not in ("local", "ray"):
        fail(f"--executor: unknown value {executor!r} (expected local or ray)")
    if executor == "local" and (address is not None or workers is not None):
        fail("--address and --workers apply to --executor ray only")
    opts = {"threads": threads or 1} if device == "cpu" else {"lock_clocks": lock_clocks}
    try:
        if executor == "ray":
            from carb.ray_executor import RayExecutor

            with err.status("starting Ray worker slots..."):
                backend = RayExecutor(device, address=address, workers=workers, protocol=protocol,
                                      threads=threads or 1, lock_clocks=lock_clocks)
            err.print(f"ray: {backend.workers} worker slot(s) of {backend.slots_total} in the cluster")
        else:
            backend = get_backend(device, protocol=protocol, **opts)
    except (ValueError, RuntimeError) as e:  # unknown device, no GPU here, no Ray cluster, ...
        fail(str(e))

    failures = 0
    with backend, Store(store_path) as store:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                      TextColumn("{task.fields[current]}"), TextColumn("[red]{task.fields[failed]}"),
                      console=err, transient=False, disable=json_out and not sys.stderr.isatty()) as progress:
            task = progress.add_task("measuring", total=None, current="", failed="")

            def on_start(todo: int, skipped: int) -> None:
                progress.update(task, total=todo)
                if skipped:
                    progress.console.print(f"resuming: {skipped} of {todo + skipped} configs already in {store_path}")

            def on_config(cfg) -> None:
                progress.update(task, current=cfg.label())

            def on_result(cfg, m) -> None:
                nonlocal failures
                if m.status != "ok":
                    failures += 1
                    progress.console.print(f"[red]{m.status}[/red] {cfg.label()}: {m.message}")
                progress.update(task, advance=1, failed=f"{failures} failed" if failures else "")

            try:
                result = run_campaign(configs, backend, store, platform=platform,
                                      command=shlex.join(["carb", *sys.argv[1:]]), retry_failed=retry_failed,
                                      remeasure=remeasure, rounds=rounds or (3 if device == "cpu" else 1),
                                      chunk=chunk, on_start=on_start, on_config=on_config,
                                      on_result=on_result)
            except RuntimeError as e:  # e.g. every Ray worker slot lost; what is stored stays
                fail(str(e))
        summary = store.summary()
        rows = store.measurements(result.platform)
        rows = rows[rows.run_id == result.run_id]
    if json_out:
        print(json.dumps({**result.to_dict(), "store": str(store_path),
                          "summary": json.loads(summary.to_json(orient="records"))}, indent=2))
    else:
        _print_configs(rows)
        _print_summary(result, summary, store_path)
    if result.interrupted:
        raise typer.Exit(130)


def _print_configs(rows, limit: int = 30) -> None:
    """Per-config table of what this run measured (the slowest ``limit`` configs)."""
    if rows.empty:
        return
    from carb.space import configs_from_frame

    rows = rows.sort_values("latency_ms", ascending=False, na_position="first")
    title = f"measured now ({len(rows)} configs" + (f", slowest {limit} shown)" if len(rows) > limit else ")")
    t = Table("config", "status", "latency (ms)", "± 95% CI", "memory (MB)", "energy (J)", title=title)
    for cfg, r in zip(configs_from_frame(rows.head(limit)), rows.head(limit).itertuples(index=False)):
        ok = r.status == "ok"
        t.add_row(cfg.label(), r.status, f"{r.latency_ms:.3f}" if ok else "—",
                  f"{100 * r.latency_ms_ci_rel:.1f}%" if ok and r.latency_ms_ci_rel == r.latency_ms_ci_rel else "—",
                  f"{r.memory_mb:.1f}" if ok else "—",
                  f"{r.energy_j:.4f}" if ok and r.energy_j == r.energy_j and r.energy_j is not None else "—")
    console.print(t)


def _print_summary(result, summary, store_path: Path) -> None:
    console.print(f"\n[bold]{result.platform}[/bold]: measured {result.measured} now, "
                  f"{result.skipped} already stored; "
                  f"{result.wall_s:.1f} s wall, {result.timed_s:.1f} s in timed inference"
                  + (f" (overhead {result.overhead:.1f}x)" if result.timed_s else ""))
    _print_store_summary(summary)
    console.print(f"store: {store_path}  (export: carb dataset export --store {store_path} --out data.parquet)")


def _print_store_summary(summary) -> None:
    t = Table("platform", "status", "configs", "median latency (ms)", "median energy (J)",
              "median memory (MB)", "median latency CoV", title="store summary")

    def f(v, spec):
        return "—" if v is None or v != v else format(v, spec)

    for r in summary.itertuples(index=False):
        t.add_row(r.platform, r.status, str(r.configs), f(r.latency_ms, ".3f"), f(r.energy_j, ".4f"),
                  f(r.memory_mb, ".1f"), f(r.latency_cov, ".3f"))
    console.print(t)


# -- dataset ------------------------------------------------------------------------------


@dataset_app.command("list")
def dataset_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the datasets shipped with CARB (load one with carb.datasets.load(name))."""
    from dataclasses import asdict

    from carb import datasets

    infos = datasets.list()
    if json_out:
        print(json.dumps([asdict(d) for d in infos], indent=2))
        return
    t = Table("dataset", "rows", "description")
    for d in infos:
        t.add_row(d.name, f"{d.rows:,}" if d.rows is not None else "?", d.description)
    console.print(t)


@dataset_app.command("check")
def dataset_check(file: str = typer.Argument(..., help="Dataset file (.parquet/.csv) or shipped dataset name."),
                  max_cov: float = typer.Option(0.25, "--max-cov", help="Latency CoV above this is noisy."),
                  max_ci: float = typer.Option(0.05, "--max-ci", help="Relative 95%% CI of the median latency above this is noisy."),
                  json_out: bool = typer.Option(False, "--json", help="Print the problems as JSON.")) -> None:
    """Check a dataset: duplicates, failed configs, missing targets, noisy rows. Exit 1 on problems."""
    from carb import datasets

    df = datasets.load(file, features=False)
    problems = datasets.check(df, max_cov=max_cov, max_ci_rel=max_ci)
    if json_out:
        print(json.dumps({"rows": len(df), "problems": json.loads(problems.to_json(orient="records"))}, indent=2))
    else:
        counts = problems.problem.value_counts()
        t = Table("check", "rows with a problem", title=f"{file}: {len(df):,} rows")
        for name in ("duplicate", "failed", "missing target", "noisy"):
            t.add_row(name, str(int(counts.get(name, 0))))
        console.print(t)
        if len(problems):
            d = Table("problem", "config_id", "device", "detail", title=f"first {min(len(problems), 20)} problems")
            for r in problems.head(20).itertuples(index=False):
                d.add_row(r.problem, r.config_id, r.device, r.detail)
            console.print(d)
    if len(problems):
        raise typer.Exit(1)


@dataset_app.command("info")
def dataset_info(store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store."),
                 json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Summarize a store: runs, counts by status, medians of the targets."""
    from carb.store import Store

    with Store(store_path, read_only=True) as store:
        summary = store.summary()
        runs = store.runs()
    if json_out:
        print(json.dumps({"store": str(store_path), "runs": len(runs),
                          "summary": json.loads(summary.to_json(orient="records"))}, indent=2))
        return
    console.print(f"{store_path}: {len(runs)} run(s)")
    for r in runs.itertuples(index=False):
        console.print(f"  {r.run_id}  {r.started_at:%Y-%m-%d %H:%M}  {r.platform}  {r.command}")
    _print_store_summary(summary)


@dataset_app.command("export")
def dataset_export(store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store."),
                   out: Path = typer.Option(..., "--out", help="Output .parquet or .csv file."),
                   platform: Optional[str] = typer.Option(None, "--platform", help="Only this platform's rows."),
                   features: bool = typer.Option(True, "--features/--no-features", help="Add the static features.")) -> None:
    """Export a store as a dataset: one row per config and device, with the static features."""
    from carb import datasets
    from carb.store import Store

    if out.suffix not in (".parquet", ".csv"):
        fail(f"--out {out}: unknown output type (expected .parquet or .csv)")
    with Store(store_path, read_only=True) as store:
        df = datasets.from_store(store, platform, with_features=features)
    if df.empty:
        fail(f"{store_path}: no measurements{' for platform ' + platform if platform else ''}")
    datasets.write(df, out)
    console.print(f"wrote {len(df)} rows x {df.shape[1]} columns to {out}")


# -- screening ------------------------------------------------------------------------------


def _load_model(path: Path):
    from carb.calibrate import load_predictor

    try:
        return load_predictor(path)
    except (ValueError, OSError) as e:  # BundleError is a ValueError
        fail(str(e))


def _budgets(items: Optional[list[str]]) -> dict[str, float]:
    from carb.screen import parse_budgets

    try:
        return parse_budgets(items or [])
    except ValueError as e:
        fail(str(e))


@app.command()
def screen(
    space_name: str = typer.Option(..., "--space", help="Built-in space name or TOML file to screen."),
    target: Path = typer.Option(..., "--target", help="Model directory of the target device (a bundle or a calibrated model)."),
    source: Optional[Path] = typer.Option(None, "--source", help="Model directory of a source device for Stage 1."),
    budget: Optional[list[str]] = typer.Option(None, "--budget", help="TARGET=VALUE per forward of the batch, e.g. latency_ms=20 (repeat)."),
    objective: Optional[list[str]] = typer.Option(None, "--objective", help="min:COLUMN or max:COLUMN (repeat); default energy per image, latency, memory, capacity."),
    risk: str = typer.Option("safe", "--risk", help="safe (interval upper bound within budget), point, or optimistic."),
    z: float = typer.Option(2.0, "--margin", help="Stage 1 margin, in residual standard deviations of the source-to-target map."),
    out: Path = typer.Option(..., "--out", help="Output directory: shortlist.parquet/.csv, feasible.parquet, summary.json."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Two-stage screening: rank the space with a source model, re-score survivors with the target model, keep the Pareto front."""
    from carb import space
    from carb.pareto import parse_objectives
    from carb.screen import screen as run_screen

    budgets = _budgets(budget)
    try:
        objs = parse_objectives(objective) if objective else None
    except ValueError as e:
        fail(str(e))
    sp = space.load(space_name)
    tgt = _load_model(target)
    src = _load_model(source) if source else None
    try:
        res = run_screen(sp.to_frame(), tgt, budgets, source=src, objectives=objs, risk=risk, z=z)
    except ValueError as e:
        fail(str(e))
    res.summary.update(space=sp.name, space_source=sp.source, target_model=str(target),
                       source_model=str(source) if source else None)
    _write_screen(res, out)
    if json_out:
        print(json.dumps(res.summary, indent=2, default=float))
        return
    s = res.summary
    console.print(f"[bold]{sp.name}[/bold]: {s['candidates']:,} candidates -> Stage 1 {s['after_stage1']:,} "
                  f"-> feasible {s['feasible']:,} -> shortlist {s['shortlist']:,} "
                  f"(pruned {100 * s['pruning_ratio']:.1f}%)")
    _print_shortlist(res.shortlist)
    console.print(f"wrote {out}/shortlist.parquet, shortlist.csv, feasible.parquet, summary.json")


def _write_screen(res, out: Path) -> None:
    from carb.datasets import write

    out.mkdir(parents=True, exist_ok=True)
    write(res.shortlist, out / "shortlist.parquet")
    write(res.shortlist, out / "shortlist.csv")
    write(res.feasible, out / "feasible.parquet")
    (out / "summary.json").write_text(json.dumps(res.summary, indent=2, default=float))


def _print_shortlist(df, limit: int = 15) -> None:
    from carb.space import configs_from_frame

    if df.empty:
        console.print("no config meets the budgets")
        return
    cols = [c for c in ("energy_j", "latency_ms", "memory_mb") if c in df.columns and df[c].notna().any()]
    t = Table("rank", "config", *[f"{c} [lo, hi]" for c in cols], "GFLOP/img",
              title=f"shortlist ({len(df)} configs{', first %d' % limit if len(df) > limit else ''})")
    for cfg, r in zip(configs_from_frame(df.head(limit)), df.head(limit).to_dict("records")):
        t.add_row(str(r["rank"]), cfg.label(),
                  *[f"{r[c]:.3g} [{r[c + '_lo']:.3g}, {r[c + '_hi']:.3g}]" for c in cols],
                  f"{r['flops_per_image'] / 1e9:.3g}")
    console.print(t)


@app.command()
def calibrate(
    source: Path = typer.Option(..., "--source", help="Model directory of the source device."),
    device: str = typer.Option("cpu", "--device", help="The new device: cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    samples: int = typer.Option(10, "--samples", min=2, help="How many configs to measure (K)."),
    space_name: str = typer.Option("cpu", "--space", help="Space to choose the K configs from."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampler."),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    out: Path = typer.Option(..., "--out", help="Directory of the calibrated model."),
    method: str = typer.Option("log", "--method", help="Map: log (log-space map of the source prediction) or nnls (HELP-style, with cost features; carb.transfer)."),
) -> None:
    """Measure K well-spread configs on a new device and map the source model to it."""
    from carb import space
    from carb.calibrate import NnlsMap, choose_samples, fit_calibrated

    if method not in ("log", "nnls"):
        fail(f"--method: unknown value {method!r} (expected log or nnls)")

    src = _load_model(source)
    sp = space.load(space_name)
    pick = choose_samples(sp.to_frame(), src, samples, seed=seed)
    measured = _measure_frame(pick, device, threads, max_time, out / "calibration.duckdb", "calibrating")
    model = fit_calibrated(src, measured, meta={"device": device, "samples": samples, "space": sp.name,
                                                "seed": seed, "source": str(source)}, method=method)
    model.save(out, source_dir=source if not (Path(source) / "calibration.json").exists() else None)
    t = Table("target", "K", "map", "interval widening (x)", title=f"calibrated to {device}")
    for name, m in model.maps_.items():
        if isinstance(m, NnlsMap):
            terms = ["%.3g" % m.intercept] + [f"{w:.3g}·{f}" for w, f in zip(m.coef, [*m.features, "s"]) if w]
            t.add_row(name, str(m.n), "y = " + " + ".join(terms), f"{np.exp(m.q):.2f}")
            continue
        terms = ["%.3g" % m.coef[0], "%.3g·log s" % m.coef[1]] + (["%.3g·log batch" % m.coef[2]] if len(m.coef) == 3 else [])
        t.add_row(name, str(m.n), "log y = " + " + ".join(terms), f"{np.exp(m.q):.2f}")
    console.print(t)
    console.print(f"wrote {out} (use it as --target of carb screen)")


def _measure_frame(df, device: str, threads: Optional[int], max_time: float, store_path: Path, what: str):
    """Measure the configs of a frame into a store; returns the measured rows."""
    from dataclasses import replace

    from carb.campaign import run_campaign
    from carb.measure import get_backend
    from carb.measure.base import Protocol
    from carb.space import configs_from_frame
    from carb.store import Store

    configs = configs_from_frame(df)
    protocol = replace(Protocol.default_for(device), max_time_s=max_time)
    opts = {"threads": threads or 1} if device == "cpu" else {"lock_clocks": False}
    try:
        backend = get_backend(device, protocol=protocol, **opts)
    except (ValueError, RuntimeError) as e:
        fail(str(e))
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with backend, Store(store_path) as store:
        with Progress(TextColumn(f"[bold]{what}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[current]}"),
                      console=err) as progress:
            task = progress.add_task(what, total=len(configs), current="")
            result = run_campaign(configs, backend, store, rounds=1,
                                  on_start=lambda todo, skipped: progress.update(task, completed=skipped),
                                  on_config=lambda c: progress.update(task, current=c.label()),
                                  on_result=lambda c, m: progress.update(task, advance=1))
        if result.interrupted:
            raise typer.Exit(130)
        rows = store.measurements(result.platform)
    return rows[rows.config_id.isin(set(df.config_id))].reset_index(drop=True)


@app.command()
def validate(
    screen_dir: Path = typer.Option(..., "--screen", help="Output directory of carb screen."),
    device: Optional[str] = typer.Option(None, "--device", help="Measure on this device (cpu, cuda[:i])."),
    truth: Optional[str] = typer.Option(None, "--truth", help="Instead of measuring: a dataset (name or file) that measured the whole space on the target."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    control: int = typer.Option(10, "--control", min=0, help="Random configs of the space measured besides the shortlist."),
    limit: int = typer.Option(20, "--limit", min=1, help="Measure at most this many shortlisted configs (best ranked first)."),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    seed: int = typer.Option(0, "--seed", help="Seed of the control sample."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check a screening on hardware (or against a dataset of the whole space): budget accuracy, false accepts/rejects, Pareto recall."""
    import pandas as pd

    from carb import space
    from carb.validate import budget_metrics, truly_feasible, validate_against_truth

    if (device is None) == (truth is None):
        fail("give exactly one of --device or --truth")
    try:
        summary = json.loads((screen_dir / "summary.json").read_text())
        shortlist = pd.read_parquet(screen_dir / "shortlist.parquet")
        feasible = pd.read_parquet(screen_dir / "feasible.parquet")
    except (OSError, ValueError) as e:
        fail(f"{screen_dir}: not a carb screen output ({' '.join(str(e).split())[:160]})")
    budgets = summary["budgets"]
    objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in summary["objectives"]]
    accepted = set(feasible.config_id)
    if truth is not None:
        from carb import datasets

        res = validate_against_truth(list(accepted), list(shortlist.config_id),
                                     datasets.load(truth), budgets, objs)
        res["mode"] = f"truth: {truth}"
    else:
        sp = space.load(summary.get("space_source") or summary["space"])
        frame = sp.to_frame()
        rest = frame[~frame.config_id.isin(set(shortlist.config_id.head(limit)))]
        ctrl = rest.sample(min(control, len(rest)), random_state=seed)
        todo = pd.concat([shortlist.head(limit)[frame.columns], ctrl], ignore_index=True)
        measured = _measure_frame(todo, device, threads, max_time, screen_dir / "validation.duckdb", "validating")
        measured = measured[measured.status == "ok"]
        res = budget_metrics(measured.config_id.isin(accepted).to_numpy(), truly_feasible(measured, budgets))
        res.update(mode=f"measured on {device}", shortlist_measured=int(measured.config_id.isin(set(shortlist.config_id)).sum()),
                   control_measured=int(measured.config_id.isin(set(ctrl.config_id)).sum()))
    (screen_dir / "validation.json").write_text(json.dumps(res, indent=2, default=float))
    if json_out:
        print(json.dumps(res, indent=2, default=float))
        return
    t = Table("metric", "value", title=f"validation ({res['mode']})")
    for k in ("n", "accuracy", "false_accept_rate", "false_reject_rate", "pareto_recall", "hypervolume_ratio"):
        if k in res:
            v = res[k]
            t.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
    console.print(t)


@app.command()
def demo(
    out: Path = typer.Option(Path("carb-demo"), "--out", help="Output folder (tables, summary.json, PNG figures)."),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default: cores available, at most 4)."),
    samples: int = typer.Option(12, "--samples", min=2, help="Configs measured to calibrate (K)."),
    validate_n: int = typer.Option(8, "--validate", min=1, help="Shortlisted configs measured to validate."),
    control: int = typer.Option(8, "--control", min=0, help="Random configs measured to validate."),
    max_time: float = typer.Option(1.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    budget: Optional[list[str]] = typer.Option(None, "--budget", help="TARGET=VALUE (repeat); default: the space's median prediction."),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """The whole product on this machine in minutes: train, characterize, calibrate, screen, validate, report."""
    from carb.demo import DemoSettings, default_threads, run_demo

    if device != "cpu" and threads is not None:
        fail("--threads applies to --device cpu only")
    threads = threads or (default_threads() if device == "cpu" else None)
    settings = DemoSettings(out=out, device=device, threads=threads, samples=samples, validate=validate_n,
                            control=control, max_time=max_time, budgets=_budgets(budget), seed=seed)
    console.print(f"[bold]carb demo[/bold] on {device}" + (f" with {threads} thread(s)" if threads else "")
                  + f", writing {out}/")
    summary = run_demo(settings, lambda df, what: _measure_frame(df, device, threads, max_time,
                                                                  out / "demo.duckdb", what),
                       say=lambda m: console.print("• " + m))
    t = Table("", "value", title="demo summary (every number measured or predicted on this machine)")
    sc, v = summary["screening"], summary["validation"]
    t.add_row("candidates -> shortlist", f"{sc['candidates']:,} -> {sc['shortlist']:,} ({100 * sc['pruning_ratio']:.1f}% pruned)")
    t.add_row("budgets", ", ".join(f"{k} <= {b:g}" for k, b in summary["budgets"].items()))
    t.add_row("budget accuracy (measured)", f"{v['accuracy']:.3f} on {v['n']} configs")
    t.add_row("false accepts / rejects", f"{v['false_accepts']} / {v['false_rejects']}")
    for k, e in summary["validation_median_abs_error"].items():
        t.add_row(f"{k}: median |error|, interval coverage",
                  f"{100 * e:.1f}%, {100 * summary['validation_interval_coverage'][k]:.0f}%")
    t.add_row("wall time", f"{summary['timings']['total_s']:.0f} s")
    console.print(t)
    console.print(f"files: {out}/summary.json, shortlist.csv, validation.csv, measured_vs_predicted.png, pareto.png, report/report.html")


# -- model commands (train, evaluate, predict) live in carb.cli_model ------------------------

from carb import cli_model as _cli_model  # noqa: E402 - registers `carb train/evaluate/predict`

_cli_model.register(app)

from carb import cli_report as _cli_report  # noqa: E402 - registers `carb report`

_cli_report.register(app)

from carb import cli_fewshot as _cli_fewshot  # noqa: E402 - registers `carb fewshot`

_cli_fewshot.register(app)


# -- entry point --------------------------------------------------------------------------


def _error_exit(msg: str) -> None:
    # plain print: rich would wrap a long message over several lines
    print("error: " + " ".join(msg.split()), file=sys.stderr)
    sys.exit(2)


def main() -> None:
    """Console-script entry point: runs the app and turns bad input into exit code 2."""
    from carb.datasets import DatasetError
    from carb.store import StoreError

    try:
        rc = app(standalone_mode=False)
    except (UsageError, SpaceError, StoreError, DatasetError, FileNotFoundError) as e:
        _error_exit(str(e))
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as e:
        # click's usage errors (typer vendors click, so match the interface, not the class)
        if hasattr(e, "show") and isinstance(getattr(e, "exit_code", None), int):
            e.show()
            sys.exit(e.exit_code)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    # `python -m carb.cli` runs this file as __main__; delegate to the package module so the
    # exception classes other modules raise (carb.cli.UsageError) are the ones caught
    from carb.cli import main as _main

    _main()
