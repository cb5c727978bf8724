"""``carb fewshot``: latency of every architecture of a space on a device with only K of them measured.

It parses its flags, calls :func:`carb.studies.fewshot.fewshot` (every FBNet architecture of HELP's public data, or
every NAS-Bench-201 cell with ``--space nb201``) and prints the map and its score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer

from ._app import app, atomic_file, check_out_file, library_errors
from .report import _usage  # one UsageError maker for the sub-command modules


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
    from carb.studies.fewshot import fewshot as run_fewshot

    if (measured is None) == (device is None):
        raise _usage("give exactly one of --data or --platform")
    if space == "nb201":
        from carb.studies.nb201 import NB201_METHODS

        if ("ensemble" if method == "auto" else method) not in NB201_METHODS:
            raise _usage(f"--method: unknown value {method!r} for --space nb201 (expected {', '.join(NB201_METHODS)})")
    if out is not None and out.suffix not in (".parquet", ".csv"):
        raise _usage(f"--out {out}: expected a .parquet or .csv file")
    if out is not None:
        check_out_file(out, inputs={"--data": measured})
    with library_errors(run_fewshot, only_params=True):  # --data is measured, --platform the platform
        pred, summary = run_fewshot(space, measured, device, samples, seed, source, method)
    if out is not None:
        with atomic_file(out) as tmp:
            pred.to_parquet(tmp, index=False) if out.suffix == ".parquet" else pred.to_csv(tmp, index=False)
        summary["out"] = str(out)
    if json_out:
        print(json.dumps(summary, indent=2))
        return
    _print_fewshot(pred, summary, space, samples, out)


def _print_fewshot(pred: Any, summary: dict, space: str, samples: int, out: Optional[Path]) -> None:
    """The map and, for a held-out platform, its score on the test archs; the file written."""
    from rich.console import Console
    from rich.table import Table

    c = Console()
    if space == "nb201":
        c.print(
            f"nb201: map ({summary['method']}) from K = {summary['k']} measurements, "
            f"sources {', '.join(summary['sources'])}"
        )
    else:
        t = Table("feature", "weight", title=f"map ({summary['method']}) from K = {summary['k']} measurements")
        for name, w in summary["weights"].items():
            t.add_row(name, f"{w:.4g}")
        c.print(t)
    if "spearman" in summary:
        test = (
            f"{summary['test_archs']} test cells (HELP's protocol: 10 reference + {samples} random, trimmed)"
            if space == "nb201"
            else f"{summary['test_archs']} test archs (HELP's protocol: archs 4000..4999)"
        )
        c.print(f"{summary['device']}: Spearman {summary['spearman']:.3f}, MAPE {100 * summary['mape']:.1f}% on {test}")
    if out is not None:
        c.print(f"wrote {out} ({len(pred)} {'cells' if space == 'nb201' else 'archs'})")
