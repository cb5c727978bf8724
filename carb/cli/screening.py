"""`carb screen`, `calibrate`, `validate` and `demo`: two-stage screening and its checks on hardware."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer
from rich.table import Table

from ._app import app, check_out_dir, console, err, fail, load_model, parse_budget_options, pick_option
from ._progress import CampaignProgress


def _space_frame(sp: Any, precisions: Optional[list[str]]) -> Any:
    """The configs of a space, only those in ``precisions`` when given (``--precision``)."""
    frame = sp.to_frame()
    if not precisions:
        return frame
    if "precision" not in frame.columns:
        fail(f"--precision: space {sp.name} has no precision parameter")
    have = sorted(set(frame["precision"].astype(str)))
    bad = [p for p in precisions if p not in have]
    if bad:
        fail(f"--precision {bad[0]}: not in space {sp.name} (it has {', '.join(have)})")
    return frame[frame["precision"].isin(precisions)].reset_index(drop=True)


@app.command()
def screen(
    space_name: str = typer.Option(..., "--space", help="Built-in space name or TOML file to screen."),
    precision: Optional[list[str]] = typer.Option(
        None,
        "--precision",
        help=("Only the space's configs in this precision (repeat): e.g. fp32 on a CPU without native bf16."),
    ),
    target: Optional[Path] = typer.Option(
        None, "--target-model", help=("Model directory of the target device (from carb train or carb calibrate).")
    ),
    source: Optional[Path] = typer.Option(
        None, "--source-model", help=("Model directory of a source device for Stage 1 (either kind).")
    ),
    target_old: Optional[Path] = typer.Option(None, "--target", hidden=True, help="Old name of --target-model."),
    source_old: Optional[Path] = typer.Option(None, "--source", hidden=True, help="Old name of --source-model."),
    budget: Optional[list[str]] = typer.Option(
        None, "--budget", help=("TARGET=VALUE per forward of the batch, e.g. latency_ms=20 (repeat).")
    ),
    objective: Optional[list[str]] = typer.Option(
        None,
        "--objective",
        help=("min:COLUMN or max:COLUMN (repeat); default energy per image, latency, memory, capacity."),
    ),
    risk: str = typer.Option(
        "decide",
        "--risk",
        help=(
            "decide (three-way: accept, measure or reject at --confidence), or the two-way safe (interval upper bound "
            "within budget), point, optimistic."
        ),
    ),
    confidence: float = typer.Option(
        0.9,
        "--confidence",
        help=(
            "Coverage of the intervals the budget calls and the shortlist use, in (0, 1): with --rule interval a "
            "config "
            "is accepted when its whole interval is within every budget and rejected when it is over one budget with "
            "at "
            "least this chance, otherwise it is to measure; with --rule joint, the least chance a call is right."
        ),
    ),
    rule: str = typer.Option(
        "interval",
        "--rule",
        help=(
            "With --risk decide: interval (default: accept when each target's whole --confidence interval is within "
            "its "
            "budget, reject when one target is over its budget with chance >= --confidence) or joint (accept when the "
            "chance of meeting every budget is at least --confidence, from the model's conformal scores: fewer to "
            "measure, more false accepts)."
        ),
    ),
    max_shortlist: Optional[int] = typer.Option(
        None,
        "--max-shortlist",
        min=1,
        help=("Keep at most this many shortlisted configs (best ranked first): your profiling budget."),
    ),
    shortlist_share: float = typer.Option(
        0.10,
        "--shortlist-share",
        help=(
            "With --risk decide: keep at most this share of the candidates on the shortlist, the likeliest on the "
            "Pareto front first (default 0.10 = 90% pruning; chosen by measurement: on cpu-1t -> cpu-2t the 10% "
            "likeliest held 95-100% of the true front at every budget quantile, 8% only 90%). 1 = no share cap."
        ),
    ),
    front_min_prob: Optional[float] = typer.Option(
        None,
        "--front-min-prob",
        help=(
            "With --risk decide: shortlist the configs on the sampled Pareto front at least this often (default 0.02)."
        ),
    ),
    z: float = typer.Option(
        2.0, "--margin", help=("Stage 1 margin, in residual standard deviations of the source-to-target map.")
    ),
    out: Path = typer.Option(
        ..., "--out", help=("Output directory: shortlist.parquet/.csv, feasible.parquet, summary.json.")
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Two-stage screening: rank the space with a source model, re-score survivors with the target model, keep the Pareto front.

    Example: carb screen --space screening --target-model models/cpu-1t --budget latency_ms=20 --out screen-out
    """  # noqa: E501
    from carb.decide.pareto import parse_objectives
    from carb.decide.screen import screen as run_screen
    from carb.families import space

    target = pick_option(target, target_old, "--target-model", "--target", required=True)
    source = pick_option(source, source_old, "--source-model", "--source")
    budgets = parse_budget_options(budget)
    if not 0 < shortlist_share <= 1:
        fail(f"--shortlist-share {shortlist_share:g}: must be in (0, 1], a share of the candidates")
    if not z >= 0:  # a negative margin would prune configs the source model itself keeps
        fail(f"--margin {z:g}: must be >= 0 (residual standard deviations of the source-to-target map)")
    check_out_dir(out)
    try:
        objs = parse_objectives(objective) if objective else None
    except ValueError as e:
        fail(str(e))
    sp = space.load(space_name)
    frame = _space_frame(sp, precision)
    tgt = load_model(target)
    src = load_model(source) if source else None
    try:
        extra = {"front_min_prob": front_min_prob} if front_min_prob is not None else {}
        res = run_screen(
            frame,
            tgt,
            budgets,
            source=src,
            objectives=objs,
            risk=risk,
            z=z,
            confidence=confidence,
            max_shortlist=max_shortlist,
            shortlist_share=None if shortlist_share >= 1 else shortlist_share,
            rule=rule,
            **extra,
        )
    except ValueError as e:
        fail(str(e))
    res.summary.update(
        space=sp.name,
        space_source=sp.source,
        precisions=precision or None,
        target_model=str(target),
        source_model=str(source) if source else None,
        # the machine's speed while the target model was calibrated: carb validate
        # reports the drift since and scores the calls at that speed too
        calibration_sentinel_ms=(getattr(tgt, "meta", None) or {}).get("sentinel_ms") or None,
    )
    _write_screen(res, out)
    if json_out:
        print(json.dumps(res.summary, indent=2, default=float))
        return
    _print_screening(res, sp.name, out)


