"""`carb characterize`: measure configs into a store, resumable, with progress; one line on bad input."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table

from ._app import Oversubscribe, app, check_out_file, check_threads, console, err, fail
from ._progress import CampaignProgress
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
    from carb.campaign.store import Store, check_store_file

    configs = _configs_to_measure(space_name, configs_file, sample, seed, method)
    protocol = _protocol_of(device, ci_target, max_time, timeout)
    _check_device_options(device, threads, executor, address, workers, allocator, energy_periods)
    check_threads(threads, oversubscribe or executor != "local")  # a cluster's nodes have CPUs of their own
    check_out_file(store_path, "--store", inputs={"--configs": configs_file, "--space": space_name})
    check_store_file(store_path)  # a foreign or broken file is refused before any worker starts
    n_rounds = rounds or (3 if device == "cpu" else 1)
    retakes = _retakes_of(retakes, device, threads, sentinel, n_rounds, remeasure)
    backend = _open_backend(
        device, protocol, executor, address, workers, threads, lock_clocks, energy_periods, allocator
    )
    done_before: set = set()
    with backend, Store(store_path) as store:
        if remeasure:  # to say afterwards which configs had a first measurement to compare with
            done_before = _stored_ids(backend, store, platform)
        with CampaignProgress(
            err, "measuring", store=str(store_path), enabled=not (json_out and not sys.stderr.isatty())
        ) as progress:
            if hasattr(backend, "on_event"):  # a cluster's slots that start or are lost, above the bar
                backend.on_event = progress.print
            result = _run_until_stopped(
                configs,
                backend,
                store,
                progress,
                platform=platform,
                command=shlex.join(["carb", *sys.argv[1:]]),
                retry_failed=retry_failed,
                remeasure=remeasure,
                rounds=n_rounds,
                chunk=chunk,
                sentinel="auto" if sentinel else None,
                retakes=retakes,
            )
        summary = store.summary()
        rows, repeat, repeat_lines = _rows_and_repeat(store, result, remeasure)
        if getattr(backend, "visits_by_node", None):
            visits = ", ".join(f"node {n[:8]} {k}" for n, k in backend.visits_by_node.most_common())
            err.print(f"ray: visits per node: {visits}", highlight=False, soft_wrap=True)
    _print_result(result, summary, rows, store_path, json_out, repeat)
    if remeasure:
        err.print(_remeasure_line(result, configs, done_before, store_path), highlight=False, soft_wrap=True)
        if repeat and repeat.get("configs"):
            err.print("\n".join(repeat_lines), highlight=False, soft_wrap=True)
    if result.interrupted:
        err.print(_interrupted_line(result, store_path), highlight=False, soft_wrap=True)
        raise typer.Exit(130)


def _configs_to_measure(
    space_name: str | None, configs_file: Path | None, sample: int | None, seed: int, method: str
) -> list:
    """The configs of ``--configs`` or ``--space`` (a sample of them with ``--samples``)."""
    from carb.campaign.runner import read_config_file
    from carb.families import space

    if (space_name is None) == (configs_file is None):
        fail("give exactly one of --space or --configs")
    if method not in ("stratified", "uniform"):
        fail(f"--method: unknown value {method!r} (expected stratified or uniform)")
    if configs_file is not None:
        configs = read_config_file(str(configs_file))
        if sample is not None:
            fail("--samples works with --space, not --configs")
        return configs
    sp = space.load(space_name)
    if sample is not None:  # never fewer configs measured than asked without a word
        listed = sp.size_bound() <= space.MAX_CONFIGS
        most = len(sp) if listed else min(sp.size_bound(), space.MAX_CONFIGS)
        if sample > most:
            held = f"holds {most:,} configs" if listed else f"is sampled {most:,} configs at most"
            fail(f"--samples {sample}: the space {sp.name} {held}; give that many or fewer")
    return sp.sample(sample, seed=seed, method=method) if sample else list(sp)


def _protocol_of(device: str, ci_target: float | None, max_time: float | None, timeout: float | None) -> Any:
    """The device's default protocol with the options given."""
    from dataclasses import replace

    from carb.measure.base import Protocol

    protocol = Protocol.default_for(device)
    overrides = {
        k: v for k, v in (("ci_target", ci_target), ("max_time_s", max_time), ("timeout_s", timeout)) if v is not None
    }
    return replace(protocol, **overrides)


