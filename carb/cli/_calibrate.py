"""The work of ``carb calibrate``: K configs or K whole networks measured on a new device, the source model mapped."""

from __future__ import annotations

import contextlib
import shlex
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from rich.table import Table

from ._app import console, err, fail, running_user_code

#: the fewest networks a network model calibrates on (:func:`carb.netmodel.calibrate_on` refuses fewer)
MIN_NETWORKS = 3
#: room for the K measurements' store kept beside a calibrated model (a few hundred KB to 2 MB). Units: MB.
STORE_MB = 4.0


def _need_mb(source: Path) -> float:
    """The space a calibrated model takes in ``--out``: about its source's size and the K measurements' store (MB)."""
    src = Path(source)
    files = [src] if src.is_file() else list(src.rglob("*")) if src.is_dir() else []
    return round(sum(f.stat().st_size for f in files if f.is_file()) / 1e6 + STORE_MB, 1)


def _check_k(source: Path, samples: int, networks: Optional[Path]) -> None:
    """Refuse, before measuring, a K too small for the source: a network model calibrates on 3 networks or more."""
    if networks is None and (Path(source) / "netmodel.json").is_file() and samples < MIN_NETWORKS:
        fail(f"--samples {samples}: a network model calibrates on at least {MIN_NETWORKS} networks")


def _warn_foreign_precisions(device: str, frame: Any) -> None:
    """Warn when the space holds precisions this CPU has no native kernels for.

    One map over all precisions would be wide.
    """
    from carb.measure import foreign_precisions

    foreign = foreign_precisions(device, sorted(set(frame["precision"]))) if "precision" in frame.columns else []
    if foreign:
        import warnings

        native = [p for p in sorted(set(frame["precision"])) if p not in foreign]
        warnings.warn(
            f"this CPU has no native {' or '.join(foreign)} kernels (carb.measure.cpu_isa), so those "
            f"configs run on fallback kernels here, often tens of times slower than where the source was "
            f"measured; one map over all precisions will be wide: calibrate one precision at a time"
            + (f" (e.g. --precision {native[0]})" if native else ""),
            stacklevel=1,
        )


def _fit_on_k(
    src: Any,
    source: Path,
    pick: Any,
    device: str,
    threads: Optional[int],
    max_time: float,
    rounds: int,
    out: Path,
    method: str,
    meta: dict[str, Any],
    measure: Callable[..., Any],
) -> Any:
    """Measure the K configs of ``pick``, map ``src`` to the device on them and save the calibrated model in ``out``.

    The K measurements are saved beside it; ``measure`` is the measuring step (``carb.cli.screening._measure_frame``).
    """
    import shutil
    import tempfile

    import pandas as pd

    from carb.campaign import rounds as states
    from carb.campaign import speed as drift
    from carb.transfer.calibrate import fit_calibrated

    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        store = Path(tmp) / "calibration.duckdb"
        visits = [measure(pick, device, threads, max_time, store, "calibrating", rounds=rounds)]

        def again(f: Any) -> Any:
            sub = pick[pick.config_id.isin(set(f.config_id))]
            what = "measuring again (another machine state)"
            visits.append(measure(sub, device, threads, max_time, store, what, rounds=rounds, again=True))
            return visits[-1]

        # visits timed in another state of the machine than the fastest most were timed in
        # (their paired sentinel says which) are measured again: no one ratio corrects them;
        # every visit of a config measures the scatter of its memory (carb.transfer.calibrate.visit_scatter)
        measured, state = states.retake_off_state(visits[0], again)
        if line := states.state_line(state, "calibration"):
            console.print(line)
        # fitted at the K configs' median speed when each carries its own (paired) sentinel
        fit_rows, ref = drift.at_median_speed(measured)
        model = fit_calibrated(
            src,
            fit_rows,
            meta={
                **meta,
                "calibrated_on": "latency at the K configs' median sentinel speed"
                if ref is not None
                else "raw latency",
            },
            method=method,
            visits=pd.concat(visits, ignore_index=True),
        )
        model.save(out, source_dir=source)
        shutil.copy2(store, out / "calibration.duckdb")  # the K measurements, kept with the model
    return model