def _print_screening(res: Any, space_name: str, out: Path) -> None:
    """What ``carb screen`` did: the counts, the budget calls with hints, the shortlist, the files."""
    s = res.summary
    console.print(
        f"[bold]{space_name}[/bold]: {s['candidates']:,} candidates -> Stage 1 {s['after_stage1']:,} "
        f"-> feasible {s['feasible']:,} -> shortlist {s['shortlist']:,} "
        f"(pruned {100 * s['pruning_ratio']:.1f}%)"
    )
    if "decisions" in s:
        d = s["decisions"]
        console.print(
            f"budget calls at {100 * s['confidence']:.0f}% confidence: accept {d['accept']:,}, "
            f"reject {d['reject']:,}, measure {d['measure']:,} ({100 * s['decided_share']:.1f}% decided; "
            f"the {d['measure']:,} to measure are in measure.csv, likeliest on the front first)"
        )
        if d["measure"] and s.get("measure_by_budget"):
            console.print(
                "to measure, by the budget their interval reaches over: "
                + ", ".join(f"{t} {k:,}" for t, k in s["measure_by_budget"].items())
            )
        for hint in (_width_hint(s, res.decisions), _crowd_hint(s)):
            if hint:
                console.print(hint)
    if "share_for_front" in s:
        console.print(
            f"hint: the probable Pareto front holds about {s['expected_front']:.0f} configs, and the "
            f"{100 * s['shortlist_share']:g}% cap ({s['shortlist_share_cap']:,} configs) leaves less than "
            f"twice that: on our benchmarks it then missed 13-27% of the true front; "
            f"--shortlist-share {s['share_for_front']:g} keeps room for it"
        )
    _print_shortlist(res.shortlist)
    console.print(
        f"wrote {out}/shortlist.parquet, shortlist.csv, feasible.parquet, "
        + ("measure.parquet, measure.csv, " if "decisions" in s else "")
        + "summary.json"
    )


#: below this decided share, `carb screen` says why so much is left to measure
HINT_DECIDED = 0.8
#: ... and names a budget the candidates crowd at when at least this share of them is
#: predicted within an interval's half-width of it
HINT_CROWDED = 0.1