def _check_device_options(
    device: str,
    threads: int | None,
    executor: str,
    address: str | None,
    workers: int | None,
    allocator: str | None,
    energy_periods: float | None,
) -> None:
    """Refuse the options that do not apply to the device or the executor."""
    if device != "cpu" and threads is not None:
        fail("--threads applies to --device cpu only")
    if executor not in ("local", "ray"):
        fail(f"--executor: unknown value {executor!r} (expected local or ray)")
    if executor == "local" and (address is not None or workers is not None):
        fail("--address and --workers apply to --executor ray only")
    if allocator is not None:
        from carb.measure.cpu import ALLOCATORS

        if device != "cpu":
            fail("--allocator applies to --device cpu only")
        if allocator not in ALLOCATORS:
            fail(f"--allocator: unknown value {allocator!r} (expected {' or '.join(ALLOCATORS)})")
    if device == "cpu" and energy_periods is not None:
        fail("--energy-periods applies to --device cuda only")


def _retakes_of(
    retakes: int | None, device: str, threads: int | None, sentinel: bool, n_rounds: int, remeasure: bool
) -> int:
    """``--retakes``, or its default: the two speed states show with 2+ threads, never with 1."""
    if retakes is None:
        from carb.campaign.rounds import RETAKES

        return RETAKES if device == "cpu" and (threads or 1) > 1 and sentinel and n_rounds > 1 and not remeasure else 0
    if retakes and (n_rounds < 2 or remeasure or not sentinel or device != "cpu"):
        fail(
            "--retakes needs a CPU campaign with --rounds > 1, the sentinel and no --remeasure "
            "(it retakes stored visits by their paired speed sentinel)"
        )
    return retakes


def _open_backend(
    device: str,
    protocol: Any,
    executor: str,
    address: str | None,
    workers: int | None,
    threads: int | None,
    lock_clocks: bool,
    energy_periods: float | None,
    allocator: str | None,
) -> Any:
    """The measurement backend of this machine, or a Ray cluster's worker slots; a usage error when unavailable."""
    from carb.measure import get_backend

    opts: dict[str, Any] = {"threads": threads or 1} if device == "cpu" else {"lock_clocks": lock_clocks}
    if energy_periods is not None:
        opts["energy_periods"] = energy_periods
    if allocator is not None:
        opts["allocator"] = allocator
    try:
        if executor == "ray":
            from carb.campaign.ray_executor import RayExecutor

            with err.status("starting Ray worker slots..."):
                backend = RayExecutor(
                    device,
                    address=address,
                    workers=workers,
                    protocol=protocol,
                    threads=threads or 1,
                    lock_clocks=lock_clocks,
                    backend_opts={k: v for k, v in opts.items() if k in ("energy_periods", "allocator")},
                )
            starting = f", {backend.starting} still starting" if backend.starting else ""
            err.print(f"ray: {backend.workers} worker slot(s) of {backend.slots_total} in the cluster{starting}")
            for line in backend.slot_lines():
                err.print(f"  {line}", highlight=False, soft_wrap=True)
            return backend
        return get_backend(device, protocol=protocol, **opts)
    except (ValueError, RuntimeError) as e:  # unknown device, no GPU here, no Ray cluster, ...
        fail(str(e))


def _stored_ids(backend: Any, store: Any, platform: str | None) -> set:
    """The config ids the store holds for the campaign's platform."""
    from carb.campaign.executor import Executor, LocalExecutor

    ex = backend if isinstance(backend, Executor) else LocalExecutor(backend)
    return store.done_ids(platform or ex.platform())


def _run_until_stopped(configs: list, backend: Any, store: Any, progress: CampaignProgress, **settings: Any) -> Any:
    """Run the campaign with the progress bar; SIGTERM stops it like Ctrl-C (what is stored is kept)."""
    import duckdb

    from carb.campaign.runner import run_campaign

    # SIGTERM stops like Ctrl-C: what is stored is kept and the way to resume is printed
    prev_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return run_campaign(configs, backend, store, **settings, **progress.callbacks)
    except RuntimeError as e:  # e.g. every Ray worker slot lost; what is stored stays
        fail(str(e))
    except duckdb.Error as e:  # e.g. a full disk: each config's rows are committed whole, so what is stored stays
        fail(f"--store {store.path}: writing failed ({str(e).splitlines()[0]}); what was committed before is kept")
    finally:
        signal.signal(signal.SIGTERM, prev_term)


