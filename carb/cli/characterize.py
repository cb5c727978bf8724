"""`carb characterize`: measure configs into a store, resumable, with progress; one line on bad input."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from carb.report.progress import CampaignProgress

from ._app import Oversubscribe, app, check_out_file, check_threads, console, err, fail
from ._flags import python_errors
from .dataset import print_store_summary

# -- characterize -------------------------------------------------------------------------

# The long options of carb characterize, declared once here to keep its signature short.
_LockClocks = Annotated[
    bool,
    typer.Option(
        "--lock-clocks/--no-lock-clocks",
        help="GPU: lock graphics/memory clocks (DVFS lockdown) and restore them after.",
    ),
]
_EnergyPeriods = Annotated[
    Optional[float],
    typer.Option(
        "--energy-periods",
        min=3.0,
        help="GPU: a timed window lasts at least this many updates of the energy counter (default 10; 4 on a "
        "counter that updates every 100 ms halves the time per config).",
    ),
]
_CiTarget = Annotated[
    Optional[float],
    typer.Option(
        "--ci-target",
        min=0.0,
        help="Stop repeating at this relative 95% CI of the median (default 0.02 CPU, 0.01 GPU).",
    ),
]
_Chunk = Annotated[
    Optional[int],
    typer.Option(
        "--chunk",
        min=1,
        help="Configs visited round-robin together when --rounds > 1 (default: all: each config's rounds spread "
        "over the whole campaign).",
    ),
]
_Sentinel = Annotated[
    bool,
    typer.Option(
        "--sentinel/--no-sentinel",
        help="CPU: time the speed sentinel at the start, every 60 s and at the end (speed index, latency_ms_norm).",
    ),
]
_Retakes = Annotated[
    Optional[int],
    typer.Option(
        "--retakes",
        min=0,
        help="After the rounds, measure a visit timed in another state of the machine (its paired speed sentinel "
        "beyond x1.25 of the campaign's state) again, up to N times, and pool the visit nearest the state "
        "(default: 2 for a CPU campaign of 2+ threads with the sentinel and --rounds > 1, where our VMs "
        "switch between two states; else 0).",
    ),
]
_Allocator = Annotated[
    Optional[str],
    typer.Option(
        "--allocator",
        help="CPU: how each worker's C allocator keeps freed memory: default (glibc's rules: a forward may "
        "page-fault on fresh memory every time, a cost that depends on what ran before) or retain (freed "
        "memory kept: no page fault after the first forward, the steady state of a long-running server).",
    ),
]
# help texts are rich markup: a backslash keeps [ray] from being read as a style tag
_Executor = Annotated[
    str,
    typer.Option(
        "--executor",
        help="local (this machine) or ray (every worker slot of a Ray cluster; pip install 'carb\\[ray]').",
    ),
]
_Address = Annotated[
    Optional[str],
    typer.Option(
        "--address",
        help="Ray cluster: auto, HOST:PORT or ray://HOST:PORT (default: RAY_ADDRESS, else a local cluster).",
    ),
]


@app.command()
def characterize(
    space_name: Optional[str] = typer.Option(None, "--space", help="Built-in space name or TOML file."),
    sample: Optional[int] = typer.Option(None, "--samples", min=1, help="Measure a sample of N configs of the space."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sample."),
    method: str = typer.Option("stratified", "--method", help="Sampling: stratified (space-filling) or uniform."),
    configs_file: Optional[Path] = typer.Option(
        None,
        "--configs",
        help="Parquet/CSV/JSONL file of configs to measure (net rows: imports and runs the modules they name).",
    ),
    device: str = typer.Option("cpu", "--device", help="cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads to pin (default: 1)."),
    store_path: Path = typer.Option(..., "--store", help="DuckDB campaign store; re-running resumes."),
    platform: Optional[str] = typer.Option(
        None, "--platform", help="Label rows are stored under (default: cpu-<T>t or the GPU's name)."
    ),
    lock_clocks: _LockClocks = True,
    energy_periods: _EnergyPeriods = None,
    ci_target: _CiTarget = None,
    max_time: Optional[float] = typer.Option(None, "--max-time", min=0.0, help="Cap on sampling seconds per config."),
    timeout: Optional[float] = typer.Option(None, "--timeout", min=1.0, help="Wall-clock limit per config, seconds."),
    rounds: Optional[int] = typer.Option(
        None, "--rounds", min=1, help="Visits per config at different moments, pooled (default: 3 on CPU, 1 on GPU)."
    ),
    chunk: _Chunk = None,
    sentinel: _Sentinel = True,
    retakes: _Retakes = None,
    allocator: _Allocator = None,
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="Measure again the configs stored with a failure status."
    ),
    remeasure: bool = typer.Option(
        False, "--remeasure", help="Measure again into the remeasurements table (drift check)."
    ),
    executor: _Executor = "local",
    address: _Address = None,
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1, help="Ray: use at most this many worker slots (default: all)."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON at the end."),
    oversubscribe: Oversubscribe = False,
) -> None:
    """Measure configs into a campaign store, on this machine or a Ray cluster (resumable; Ctrl-C keeps what is done).

    Example: carb characterize --space tiny --store tiny.duckdb
    """
    import duckdb

    from carb.campaign import characterization as lib
    from carb.campaign.store import check_store_file

    with python_errors(lib.select_configs, lib.check_options, lib.default_retakes):
        configs = lib.select_configs(space_name, configs_file, sample, seed, method)
        protocol = lib.protocol_for(device, ci_target, max_time, timeout)
        lib.check_options(device, threads, executor, address, workers, allocator, energy_periods)
    check_threads(threads, oversubscribe or executor != "local")  # a cluster's nodes have CPUs of their own
    check_out_file(store_path, "--store", inputs={"--configs": configs_file, "--space": space_name})
    check_store_file(store_path)  # a foreign or broken file is refused before any worker starts
    with python_errors(lib.default_retakes):
        retakes = lib.default_retakes(
            retakes, device, threads, sentinel, rounds or (3 if device == "cpu" else 1), remeasure
        )
    opts = dict(executor=executor, address=address, workers=workers, threads=threads, lock_clocks=lock_clocks,
                energy_periods=energy_periods, allocator=allocator)  # fmt: skip
    with python_errors(), err.status("starting Ray worker slots...") if executor == "ray" else nullcontext():
        backend = lib.open_backend(device, protocol, **opts)
    if executor == "ray":
        starting = f", {backend.starting} still starting" if backend.starting else ""
        err.print(f"ray: {backend.workers} worker slot(s) of {backend.slots_total} in the cluster{starting}")
        for line in backend.slot_lines():
            err.print(f"  {line}", highlight=False, soft_wrap=True)
    enabled = not (json_out and not sys.stderr.isatty())
    prev_term = signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM stops like Ctrl-C: what is stored is kept
    try:
        with backend, CampaignProgress(err, "measuring", store=str(store_path), enabled=enabled) as progress:
            run = lib.characterize(
                configs, store_path, backend=backend, device=device, threads=threads, platform=platform,
                rounds=rounds, chunk=chunk, sentinel=sentinel, retakes=retakes, retry_failed=retry_failed,
                remeasure=remeasure, command=shlex.join(["carb", *sys.argv[1:]]),
                callbacks={**progress.callbacks, "on_event": progress.print},
            )  # fmt: skip
    except RuntimeError as e:  # e.g. every Ray worker slot lost; what is stored stays
        fail(str(e))
    except duckdb.Error as e:  # e.g. a full disk: each config's rows are committed whole, so what is stored stays
        fail(f"--store {store_path}: writing failed ({str(e).splitlines()[0]}); what was committed before is kept")
    finally:
        signal.signal(signal.SIGTERM, prev_term)
    if run.visits_by_node:
        visits = ", ".join(f"node {n[:8]} {k}" for n, k in run.visits_by_node.items())
        err.print(f"ray: visits per node: {visits}", highlight=False, soft_wrap=True)
    _print_result(run, json_out)
    if remeasure:
        err.print(_remeasure_line(run), highlight=False, soft_wrap=True)
        if run.repeat and run.repeat.get("configs"):
            err.print("\n".join(run.repeat_lines), highlight=False, soft_wrap=True)
    if run.result.interrupted:
        err.print(_interrupted_line(run), highlight=False, soft_wrap=True)
        raise typer.Exit(130)


def _print_result(run: Any, json_out: bool) -> None:
    """What the campaign did: JSON, or the configs measured now, the store's summary and the retakes."""
    if json_out:
        print(json.dumps(run.to_dict(), indent=2))
        return
    _print_configs(run)
    _print_summary(run.result, run.summary, run.store)
    if run.result.retakes:
        err.print(run.state_line(), highlight=False, soft_wrap=True)


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _interrupted_line(run: Any) -> str:
    """What an interrupted campaign committed, and how to resume it."""
    visits = f" and {run.result.visits} visit(s) of configs still in progress" if run.result.visits else ""
    return (
        f"interrupted: {run.result.measured} config(s) complete{visits} committed to {run.store}; "
        "run the same command again to resume (nothing stored is measured twice)"
    )


