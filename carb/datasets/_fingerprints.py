"""Where a dataset was measured: the machine fingerprint of a shipped dataset or of a campaign store."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from carb._safeio import DocumentError, loads_json
from carb.measure.fingerprint import Fingerprint, from_provenance

#: The shipped datasets' fingerprints, as their cards record them.
FINGERPRINTS_FILE = "fingerprints.json"


def memory_definition(spec: str | Path) -> str | None:
    """What a dataset's ``memory_mb`` counts: the definition of the worker that measured it.

    Args:
        spec: a shipped dataset's name (its ``memory`` entry in :data:`FINGERPRINTS_FILE`) or a
            campaign store (``.duckdb``: its last run's provenance).

    Returns:
        The definition's text (:data:`carb.measure.cpu.MEMORY_DEFINITION` for data measured as CARB
        measures now), or ``None`` where the data do not say.
    """
    p = Path(spec)
    if p.suffix == ".duckdb" and p.is_file():
        prov = _last_provenance(p)
        got = prov.get("memory_definition") if prov is not None else None
        return str(got) if got else None
    doc = json.loads((resources.files("carb") / "data" / FINGERPRINTS_FILE).read_text())
    entry = doc.get(str(spec))
    mem = entry.get("memory") if isinstance(entry, dict) else None
    got = mem.get("definition") if isinstance(mem, dict) else None
    return str(got) if got else None


def _last_provenance(p: Path) -> dict | None:
    """The provenance of a campaign store's last run (``None``: none, or too large or deep to read)."""
    from carb.campaign.store import Store

    store = Store(p, read_only=True)
    try:
        runs = store.runs()
    finally:
        store.close()
    if not len(runs) or "provenance" not in runs.columns:
        return None
    prov = runs["provenance"].iloc[-1]
    try:
        prov = loads_json(prov, "a run's provenance") if isinstance(prov, str) else prov
    except DocumentError:  # too large or nested too deeply: nothing to read from it
        return None
    return prov if isinstance(prov, dict) else None


def fingerprint(spec: str | Path) -> Fingerprint | None:
    """The machine a dataset was measured on.

    Args:
        spec: a shipped dataset's name (:func:`carb.datasets.list`) or a campaign store
            (``.duckdb``: its last run's provenance).

    Returns:
        The fingerprint, or ``None`` where the data do not record one (a Parquet/CSV file,
        public data of many devices).

    """
    p = Path(spec)
    if p.suffix == ".duckdb" and p.is_file():
        prov = _last_provenance(p)
        return from_provenance(prov, source=f"the provenance of {p.name}") if prov is not None else None
    doc = json.loads((resources.files("carb") / "data" / FINGERPRINTS_FILE).read_text())
    entry = doc.get(str(spec))
    return Fingerprint.from_dict(entry) if isinstance(entry, dict) else None