def _rows_and_repeat(store: Any, result: Any, remeasure: bool) -> tuple[Any, Any, list[str]]:
    """This run's rows, and with --remeasure how they repeat the first measurements (figures and lines)."""
    rows = store.measurements(result.platform)
    repeat, repeat_lines = None, []
    if remeasure:  # how this run repeats the first measurements: raw, drift-corrected, fastest sample
        from carb.campaign import speed as drift

        again = store.measurements(result.platform, table="remeasurements")
        repeat = drift.remeasure_figures(rows, again[again.run_id == result.run_id])
        repeat_lines = drift.remeasure_lines(repeat)
    return rows[rows.run_id == result.run_id], repeat, repeat_lines


def _print_result(
    result: Any, summary: Any, rows: Any, store_path: Path, json_out: bool, repeat: dict[str, Any] | None = None
) -> None:
    """What the campaign did: JSON, or the configs measured now, the store's summary and the retakes."""
    if json_out:
        print(
            json.dumps(
                {
                    **result.to_dict(),
                    "store": str(store_path),
                    "summary": json.loads(summary.to_json(orient="records")),
                    **({"remeasure": repeat} if repeat is not None else {}),
                },
                indent=2,
            )
        )
        return
    _print_configs(rows)
    _print_summary(result, summary, store_path)
    if result.retakes:
        err.print(_state_line(result.retakes), highlight=False, soft_wrap=True)


def _state_line(retakes: dict[str, Any]) -> str:
    """What the campaign's retakes did, or that every visit was timed in one state of the machine."""
    from carb.campaign import rounds as states

    line = states.state_line(retakes, "campaign")
    if retakes.get("ref_ms"):
        return line or f"machine state: every visit timed in one state (speed sentinel {retakes['ref_ms']:.3f} ms)"
    return f"retakes: {retakes.get('note')}"


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _interrupted_line(result, store_path: Path) -> str:
    """What an interrupted campaign committed, and how to resume it."""
    visits = f" and {result.visits} visit(s) of configs still in progress" if result.visits else ""
    return (
        f"interrupted: {result.measured} config(s) complete{visits} committed to {store_path}; "
        "run the same command again to resume (nothing stored is measured twice)"
    )


def _remeasure_line(result, configs, done_before: set, store_path: Path) -> str:
    """What --remeasure did.

    It measures into the remeasurements table, beside the first measurements (for drift
    checks); on a config never measured there is nothing to compare.
    """
    fresh = sum(c.config_id not in done_before for c in dict.fromkeys(configs))
    line = (
        f"--remeasure: {result.measured} config(s) measured again into the remeasurements table of "
        f"{store_path} (the measurements table is unchanged)"
    )
    if fresh:
        line += (
            f"; {fresh} of them had no first measurement there, so nothing to compare with: "
            "measure them without --remeasure first"
        )
    return line


def _print_configs(rows, limit: int = 30) -> None:
    """Per-config table of what this run measured (the slowest ``limit`` configs)."""
    if rows.empty:
        return
    from carb.families.space import configs_from_frame

    rows = rows.sort_values("latency_ms", ascending=False, na_position="first")
    title = f"measured now ({len(rows)} configs" + (f", slowest {limit} shown)" if len(rows) > limit else ")")
    t = Table("config", "status", "latency (ms)", "± 95% CI", "memory (MB)", "energy (J)", title=title)
    for cfg, r in zip(configs_from_frame(rows.head(limit)), rows.head(limit).itertuples(index=False)):
        ok = r.status == "ok"
        t.add_row(
            cfg.label(),
            r.status,
            f"{r.latency_ms:.3f}" if ok else "—",
            f"{100 * r.latency_ms_ci_rel:.1f}%" if ok and r.latency_ms_ci_rel == r.latency_ms_ci_rel else "—",
            f"{r.memory_mb:.1f}" if ok else "—",
            f"{r.energy_j:.4f}" if ok and r.energy_j == r.energy_j and r.energy_j is not None else "—",
        )
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