def _width_hint(summary: dict, decisions) -> str | None:
    """Return a line for a screening that left much to measure: how wide the intervals are and what narrows them.

    The width is the target model's median relative half-width per budgeted target over the Stage 2 configs.
    None when at least :data:`HINT_DECIDED` was decided.
    """
    import numpy as np

    if summary.get("decided_share", 1.0) >= HINT_DECIDED or decisions is None or decisions.empty:
        return None
    widths = []
    for t in summary.get("budgets", {}):
        if f"{t}_lo" in decisions.columns and f"{t}_hi" in decisions.columns:
            with np.errstate(divide="ignore", invalid="ignore"):
                f = np.sqrt(decisions[f"{t}_hi"].to_numpy(float) / decisions[f"{t}_lo"].to_numpy(float))
            f = f[np.isfinite(f)]
            if len(f):
                m = float(np.median(f))  # the interval is [p / m, p * m]: a factor, ± only while small
                widths.append(f"{t} ±{100 * (m - 1):.0f}%" if m < 1.5 else f"{t} x/÷{m:.1f}")
    if not widths:
        return None
    return (
        f"hint: {100 * (1 - summary['decided_share']):.0f}% were too close to a budget to call: the target "
        f"model's {100 * summary['confidence']:.0f}% intervals are {', '.join(widths)} (median); more "
        "calibration measurements (carb calibrate --samples 20) or a model trained on this device "
        "narrow them, and carb validate --measure-first measures the rest"
    )


def _crowd_hint(summary: dict) -> str | None:
    """Return a line for a space whose candidates crowd at a budget.

    Crowding is at least :data:`HINT_CROWDED` of them predicted within the intervals' median half-width of it
    (``summary["crowding"]`` of :func:`carb.decide.screen.screen`). Narrower intervals call few of those; None when
    no budget crowds or nothing is left to measure.
    """
    if not (summary.get("decisions") or {}).get("measure"):
        return None
    crowded = [
        f"{100 * c['share_within']:.0f}% of the candidates are predicted within ±"
        f"{100 * c['half_width_rel']:.1f}% of the {t} budget"
        for t, c in (summary.get("crowding") or {}).items()
        if c.get("share_within", 0) >= HINT_CROWDED
    ]
    if not crowded:
        return None
    return (
        f"hint: the space crowds at a budget ({'; '.join(crowded)}): narrower intervals decide few of "
        "those; a budget a few percent away does, or measure them"
    )


def _write_screen(res, out: Path) -> None:
    from carb.datasets import write

    out.mkdir(parents=True, exist_ok=True)
    write(res.shortlist, out / "shortlist.parquet")
    write(res.shortlist, out / "shortlist.csv")
    write(res.feasible, out / "feasible.parquet")
    if "decisions" in res.summary:  # three-way calls: the configs to measure, in order
        write(res.measure, out / "measure.parquet")
        write(res.measure, out / "measure.csv")
    (out / "summary.json").write_text(json.dumps(res.summary, indent=2, default=float))


def _print_shortlist(df, limit: int = 15) -> None:
    from rich.table import Column

    from carb.families.space import configs_from_frame

    if df.empty:
        console.print("no config meets the budgets")
        return
    cols = [c for c in ("energy_j", "latency_ms", "memory_mb") if c in df.columns and df[c].notna().any()]
    # with three-way calls the probable front also holds configs to measure (their interval
    # straddles a budget): the call and the chance of being on the front say which is which
    calls = [c for c in ("decision", "p_front") if c in df.columns]
    t = Table(
        "rank",
        Column("config", no_wrap=True),
        *[f"{c} [lo, hi]" for c in cols],
        "GFLOP/img",
        *[{"decision": "call", "p_front": "P(front)"}[c] for c in calls],
        title=f"shortlist ({len(df)} configs{', first %d' % limit if len(df) > limit else ''})",
    )
    for cfg, r in zip(configs_from_frame(df.head(limit)), df.head(limit).to_dict("records")):
        t.add_row(
            str(r["rank"]),
            cfg.label(),
            *[f"{r[c]:.3g} [{r[c + '_lo']:.3g}, {r[c + '_hi']:.3g}]" for c in cols],
            f"{r['flops_per_image'] / 1e9:.3g}",
            *[str(r[c]) if c == "decision" else f"{r[c]:.2f}" for c in calls],
        )
    console.print(t)