def _print_maps(model: Any, device: str) -> None:
    """The calibrated model's map per target, its interval widening, and the K's range with the widening beyond it."""
    from carb.transfer.calibrate import NnlsMap

    t = Table(
        "target",
        "K",
        "map",
        "interval widening (x)",
        "measured range (K)",
        "beyond it",
        title=f"calibrated to {device}",
    )
    for name, m in model.maps_.items():
        if isinstance(m, NnlsMap):
            terms = ["%.3g" % m.intercept] + [f"{w:.3g}·{f}" for w, f in zip(m.coef, [*m.features, "s"]) if w]
            text = "y = " + " + ".join(terms)
        elif m.add:  # the additive map: a fixed amount on top of the source's prediction
            text = f"y = s {'+' if m.add > 0 else '-'} {abs(m.add):.3g}"
        else:
            terms = ["%.3g" % m.coef[0], "%.3g·log s" % m.coef[1]] + (
                ["%.3g·log batch" % m.coef[2]] if len(m.coef) == 3 else []
            )
            text = "log y = " + " + ".join(terms)
        t.add_row(name, str(m.n), text, f"{np.exp(m.q):.2f}", *_reach_cells(model.reach_.get(name), name))
    console.print(t)


def _reach_cells(r: Any, target: str) -> tuple[str, str]:
    """The K's range of source predictions and batches, and how the interval widens beyond it (flagged extrapolated)."""
    if r is None:
        return "-", "-"
    unit = target.rsplit("_", 1)[-1].replace("mb", "MB").replace("j", "J")
    rng = f"{r.s_range[0]:.3g}-{r.s_range[1]:.3g} {unit}, batch {r.batch_range[0]:g}-{r.batch_range[1]:g}"
    if r.rate is None:
        return rng, "flagged extrapolated, not widened (too few K to measure how)"
    return rng, f"flagged extrapolated; interval x{np.exp(r.rate * np.log(2)):.2f} wider per doubling beyond"


