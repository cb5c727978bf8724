"""Write the checksums of network models (``netmodel.json``'s ``files`` and ``netmodel_sha256``).

Run it after editing a shipped model's ``netmodel.json`` by hand or by a script (its ``meta``: the
machine fingerprint, the measured domain steps): loading refuses a model whose document does not
match its checksum. With no argument it seals every shipped model, ``carb/data/*.netmodel``.

    python scripts/seal_netmodels.py                      # the shipped models
    python scripts/seal_netmodels.py models/my-cpu.netmodel

Seal only files you trust: from then on loading checks them against these checksums.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from carb.netmodel import load
from carb.netmodel.io import ModelError, seal

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    """Seal the given model directories (default: the shipped ones) and load each back."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", type=Path, help="model directories (default: carb/data/*.netmodel)")
    args = ap.parse_args(argv)
    dirs = args.models or sorted((ROOT / "carb" / "data").glob("*.netmodel"))
    for d in dirs:
        try:
            seal(d)
            load(d)  # what was sealed loads
        except ModelError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"sealed {d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
