"""`carb dataset list|check|info|export`: the shipped datasets and a campaign store, read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ._app import check_out_file, console, dataset_app, err
from ._flags import python_errors

# -- dataset ------------------------------------------------------------------------------


@dataset_app.command("list")
def dataset_list(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the datasets shipped with CARB (load one with carb.datasets.load(name)).

    Example: carb dataset list
    """
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
def dataset_check(
    file: str = typer.Argument(..., help="Dataset file (.parquet/.csv) or shipped dataset name."),
    max_cov: float = typer.Option(0.25, "--max-cov", help="Latency CoV above this is noisy."),
    max_ci: float = typer.Option(0.05, "--max-ci", help="Relative 95% CI of the median latency above this is noisy."),
    json_out: bool = typer.Option(False, "--json", help="Print the problems as JSON."),
) -> None:
    """Check a dataset: duplicates, failed configs, missing or impossible targets, noisy rows. Exit 1 on problems.

    Example: carb dataset check cpu-1t
    """
    from carb import datasets

    df = datasets.load(file, features=False, keep_impossible=True)
    problems = datasets.check(df, max_cov=max_cov, max_ci_rel=max_ci)
    if json_out:
        print(json.dumps({"rows": len(df), "problems": json.loads(problems.to_json(orient="records"))}, indent=2))
    else:
        counts = problems.problem.value_counts()
        t = Table("check", "rows with a problem", title=f"{file}: {len(df):,} rows")
        for name in ("duplicate", "failed", "missing target", "impossible target", "noisy"):
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
def dataset_info(
    store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Summarize a store: runs, counts by status, medians of the targets, the speed index over time.

    Example: carb dataset info --store tiny.duckdb
    """
    from carb.campaign import speed
    from carb.campaign.store_info import gpu_line, isa_line, store_info

    info = store_info(store_path)
    if json_out:
        print(json.dumps(info.to_dict(), indent=2, default=str))
        return
    if info.snapshot:
        err.print(f"{store_path} is in use (a running campaign?): reading a snapshot of what it has committed")
    console.print(f"{store_path}: {len(info.runs)} run(s)")
    for r in info.runs.itertuples(index=False):
        console.print(f"  {r.run_id}  {r.started_at:%Y-%m-%d %H:%M}  {r.platform}  {r.command}")
        gpu, isa = gpu_line(r.provenance), isa_line(r.provenance)
        for line in (gpu, ("host " + isa) if gpu and isa else isa):
            if line:
                console.print(f"    {line}", highlight=False)
    print_store_summary(info.summary)
    for line in speed.speed_lines(info.speed, info.readings):
        console.print(line, highlight=False, soft_wrap=True)
    for p, f in info.repeat.items():
        console.print(
            "\n".join(f"{p}: {ln}" if i == 0 else ln for i, ln in enumerate(speed.remeasure_lines(f))),
            highlight=False,
            soft_wrap=True,
        )


@dataset_app.command("export")
def dataset_export(
    store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store."),
    out: Path = typer.Option(..., "--out", help="Output .parquet or .csv file."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Only this platform's rows."),
    features: bool = typer.Option(
        True,
        "--features/--no-features",
        help="Add the static features (a network row keeps those captured when it was measured).",
    ),
) -> None:
    """Export a store as a dataset: one row per config and device, with the static features.

    Runs no code named in the store: a network row's features are those stored when it was measured.

    Example: carb dataset export --store tiny.duckdb --out tiny.parquet
    """
    from carb.datasets.export import export_store

    check_out_file(out, inputs={"--store": store_path})
    with python_errors(export_store):
        done = export_store(store_path, out, platform, features)
    console.print(f"wrote {len(done.data)} rows x {done.data.shape[1]} columns to {out}")
    if done.bare_net_rows:
        err.print(
            f"note: {done.bare_net_rows} network row(s) measured ok have no stored features (an older carb measured "
            "them, or the campaign could not capture them); export runs no code, so they stay empty",
            highlight=False,
            soft_wrap=True,
        )


def print_store_summary(summary) -> None:
    """A store's summary per platform: configs, statuses, noise and the speed index."""
    t = Table(
        "platform",
        "status",
        "configs",
        "median latency (ms)",
        "median energy (J)",
        "median memory (MB)",
        "median latency CoV",
        title="store summary",
    )

    def f(v, spec):
        return "—" if v is None or v != v else format(v, spec)

    for r in summary.itertuples(index=False):
        t.add_row(
            r.platform,
            r.status,
            str(r.configs),
            f(r.latency_ms, ".3f"),
            f(r.energy_j, ".4f"),
            f(r.memory_mb, ".1f"),
            f(r.latency_cov, ".3f"),
        )
    console.print(t)