def _calibrate_netmodel(
    source: Path,
    device: str,
    threads: Optional[int],
    samples: int,
    seed: int,
    max_time: float,
    out: Path,
    method: str,
    networks: Optional[Path],
    rounds: int,
    measure: Callable[..., Any],
    source_name: Optional[str] = None,
    keep: bool = True,
) -> None:
    """Run ``carb calibrate`` of a network model: measure K whole networks and map or refit the model on them.

    The K networks are the user's list or K spread zoo networks; the mapping is :func:`carb.netmodel.calibrate_on`;
    ``measure`` is the measuring step (``carb.cli.screening._measure_frame``). With ``keep`` the result is also kept
    in the user's calibration cache for this machine kind (:mod:`carb.transfer.cache`), under the source's checksum
    (``source_name``: the name the user gave it).
    """
    import shutil
    import tempfile

    import pandas as pd

    from carb import netmodel
    from carb.campaign import speed as drift

    if method not in netmodel.CALIBRATION_METHODS:
        fail(
            f"--method: unknown value {method!r} for a network model (expected "
            f"{' or '.join(netmodel.CALIBRATION_METHODS)})"
        )
    from carb.measure.fingerprint import here
    from carb.transfer import cache

    nm, cfgs, what, tables, runtime = _networks_to_measure(source, networks, samples, seed)
    df = pd.DataFrame([c.to_dict() for c in cfgs])
    df.insert(0, "config_id", [c.config_id for c in cfgs])
    # the K networks are measured as the model's layers and networks were: with the same
    # worker allocator (page faults are part of a forward's cost under glibc's default rules)
    allocator = netmodel.allocator_of(nm)
    console.print(
        f"calibrating {source} on {device}: {what}, {rounds} round(s) each"
        + (f", allocator {allocator}" if device == "cpu" else "")
    )
    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        store = Path(tmp) / "calibration.duckdb"
        rows = measure(df, device, threads, max_time, store, "calibrating", rounds=rounds, allocator=allocator)
        ok, meas = _networks_measured_ok(rows, df, cfgs)
        fit_rows, ref = drift.at_median_speed(meas)
        tabs = [t for t, o in zip(tables, ok) if o]
        try:
            model = netmodel.calibrate_on(
                nm,
                tabs,
                fit_rows,
                method=method,
                meta={
                    "calibration_device": device,
                    "threads": threads or 1,
                    "samples": len(tabs),
                    "seed": seed,
                    "rounds": rounds,
                    "source": str(source),
                    "networks": [c.label() for c, o in zip(cfgs, ok) if o],
                    "calibration_latency": "at the K networks' median sentinel speed" if ref is not None else "raw",
                    "sentinel_ms": [float(v) for v in meas["sentinel_ms"]] if "sentinel_ms" in meas else [],
                    **_runtime_meta(runtime),
                    **_machine_meta(nm, device, threads, allocator, tabs, out),
                },
            )
        except netmodel.ModelError as e:
            fail(str(e))
        model.device = f"{device}-{threads or 1}t" if device == "cpu" else device
        model.save(out)
        shutil.copy2(store, out / "calibration.duckdb")  # the K measurements, kept with the model
    on = f"{len(tabs)} networks measured on {device}" + (" with ONNX Runtime" if runtime != "torch" else "")
    _print_net_calibration(nm, model, tabs, cfgs, fit_rows, f"{on} ({method})")
    use = "--onnx FILE.onnx --input SHAPE" if runtime != "torch" else "--module ..."
    console.print(f"wrote {out} (a network model: carb predict {use} --model {shlex.quote(str(out))})")
    if keep and runtime != "torch":
        # the cache answers `carb predict --module` (PyTorch eager) on this machine: not with another runtime's map
        console.print(
            "not kept in your calibration cache: it prices ONNX Runtime, and the cache serves PyTorch eager; "
            f"pass --model {shlex.quote(str(out))}"
        )
    elif keep:
        try:
            kept = cache.store(out, str(source_name or source), source, here(device), len(tabs))
        except OSError as e:
            err.print(f"[yellow]warning[/yellow]: calibration cache: not kept ({e})", highlight=False)
        else:
            console.print(
                f"kept for this machine in your calibration cache ({kept.parent}): carb predict --module --model "
                f"{shlex.quote(str(source_name or source))} uses it here"
            )


def _runtime_meta(runtime: str) -> dict:
    """The runtime the K were measured with, where it is not PyTorch eager (the network model's own)."""
    if runtime == "torch":
        return {}
    import importlib.metadata

    try:
        version = importlib.metadata.version(runtime)
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"runtime": runtime, "runtime_version": version}


def _machine_meta(nm: Any, device: str, threads: Optional[int], allocator: str, tabs: list[Any], out: Path) -> dict:
    """Where the K were measured: this machine's fingerprint, the source's, and the K's precisions."""
    from dataclasses import replace

    from carb.measure.fingerprint import here

    fp = replace(here(device), threads=threads or 1, allocator=allocator if device == "cpu" else None)
    return {
        "fingerprint": fp.to_dict(),
        "source_fingerprint": nm.meta.get("fingerprint"),
        "name": str(out),
        "calibration_precisions": sorted({t.precision for t in tabs}),
    }