@app.command()
def calibrate(
    source: Optional[Path] = typer.Option(
        None, "--model", help=("Model directory of the source device (from carb train or carb calibrate).")
    ),
    source_old: Optional[Path] = typer.Option(None, "--source", hidden=True, help="Old name of --model."),
    device: str = typer.Option("cpu", "--device", help="The new device: cpu, cuda or cuda:i."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    samples: int = typer.Option(10, "--samples", min=2, help="How many configs to measure (K)."),
    space_name: str = typer.Option("cpu", "--space", help="Space to choose the K configs from."),
    precision: Optional[list[str]] = typer.Option(
        None,
        "--precision",
        help=("Only the space's configs in this precision (repeat): e.g. fp32 on a CPU without native bf16."),
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the sampler."),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    out: Path = typer.Option(..., "--out", help="Directory of the calibrated model."),
    method: Optional[str] = typer.Option(
        None,
        "--method",
        help=(
            "Map: log (default; log-space map of the source prediction) or nnls (HELP-style, with cost features; "
            "carb.transfer); for a network model factor (default; one device factor, or none where it does not help), "
            "log (also a slope and a batch term) or refit (its network terms refitted on the K networks)."
        ),
    ),
    networks: Optional[Path] = typer.Option(
        None,
        "--networks",
        help=(
            "With a network model: a text file of the networks to measure, one per line: SPEC INPUT [PRECISION], e.g. "
            "torchvision.models:resnet18 1x3x224x224 fp32 (default: K networks of carb.families.zoo spread over the "
            "model's predicted latency)."
        ),
    ),
    rounds: int = typer.Option(
        1, "--rounds", min=1, help=("Visits per config, spread over the calibration campaign and pooled.")
    ),
) -> None:
    """Measure K well-spread configs on a new device and map the source model to it.

    With a network model (e.g. the shipped layers-cpu-avx2-1t, for carb predict --module), K
    whole networks are measured instead of configs of a space.

    Example: carb calibrate --model models/cpu-1t --device cpu --threads 2 --samples 10 --out models/cpu-2t
    """
    from carb.families import space
    from carb.netmodel import resolve
    from carb.transfer.calibrate import check_model_out, choose_samples

    source = pick_option(source, source_old, "--model", "--source", required=True)
    source = resolve(source)  # a shipped network model may be named (layers-cpu-avx2-1t)
    check_out_dir(out)
    try:  # before measuring anything: a calibrated model never overwrites a model or its source
        check_model_out(out, source)
    except ValueError as e:
        fail(f"--out: {e}")

    if (Path(source) / "netmodel.json").is_file():
        from carb.netmodel import DEFAULT_CALIBRATION_METHOD

        if precision:
            fail(
                "--precision: for a config model's space; a network model calibrates on networks (--networks "
                "lines may name a precision)"
            )

        _calibrate_netmodel(
            source,
            device,
            threads,
            samples,
            seed,
            max_time,
            out,
            method or DEFAULT_CALIBRATION_METHOD,
            networks,
            rounds,
        )
        return
    method = method or "log"
    if method not in ("log", "nnls"):
        fail(f"--method: unknown value {method!r} (expected log or nnls)")
    if networks is not None:
        fail(
            f"--networks: only with a network model (--model {source} is a config model; "
            "the shipped layers-cpu-avx2-1t is one)"
        )
    src = load_model(source)
    sp = space.load(space_name)
    frame = _space_frame(sp, precision)
    _warn_foreign_precisions(device, frame)
    pick = choose_samples(frame, src, samples, seed=seed)
    meta = {"device": device, "samples": samples, "space": sp.name, "seed": seed, "source": str(source)}
    model = _fit_on_k(src, source, pick, device, threads, max_time, rounds, out, method, meta)
    _print_maps(model, device)
    console.print(f"wrote {out} (a model directory: use it as --target-model of carb screen, or --model anywhere)")


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
) -> Any:
    """Measure the K configs of ``pick``, map ``src`` to the device on them and save the calibrated model in ``out``.

    The K measurements are saved beside it.
    """
    import shutil
    import tempfile

    from carb.campaign import rounds as states
    from carb.campaign import speed as drift
    from carb.transfer.calibrate import fit_calibrated

    with tempfile.TemporaryDirectory(prefix="carb-calibrate-") as tmp:
        store = Path(tmp) / "calibration.duckdb"
        measured = _measure_frame(pick, device, threads, max_time, store, "calibrating", rounds=rounds)
        # visits timed in another state of the machine than the fastest most were timed in
        # (their paired sentinel says which) are measured again: no one ratio corrects them
        measured, state = states.retake_off_state(
            measured,
            lambda f: _measure_frame(
                pick[pick.config_id.isin(set(f.config_id))],
                device,
                threads,
                max_time,
                store,
                "measuring again (another machine state)",
                rounds=rounds,
                again=True,
            ),
        )
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
        )
        model.save(out, source_dir=source)
        shutil.copy2(store, out / "calibration.duckdb")  # the K measurements, kept with the model
    return model


