"""``carb fewshot``: latency of every architecture of a space on a device with only K of them measured.

The space is every FBNet architecture of HELP's public data (:func:`carb.transfer.fewshot_help_fbnet`), or every
NAS-Bench-201 cell (``--space nb201``: :func:`carb.transfer.fewshot_help_nb201`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer

from ._app import app, atomic_file, check_out_file
from .report import _usage  # one UsageError maker for the sub-command modules

if TYPE_CHECKING:  # the CLI imports pandas only when a command runs
    import pandas as pd


@app.command("fewshot")
def fewshot(
    measured: Optional[Path] = typer.Option(
        None, "--data", help="Your device's K measurements: a .csv/.parquet with arch_id (0..4999) and latency_ms (ms)."
    ),
    device: Optional[str] = typer.Option(
        None,
        "--platform",
        help="Instead: a platform of help-fbnet taken as unseen; K of its archs 0..3999 are "
        "drawn (--samples, --seed) and archs 4000..4999 score the predictions.",
    ),
    samples: int = typer.Option(10, "--samples", min=2, help="K, with --platform."),
    seed: int = typer.Option(0, "--seed", help="Seed of the K drawn with --platform."),
    source: Optional[List[str]] = typer.Option(
        None, "--source", help="Source device (repeat); default HELP's source devices."
    ),
    method: str = typer.Option(
        "auto",
        "--method",
        help=("Map: auto, nnls or single (see carb.transfer); with --space nb201: ensemble (auto) or ridge."),
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Write the predictions (.parquet or .csv)."),
    json_out: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
    space: str = typer.Option(
        "fbnet",
        "--space",
        help=(
            "fbnet (HELP's 5,000 FBNet archs) or nb201 (NAS-Bench-201's 15,625 cells, HELP's protocol: the 10 "
            "reference cells + --samples drawn from the trimmed pool 0..899, scored on the trimmed test set 900..1899)."
        ),
    ),
) -> None:
    """Few-shot latency transfer on HELP's FBNet data: K measurements of a new device -> all 5,000 archs.

    Example: carb fewshot --platform titan_rtx_1 --samples 10
    """
    if (measured is None) == (device is None):
        raise _usage("give exactly one of --data or --platform")
    if space not in ("fbnet", "nb201"):
        raise _usage(f"--space {space}: unknown value (expected fbnet or nb201)")
    if space == "nb201":
        from carb.studies.nb201 import NB201_METHODS

        nb_method = "ensemble" if method == "auto" else method
        if nb_method not in NB201_METHODS:
            raise _usage(f"--method: unknown value {method!r} for --space nb201 (expected {', '.join(NB201_METHODS)})")
        _fewshot_nb201(measured, device, samples, seed, source, out, json_out, nb_method)
        return
    if method not in ("auto", "nnls", "single"):
        raise _usage(f"--method: unknown value {method!r} (expected auto, nnls or single)")
    _fewshot_fbnet(measured, device, samples, seed, source, method, out, json_out)


def _fewshot_fbnet(
    measured: Optional[Path],
    device: Optional[str],
    samples: int,
    seed: int,
    source: Optional[List[str]],
    method: str,
    out: Optional[Path],
    json_out: bool,
) -> None:
    """Run ``carb fewshot`` on HELP's FBNet data (:func:`carb.transfer.fewshot_help_fbnet`).

    The K measurements are the user's (``measured``) or K archs of a help-fbnet platform (``device``), whose test
    archs then score the predictions.
    """
    import numpy as np
    import pandas as pd
    from rich.console import Console
    from rich.table import Table
    from scipy.stats import spearmanr

    from carb.datasets import help_fbnet as hf
    from carb.studies.help_fbnet import fewshot_help_fbnet

    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise _usage(f"--out {out}: expected a .parquet or .csv file")
    if out is not None:
        check_out_file(out, inputs={"--data": measured})
    wide = hf.load(wide=True)
    truth = None
    if measured is not None:
        try:
            meas = pd.read_parquet(measured) if measured.suffix == ".parquet" else pd.read_csv(measured)
        except (OSError, ValueError) as e:
            raise _usage(f"--data {measured}: cannot read ({' '.join(str(e).split())[:160]})") from None
        meas = _at_median_speed(meas)
    else:
        col = f"latency_ms_{device}"
        if col not in wide.columns:
            raise _usage(f"--platform {device!r}: not in help-fbnet (platforms: {', '.join(hf.devices())})")
        if samples > len(hf.TRAIN_ARCH_IDS):
            raise _usage(f"--samples {samples}: K is drawn from the {len(hf.TRAIN_ARCH_IDS):,} training archs")
        ids = np.random.default_rng(seed).choice(np.asarray(hf.TRAIN_ARCH_IDS), size=samples, replace=False)
        truth = wide.set_index("arch_id")[col]
        meas = pd.DataFrame({"arch_id": ids, "latency_ms": truth.loc[ids].to_numpy()})
        if source is None:  # the held-out device is never its own source
            source = [d for d in hf.SOURCE_DEVICES if d != device]
    try:
        pred, model = fewshot_help_fbnet(meas, sources=source, method=method, table=wide)
    except ValueError as e:
        raise _usage(f"--data {measured}: {e}" if measured is not None else str(e)) from None
    summary: dict = {
        "k": int(pred.measured.sum()),
        "sources": model.sources_used_,
        "method": model.method_,
        "weights": model.weights(),
    }
    if truth is not None:
        test = pred[pred.arch_id.isin(hf.TEST_ARCH_IDS)]
        y = truth.loc[test.arch_id].to_numpy()
        summary.update(
            device=device,
            seed=seed,
            test_archs=int(len(test)),
            spearman=float(spearmanr(test.latency_ms, y).statistic),
            mape=float(np.mean(np.abs(test.latency_ms.to_numpy() - y) / y)),
        )
    if _write_and_print_json(pred, summary, out, json_out):
        return
    c = Console()
    t = Table("feature", "weight", title=f"map ({summary['method']}) from K = {summary['k']} measurements")
    for name, w in summary["weights"].items():
        t.add_row(name, f"{w:.4g}")
    c.print(t)
    if truth is not None:
        c.print(
            f"{device}: Spearman {summary['spearman']:.3f}, MAPE {100 * summary['mape']:.1f}% on "
            f"{summary['test_archs']} test archs (HELP's protocol: archs 4000..4999)"
        )
    if out is not None:
        c.print(f"wrote {out} ({len(pred)} archs)")


def _fewshot_nb201(
    measured, device, samples: int, seed: int, source, out, json_out: bool, method: str = "ensemble"
) -> None:
    """Run ``carb fewshot --space nb201``.

    It runs :func:`carb.transfer.fewshot_help_nb201` on a platform of the nb201 dataset, or
    :func:`carb.transfer.fewshot_nb201` on your measurements.
    """
    import pandas as pd
    from rich.console import Console

    from carb.studies.nb201 import fewshot_help_nb201, fewshot_nb201

    if out is not None:
        if out.suffix not in (".parquet", ".csv"):
            raise _usage(f"--out {out}: expected a .parquet or .csv file")
        check_out_file(out, inputs={"--data": measured})
    try:
        if device is not None:
            r = fewshot_help_nb201(device, samples=samples, seed=seed, sources=source, method=method)
            pred = r.pop("predictions")
            summary = {k: v for k, v in r.items() if k != "measured_ids"}
        else:
            try:
                meas = pd.read_parquet(measured) if measured.suffix == ".parquet" else pd.read_csv(measured)
            except (OSError, ValueError) as e:
                raise _usage(f"--data {measured}: cannot read ({' '.join(str(e).split())[:160]})") from None
            meas = _at_median_speed(meas)
            pred, summary = fewshot_nb201(meas, sources=source, method=method)
    except ValueError as e:
        raise _usage(f"--data {measured}: {e}" if measured is not None else str(e)) from None
    if _write_and_print_json(pred, summary, out, json_out):
        return
    c = Console()
    c.print(
        f"nb201: map ({summary['method']}) from K = {summary['k']} measurements, "
        f"sources {', '.join(summary['sources'])}"
    )
    if device is not None:
        c.print(
            f"{summary['device']}: Spearman {summary['spearman']:.3f}, MAPE {100 * summary['mape']:.1f}% on "
            f"{summary['test_archs']} test cells (HELP's protocol: 10 reference + {samples} random, trimmed)"
        )
    if out is not None:
        c.print(f"wrote {out} ({len(pred)} cells)")


def _write_and_print_json(pred, summary: dict, out: Optional[Path], json_out: bool) -> bool:
    """Write the predictions to ``out`` (when given) and, with ``--json``, print the summary.

    Returns:
        True when the JSON was printed (the caller prints nothing more).
    """
    if out is not None:
        with atomic_file(out) as tmp:
            pred.to_parquet(tmp, index=False) if out.suffix == ".parquet" else pred.to_csv(tmp, index=False)
        summary["out"] = str(out)
    if json_out:
        print(json.dumps(summary, indent=2))
    return json_out


def _at_median_speed(meas: pd.DataFrame) -> pd.DataFrame:
    """Return a user's measurements with ``latency_ms`` at their campaign's median speed, as ``carb train`` learns it.

    Only the rows the paired speed sentinel timed (``carb characterize`` output) change; anything else is unchanged.
    """
    from carb.campaign import speed as drift

    return drift.corrected(meas, paired_only=True)