def _networks_to_measure(
    source: Path, networks: Optional[Path], samples: int, seed: int
) -> tuple[Any, list[Any], str, list[Any], str]:
    """Return the network model, the K networks, a phrase naming them, their layer tables and their one runtime.

    The networks are those of the ``--networks`` file, or K zoo networks spread over the model's predicted latency;
    the runtime is :func:`carb.netmodel.runtime_of` of them.
    """
    from carb import netmodel
    from carb.families import SpaceError
    from carb.graph import CaptureError

    try:
        nm = netmodel.load(source)
        if networks is not None:
            cfgs = netmodel.read_networks(networks)
            if len(cfgs) < 3:
                fail(f"--networks {networks}: {len(cfgs)} networks; need at least 3")
            what = f"{len(cfgs)} networks of {networks}"
        else:
            with console.status(
                f"choosing {samples} zoo networks spread over the predicted latency and the input sizes"
            ):
                cfgs = netmodel.choose_networks(nm, samples, seed=seed)
            what = f"{len(cfgs)} carb.families.zoo networks (seed {seed})"
        runtime = netmodel.runtime_of(cfgs)  # one runtime per calibration
        # a --networks file names the user's code: importing, building and capturing it runs it
        with running_user_code(f"--networks {networks}") if networks is not None else contextlib.nullcontext():
            tables = [netmodel.capture_config(c) for c in cfgs]
    except (netmodel.ModelError, CaptureError, SpaceError, OSError) as e:
        fail(str(e))
    return nm, cfgs, what, tables, runtime


def _networks_measured_ok(rows: Any, df: Any, cfgs: list[Any]) -> tuple[list[bool], Any]:
    """Return which of the K networks measured ok and their measured rows, in the order of ``df``.

    Fewer than 3 is a usage error; the others are left out of the calibration with a line each saying why.
    """
    by_id = rows.set_index("config_id")
    ok = [cid in by_id.index and by_id.loc[cid, "status"] == "ok" for cid in df.config_id]
    if sum(ok) < 3:
        fail(
            f"calibration: {sum(ok)} of {len(df)} networks measured ok; need at least 3 "
            f"(statuses: {', '.join(sorted(set(map(str, rows['status']))))})"
        )
    for c, o in zip(cfgs, ok):
        if not o:  # calibrated on the others; the user sees which and why
            r = by_id.loc[c.config_id] if c.config_id in by_id.index else None
            why = f"{r['status']}: {r['message']}" if r is not None else "not measured"
            err.print(f"[yellow]left out of the calibration: {c.label()} ({why})")
    return ok, by_id.loc[[cid for cid, o in zip(df.config_id, ok) if o]].reset_index()


def _print_net_calibration(nm: Any, model: Any, tabs: list[Any], cfgs: list[Any], fit_rows: Any, title: str) -> None:
    """Print the K networks' measured and predicted latency and memory, and the source model's error on them."""
    from carb import netmodel

    rows_k = netmodel._network_rows(tabs, nm.layer)[0]  # calibration keeps the layer model
    before, after = nm.predict_rows(rows_k), model.predict_rows(rows_k)
    t = Table(
        "network",
        "measured ms",
        "source model ms",
        "calibrated ms",
        "measured MB",
        "calibrated MB",
        title=title,
    )
    labels = {c.config_id: c.label() for c in cfgs}
    for i, (_, r) in enumerate(fit_rows.iterrows()):
        t.add_row(
            labels.get(r["config_id"], str(r["config_id"])),
            f"{r['latency_ms']:.2f}",
            f"{before['latency_ms'].iloc[i]:.2f}",
            f"{after['latency_ms'].iloc[i]:.2f}",
            f"{r['memory_mb']:.1f}",
            f"{after['memory_mb'].iloc[i]:.1f}",
        )
    console.print(t)
    log_err = np.abs(np.log(before["latency_ms"].to_numpy() / fit_rows["latency_ms"].to_numpy()))
    console.print(
        f"source model on these networks: median latency error {100 * (np.exp(np.median(log_err)) - 1):.1f}% "
        f"before calibration; the calibrated model's 90% latency interval is x/÷"
        f"{np.exp(model.calibration.get('latency_ms', {}).get('q', model.q.get('latency_ms', 0))):.2f}"
    )
