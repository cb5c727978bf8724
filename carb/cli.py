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

console = Console()
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
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON at the end."),
) -> None:
    """Measure configs on this machine into a campaign store (resumable; Ctrl-C keeps what is done)."""
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
    opts = {"threads": threads or 1} if device == "cpu" else {"lock_clocks": lock_clocks}
    try:
        backend = get_backend(device, protocol=protocol, **opts)
    except (ValueError, RuntimeError) as e:  # unknown device, no GPU here, ...
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

            result = run_campaign(configs, backend, store, platform=platform,
                                  command=shlex.join(["carb", *sys.argv[1:]]), retry_failed=retry_failed,
                                  remeasure=remeasure, rounds=rounds or (3 if device == "cpu" else 1),
                                  chunk=chunk, on_start=on_start, on_config=on_config,
                                  on_result=on_result)
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


# -- model commands (train, evaluate, predict) live in carb.cli_model ------------------------

try:
    from carb import cli_model as _cli_model
except ImportError:  # not written yet
    _cli_model = None
if _cli_model is not None:
    _cli_model.register(app)


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
    main()