def _print_maps(model: Any, device: str) -> None:
    """The calibrated model's map per target and its interval widening."""
    from carb.transfer.calibrate import NnlsMap

    t = Table("target", "K", "map", "interval widening (x)", title=f"calibrated to {device}")
    for name, m in model.maps_.items():
        if isinstance(m, NnlsMap):
            terms = ["%.3g" % m.intercept] + [f"{w:.3g}·{f}" for w, f in zip(m.coef, [*m.features, "s"]) if w]
            t.add_row(name, str(m.n), "y = " + " + ".join(terms), f"{np.exp(m.q):.2f}")
            continue
        if m.add:  # the additive map: a fixed amount on top of the source's prediction
            t.add_row(name, str(m.n), f"y = s {'+' if m.add > 0 else '-'} {abs(m.add):.3g}", f"{np.exp(m.q):.2f}")
            continue
        terms = ["%.3g" % m.coef[0], "%.3g·log s" % m.coef[1]] + (
            ["%.3g·log batch" % m.coef[2]] if len(m.coef) == 3 else []
        )
        t.add_row(name, str(m.n), "log y = " + " + ".join(terms), f"{np.exp(m.q):.2f}")
    console.print(t)


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
) -> None:
    """Run ``carb calibrate`` of a network model: measure K whole networks and map or refit the model on them.

    The K networks are the user's list or K spread zoo networks; the mapping is :func:`carb.netmodel.calibrate_on`.
    """
    import shutil
    import tempfile

    import pandas as pd

    from carb import netmodel
    from carb.campaign import speed as drift
    from carb.families import SpaceError, nets
    from carb.graph import CaptureError

    if method not in netmodel.CALIBRATION_METHODS:
        fail(
            f"--method: unknown value {method!r} for a network model (expected "
            f"{' or '.join(netmodel.CALIBRATION_METHODS)})"
        )
    try:
        nm = netmodel.load(source)
        if networks is not None:
            cfgs = nets.read_networks(networks)
            if len(cfgs) < 3:
                fail(f"--networks {networks}: {len(cfgs)} networks; need at least 3")
            what = f"{len(cfgs)} networks of {networks}"
        else:
            with console.status(
                f"choosing {samples} zoo networks spread over the predicted latency and the input sizes"
            ):
                cfgs = netmodel.choose_networks(nm, samples, seed=seed)
            what = f"{len(cfgs)} carb.families.zoo networks (seed {seed})"
        tables = [netmodel.capture_config(c) for c in cfgs]
    except (netmodel.ModelError, CaptureError, SpaceError, OSError) as e:
        fail(str(e))
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
        rows = _measure_frame(df, device, threads, max_time, store, "calibrating", rounds=rounds, allocator=allocator)
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
        meas = by_id.loc[[cid for cid, o in zip(df.config_id, ok) if o]].reset_index()
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
                },
            )
        except netmodel.ModelError as e:
            fail(str(e))
        model.device = f"{device}-{threads or 1}t" if device == "cpu" else device
        model.save(out)
        shutil.copy2(store, out / "calibration.duckdb")  # the K measurements, kept with the model
    rows_k = netmodel._network_rows(tabs, nm.layer)[0]  # calibration keeps the layer model
    before, after = nm.predict_rows(rows_k), model.predict_rows(rows_k)
    t = Table(
        "network",
        "measured ms",
        "source model ms",
        "calibrated ms",
        "measured MB",
        "calibrated MB",
        title=f"{len(tabs)} networks measured on {device} ({method})",
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
    console.print(f"wrote {out} (a network model: carb predict --module ... --model {out})")


def _measure_frame(
    df,
    device: str,
    threads: Optional[int],
    max_time: float,
    store_path: Path,
    what: str,
    rounds: int = 1,
    again: bool = False,
    allocator: str = "default",
):
    """Measure the configs of a frame into a store and return the measured rows.

    ``rounds`` visits per config are spread over the campaign, pooled. ``again``: measure configs the store holds
    once more, into its ``remeasurements`` table (the first rows kept), and return the new rows. ``allocator``: the
    CPU workers' (:data:`carb.measure.cpu.ALLOCATORS`).
    """
    from dataclasses import replace

    from carb.campaign.runner import run_campaign
    from carb.campaign.store import Store
    from carb.families.space import configs_from_frame
    from carb.measure import get_backend
    from carb.measure.base import Protocol

    configs = configs_from_frame(df)
    protocol = replace(Protocol.default_for(device), max_time_s=max_time)
    opts = {"threads": threads or 1, "allocator": allocator} if device == "cpu" else {"lock_clocks": False}
    try:
        backend = get_backend(device, protocol=protocol, **opts)
    except (ValueError, RuntimeError) as e:
        fail(str(e))
    store_path.parent.mkdir(parents=True, exist_ok=True)
    with backend, Store(store_path) as store:
        with CampaignProgress(err, what, store=str(store_path)) as progress:
            result = run_campaign(configs, backend, store, rounds=rounds, remeasure=again, **progress.callbacks)
        if result.interrupted:
            raise typer.Exit(130)
        if again:
            rows = store.measurements(result.platform, table="remeasurements")
            rows = rows[rows.run_id == result.run_id]
        else:
            rows = store.measurements(result.platform)
    return rows[rows.config_id.isin(set(df.config_id))].reset_index(drop=True)


@app.command()
def validate(
    screen_dir: Path = typer.Option(..., "--screen", help="Output directory of carb screen."),
    device: Optional[str] = typer.Option(None, "--device", help="Measure on this device (cpu, cuda[:i])."),
    truth: Optional[str] = typer.Option(
        None,
        "--data",
        help=("Instead of measuring: a dataset (name or file) that measured the whole space on the target."),
    ),
    truth_old: Optional[str] = typer.Option(None, "--truth", hidden=True, help="Old name of --data."),
    platform: Optional[str] = typer.Option(
        None,
        "--platform",
        help=("With --data: the platform whose rows are the truth, for a dataset of several (nb201: e.g. edgegpu)."),
    ),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (default 1)."),
    control: int = typer.Option(
        10, "--control", min=0, help=("Random configs of the space measured besides the shortlist.")
    ),
    limit: int = typer.Option(
        20, "--limit", min=1, help=("Measure at most this many shortlisted configs (best ranked first).")
    ),
    measure_first: bool = typer.Option(
        False,
        "--measure-first",
        help=(
            "With --device: first measure the configs the screening sent to measure (up to --measure-limit), then the "
            "shortlist and the control sample."
        ),
    ),
    measure_limit: int = typer.Option(
        50,
        "--measure-limit",
        min=1,
        help=("With --measure-first: measure at most this many of them (likeliest on the front first)."),
    ),
    max_time: float = typer.Option(2.0, "--max-time", min=0.1, help="Sampling seconds per config."),
    seed: int = typer.Option(0, "--seed", help="Seed of the control sample."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Check a screening on hardware (or against a dataset of the whole space): budget accuracy, false accepts/rejects, Pareto recall.

    Example: carb validate --screen screen-out --device cpu
    """  # noqa: E501
    truth = pick_option(truth, truth_old, "--data", "--truth")
    if (device is None) == (truth is None):
        fail("give exactly one of --device or --data")
    scr = _read_screen(screen_dir, measure_first)
    if truth is not None:
        res = _validate_on_truth(scr, truth, platform)
    else:
        todo, ctrl = _validation_configs(scr, limit, control, seed, measure_first, measure_limit)
        res = _validate_on_device(scr, screen_dir, todo, ctrl, device, threads, max_time, json_out)
    (screen_dir / "validation.json").write_text(json.dumps(res, indent=2, default=float))
    if json_out:
        print(json.dumps(res, indent=2, default=float))
        return
    _print_validation(res)


@dataclass
class _Screened:
    """What ``carb validate`` reads of a ``carb screen`` output."""

    summary: dict[str, Any]
    shortlist: Any
    budgets: dict[str, float]
    objectives: list[tuple[str, str]]
    accepted: set
    to_measure: Any  # the configs the screening sent to measure (three-way calls), else None


def _read_screen(screen_dir: Path, measure_first: bool) -> _Screened:
    """A ``carb screen`` output directory, read (an unreadable one is a usage error)."""
    import pandas as pd

    try:
        summary = json.loads((screen_dir / "summary.json").read_text())
        shortlist = pd.read_parquet(screen_dir / "shortlist.parquet")
        feasible = pd.read_parquet(screen_dir / "feasible.parquet")
    except (OSError, ValueError) as e:
        fail(f"{screen_dir}: not a carb screen output ({' '.join(str(e).split())[:160]})")
    budgets = summary["budgets"]
    objs = [(o.split(":", 1)[1], o.split(":", 1)[0]) for o in summary["objectives"]]
    accepted = set(feasible.config_id)
    to_measure = None
    if (screen_dir / "measure.parquet").is_file():  # a three-way screening
        try:
            to_measure = pd.read_parquet(screen_dir / "measure.parquet")
        except (OSError, ValueError) as e:
            fail(f"{screen_dir}/measure.parquet: unreadable ({' '.join(str(e).split())[:160]})")
    elif measure_first:
        fail(f"--measure-first: {screen_dir} has no measure set (screen with --risk decide)")
    return _Screened(
        summary=summary, shortlist=shortlist, budgets=budgets, objectives=objs, accepted=accepted, to_measure=to_measure
    )


def _validate_on_truth(scr: _Screened, truth: str, platform: Optional[str]) -> dict[str, Any]:
    """``carb validate --data``: the screening scored against a dataset of the whole space."""
    from carb import datasets
    from carb.campaign import speed as drift
    from carb.decide.validate import validate_against_truth

    rows = datasets.load(truth, device=platform)
    if "platform" in rows.columns:  # a dataset of several platforms: the truth is one of them
        names = sorted(map(str, rows["platform"].dropna().unique()))
        if platform is not None and platform not in names:
            fail(f"--platform {platform}: not in {truth} (platforms: {', '.join(names)})")
        if platform is None and len(names) > 1:
            fail(f"--data {truth} holds {len(names)} platforms ({', '.join(names)}); choose one with --platform")
        rows = rows[rows["platform"] == (platform or names[0])]

    # the truth at the campaign's median speed where the paired sentinel timed a row, as the
    # target model learned it (carb train); data without a speed index: the raw medians
    rows = drift.corrected(rows, paired_only=True)
    data = _screened_rows(rows, scr.summary, truth)
    res = validate_against_truth(
        list(scr.accepted),
        list(scr.shortlist.config_id),
        data,
        scr.budgets,
        scr.objectives,
        measure_ids=list(scr.to_measure.config_id) if scr.to_measure is not None else None,
    )
    res["mode"] = f"truth: {truth}"
    res["truth_latency"] = drift.CORRECTED_LATENCY if rows.attrs["corrected_rows"] else "raw medians"
    res["truth_rows_not_screened"] = int(data.attrs.get("not_screened", 0))
    return res


def _validation_configs(
    scr: _Screened, limit: int, control: int, seed: int, measure_first: bool, measure_limit: int
) -> tuple[Any, Any]:
    """Return the configs to measure and the control sample.

    The configs to measure are those sent to measure first when asked, the best-ranked shortlisted ones and a random
    control sample.
    """
    import pandas as pd

    from carb.families import space

    sp = space.load(scr.summary.get("space_source") or scr.summary["space"])
    frame = sp.to_frame()
    first = (
        scr.to_measure.head(measure_limit)[frame.columns]
        if measure_first and scr.to_measure is not None
        else frame.iloc[:0]
    )
    top = scr.shortlist.head(limit)
    top = top[~top.config_id.isin(set(first.config_id))]
    rest = frame[~frame.config_id.isin(set(top.config_id) | set(first.config_id))]
    ctrl = rest.sample(min(control, len(rest)), random_state=seed)
    return pd.concat([first, top[frame.columns], ctrl], ignore_index=True), ctrl


def _validate_on_device(
    scr: _Screened,
    screen_dir: Path,
    todo: Any,
    ctrl: Any,
    device: str,
    threads: Optional[int],
    max_time: float,
    json_out: bool,
) -> dict[str, Any]:
    """``carb validate --device``: the configs of ``todo`` measured, and the screening's calls scored on them."""
    from carb.campaign import rounds as states
    from carb.decide.validate import budget_metrics, decision_metrics, drift_corrected_calls, truly_feasible

    budgets, to_measure = scr.budgets, scr.to_measure
    measured = _measure_frame(todo, device, threads, max_time, screen_dir / "validation.duckdb", "validating")
    measured = measured[measured.status == "ok"]
    # visits timed in another state of the machine than the calibration's (or, without its
    # readings, than the fastest most of them were timed in) are measured again
    cal_s = scr.summary.get("calibration_sentinel_ms")
    measured, state = states.retake_off_state(
        measured,
        lambda f: _measure_frame(
            todo[todo.config_id.isin(set(f.config_id))],
            device,
            threads,
            max_time,
            screen_dir / "validation.duckdb",
            "measuring again (another machine state)",
            again=True,
        ),
        ref_ms=states.machine_state(cal_s) if cal_s else None,
    )
    if (line := states.state_line(state)) and not json_out:  # with --json: under machine_state
        console.print(line)
    feas = truly_feasible(measured, budgets)
    res = budget_metrics(measured.config_id.isin(scr.accepted).to_numpy(), feas)
    res.update(
        mode=f"measured on {device}",
        shortlist_measured=int(measured.config_id.isin(set(scr.shortlist.config_id)).sum()),
        control_measured=int(measured.config_id.isin(set(ctrl.config_id)).sum()),
    )
    meas = (
        measured.config_id.isin(set(to_measure.config_id)).to_numpy()
        if to_measure is not None
        else np.zeros(len(measured), bool)
    )
    calls = np.where(meas, "measure", np.where(measured.config_id.isin(scr.accepted), "accept", "reject"))
    if to_measure is not None:
        res["decisions"] = decision_metrics(calls, feas)
        # the configs that were to measure, now measured: their calls are made
        res.update(measure_set_measured=int(meas.sum()), measure_set_within_budget=int((meas & feas).sum()))
    # the same calls against the latencies at the calibration's speed (a config timed at a
    # slow moment of a drifting VM is not over budget at the speed the model was fitted at)
    res.update(drift_corrected_calls(measured, budgets, calls, cal_s))
    res["machine_state"] = state
    return res


def _print_validation(res: dict[str, Any]) -> None:
    """Print the validation's table.

    The drift comes first when it exceeds its chance variation, then the two-way figures, the three-way ones on the
    decided configs and the drift-corrected calls.
    """
    moved = res.get("drift") or {}
    if moved.get("exceeds"):  # the machine's own drift first: it weighs on every latency below
        console.print(f"[yellow]{moved['line']}[/yellow]")
    t = Table("metric", "value", title=f"validation ({res['mode']})")
    d = res.get("decisions")
    for k in (
        "n",
        "accuracy",
        "false_accept_rate",
        "false_reject_rate",
        "pareto_recall",
        "hypervolume_ratio",
        "measure_set_measured",
        "measure_set_within_budget",
    ):
        if k in res:
            v = res[k]
            # with three-way calls these two-way figures count a config left to measure as
            # rejected: say so, the decided ones are scored below
            label = f"{k} (measure counted as reject)" if d and k in ("accuracy", "false_reject_rate") else k
            t.add_row(label, f"{v:.3f}" if isinstance(v, float) else str(v))
    if d:  # three-way calls: scored on the decided configs, with the share left to measure beside
        t.add_row("decided share (accept or reject)", f"{d['decided']:.3f} ({d['measure']} to measure)")
        for k in ("accuracy", "false_accept_rate", "false_reject_rate"):
            t.add_row(f"{k} on decided", f"{d[k]:.3f}")
    c = res.get("corrected")
    if c:  # the same calls, latencies at the reference speed (drift_corrected_calls)
        lab = "on decided, " if d else ""
        t.add_row(
            f"accuracy {lab}drift-corrected",
            f"{c['accuracy']:.3f} (false accepts {c['false_accepts']}, "
            f"false rejects {c['false_rejects']}; latency at {c['reference']})",
        )
    if moved and not moved.get("exceeds"):
        t.add_row("machine speed drift", moved["line"])
    console.print(t)


def _screened_rows(data, summary: dict, name: str):
    """Return the rows of a truth dataset whose configs the screen scored (its space's configs).

    A dataset of another or a larger space is scored on the screened configs only, and one that holds none of them
    is refused.
    """
    from carb.families import space
    from carb.families.space import SpaceError

    try:
        ids = set(space.load(summary.get("space_source") or summary["space"]).to_frame().config_id)
    except (SpaceError, KeyError) as e:
        fail(f"--data {name}: cannot tell which configs the screen scored ({e})")
    keep = data["config_id"].isin(ids) if "config_id" in data.columns else None
    if keep is None or not keep.any():
        fail(
            f"--data {name}: none of its {len(data):,} rows is a config of the screened space "
            f"{summary.get('space')!r} (a dataset of another space?)"
        )
    out = data[keep].reset_index(drop=True)
    out.attrs["not_screened"] = int((~keep).sum())
    return out