def _remeasure_line(run: Any) -> str:
    """What --remeasure did: measured into the remeasurements table, beside the first measurements (drift checks)."""
    line = (
        f"--remeasure: {run.result.measured} config(s) measured again into the remeasurements table of "
        f"{run.store} (the measurements table is unchanged)"
    )
    if run.fresh:  # a config never measured there has nothing to compare with
        line += (
            f"; {run.fresh} of them had no first measurement there, so nothing to compare with: "
            "measure them without --remeasure first"
        )
    return line


def _print_configs(run: Any) -> None:
    """Per-config table of what this run measured (the slowest 30 configs)."""
    if run.rows.empty:
        return
    title, rows = run.slowest_rows(30)
    t = Table("config", "status", "latency (ms)", "± 95% CI", "memory (MB)", "energy (J)", title=title)
    for row in rows:
        t.add_row(*row)
    console.print(t)


def _print_summary(result, summary, store_path: Path) -> None:
    console.print(
        f"\n[bold]{result.platform}[/bold]: measured {result.measured} now, "
        f"{result.skipped} already stored; "
        f"{result.wall_s:.1f} s wall, {result.timed_s:.1f} s in timed inference"
        + (f" (overhead {result.overhead:.1f}x)" if result.timed_s else "")
    )
    if result.readings:
        console.print(
            f"speed sentinel: {result.readings} readings, {result.sentinel_s:.1f} s "
            f"({100 * result.sentinel_share:.1f}% of the wall time); "
            f"see carb dataset info --store {shlex.quote(str(store_path))}"
        )
    print_store_summary(summary)
    export = shlex.join(["carb", "dataset", "export", "--store", str(store_path), "--out", "data.parquet"])
    console.print(f"store: {store_path}  (export: {export})", highlight=False, markup=False)
