"""Datasets: measured rows as one flat table, one row per config and device, ready for modelling.

Also the datasets shipped with CARB, loadable by name, and checks of a dataset file.

Columns of a CARB dataset: ``config_id``, ``device`` (the platform label, e.g.
``cpu-1t``), the config parameters, ``status``, ``message``, the target medians
``latency_ms`` (ms), ``energy_j`` (J, net of idle), ``energy_gross_j`` (J), ``memory_mb``
(MB) with their spread columns (``<target>_mean``, ``_p5``, ``_p95``, ``_cov``, ``_n``,
``_ci_rel``, and ``_min``, the fastest sample, where the store recorded it; some shipped
datasets lack ``_min``), ``energy_missing_reason``, ``timed_s``, ``wall_s``, ``run_id``,
``measured_at``, ``extra`` (JSON telemetry), and the static features of
:func:`carb.families.features.compute` (recomputed on :func:`load`, so shipped files stay small).
A network row (``family = net``) carries the features captured when it was measured
(:data:`carb.families.nets.CAPTURED_COLUMNS`): they are data, kept by :func:`slim` and read,
never recomputed, so no dataset, file or store runs the code a row names.

Shipped datasets (``carb/data/<name>.parquet`` with a card ``<name>.md`` beside it) are
real measurements made with CARB's own pipeline; ``help-fbnet`` is public data of HELP
(Lee et al. 2021, MIT License), see :mod:`carb.datasets.help_fbnet`.
"""

from __future__ import annotations

import json
import uuid
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from carb._safeio import DocumentError, loads_json
from carb.campaign.store import Store
from carb.families.space import PARAMETERS, SpaceError, configs_from_frame
from carb.measure.base import STATUSES

from ._errors import DatasetError
from ._fingerprints import fingerprint, memory_definition

__all__ = [
    "from_store",
    "write",
    "slim",
    "list",
    "load",
    "read",
    "check",
    "DatasetError",
    "DatasetInfo",
    "fingerprint",
    "memory_definition",
    "REQUIRED_COLUMNS",
    "TARGET_COLUMNS",
    "TARGET_LIMITS",
    "impossible_targets",
    "drop_impossible",
]

_list = list  # `list` is also this module's public function

#: targets a CARB dataset carries (NaN where a device has no sensor)
TARGET_COLUMNS = ("latency_ms", "energy_j", "memory_mb")
#: columns every CARB dataset file must have
REQUIRED_COLUMNS = ("config_id", "device", *PARAMETERS, "status", *TARGET_COLUMNS)
_NUMERIC = ("depth", "width", "input_size", "batch", "classes", *TARGET_COLUMNS)
#: The largest value of each target a measurement of one forward pass can take. Beyond it the value is impossible,
#: as is one that is not finite or <= 0 (a forward pass takes time, memory and energy): a day (86,400,000 ms; the
#: slowest forward of CARB's datasets takes seconds), 1 PB (10^9 MB; a machine's memory is terabytes at most) and
#: 1 MJ (a 1 kW machine busy for 1,000 s).
TARGET_LIMITS = {"latency_ms": 86_400_000.0, "energy_j": 1e6, "memory_mb": 1e9}


@dataclass(frozen=True)
class DatasetInfo:
    """A shipped dataset: its name, file, one-line description and row count."""

    name: str
    path: str
    description: str
    rows: int | None


def from_store(store: Store, platform: str | None = None, with_features: bool = True) -> pd.DataFrame:
    """The store's measurements (of one platform if given) as a dataset DataFrame.

    Network rows keep the features stored when they were measured (with or without ``with_features``); nothing is
    imported, so a store exports from any directory, failed rows included.
    """
    df = store.measurements(platform).rename(columns={"platform": "device"})
    if with_features and len(df):
        df = _features_where_valid(df)
    return df.reset_index(drop=True)


def _features_where_valid(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with the static features, left empty on rows that are no valid config.

    A stored row that is no valid config (a failed row with ``width=inf``, say) keeps empty features instead of
    breaking the export of the whole store.
    """
    from carb import families
    from carb.families.features import compute

    try:
        return compute(df)
    except (ValueError, OverflowError):
        pass
    ok = np.zeros(len(df), dtype=bool)
    for i, row in enumerate(df.to_dict("records")):
        try:
            families.config_from_row(row)
            ok[i] = True
        except (ValueError, OverflowError):
            pass
    if not ok.any():
        return df
    good = compute(df[ok])
    return pd.concat([good, df[~ok]]).loc[df.index]


def write(df: pd.DataFrame, out: str | Path) -> Path:
    """Write a dataset to ``.parquet`` or ``.csv`` (by the file's suffix); returns the path."""
    out = Path(out)
    if out.suffix not in (".parquet", ".csv"):
        raise ValueError(f"{out}: unknown output type {out.suffix or '(none)'!r} (expected .parquet or .csv)")
    if out.is_dir():
        raise DatasetError(f"{out}: is a directory (give a file path)")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a parent is a file, or not writable
        raise DatasetError(f"{out}: cannot create its folder ({e.strerror or e})") from None
    # write then rename, so that an interrupted export never leaves a half file behind; the temporary file has a
    # short name of its own (NAME.tmp would pass the 255 bytes a file name may have where NAME is near them)
    tmp = out.parent / f".carb-{uuid.uuid4().hex[:12]}.tmp"
    try:
        if out.suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
        tmp.replace(out)
    except OSError as e:
        raise DatasetError(f"{out}: cannot write ({e.strerror or e})") from None
    finally:
        tmp.unlink(missing_ok=True)  # whatever happened, no .tmp is left behind
    return out


def slim(df: pd.DataFrame) -> pd.DataFrame:
    """A dataset in the form in which datasets are shipped.

    That is, without what :func:`load` recomputes (static features; a network row's stored features are kept) and
    without the raw latency samples inside ``extra``.
    """
    from carb.families.features import FEATURE_COLUMNS
    from carb.families.nets import CAPTURED_COLUMNS

    stored = "family" in df.columns and bool((df["family"] == "net").any())
    out = df.drop(columns=[c for c in FEATURE_COLUMNS if c in df.columns and not (stored and c in CAPTURED_COLUMNS)])

    def strip(x: Any) -> Any:
        if not isinstance(x, str):
            return x
        try:
            d = loads_json(x, "an extra cell")
        except DocumentError as e:
            raise DatasetError(str(e)) from None
        if not isinstance(d, dict):
            return x
        d.pop("latency_samples_ms", None)
        return json.dumps(d, separators=(",", ":"))

    if "extra" in out.columns:
        out["extra"] = out["extra"].map(strip)
    return out


# -- shipped datasets ---------------------------------------------------------------------


def _data_dir() -> Path:
    return Path(str(resources.files("carb").joinpath("data")))


def list() -> list[DatasetInfo]:  # noqa: A001 - the public API is carb.datasets.list()
    """The datasets shipped with CARB."""
    out: _list[DatasetInfo] = []
    d = _data_dir()
    for p in sorted(d.glob("*.parquet")):
        card = p.with_suffix(".md")
        desc = ""
        if card.exists():
            lines = [ln.strip() for ln in card.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
            desc = lines[0] if lines else ""
        try:
            import pyarrow.parquet as pq

            rows = pq.ParquetFile(p).metadata.num_rows
        except Exception:  # a broken file is listed; load() says what is wrong with it
            rows = None
        out.append(DatasetInfo(p.stem, str(p), desc, rows))
    if (d / "help_fbnet").is_dir():
        out.append(
            DatasetInfo(
                "help-fbnet",
                str(d / "help_fbnet"),
                "public: HELP's latency of 5,000 FBNet-space CNNs on 27 device settings (MIT)",
                135_000,
            )
        )
    if (d / "nb201").is_dir():
        out.append(
            DatasetInfo(
                "nb201",
                str(d / "nb201"),
                "public: all 15,625 NAS-Bench-201 CNNs on 29 device settings, measured Jetson TX2 "
                "energy (HW-NAS-Bench, HELP; MIT)",
                640_625,
            )
        )
    return out


def platforms(name: str) -> _list[str] | None:
    """The platforms of a shipped dataset that loads one platform alone (``nb201``), without loading its rows.

    ``None`` for any other name or path: load it and read its ``platform`` or ``device`` column.
    """
    if name == "nb201":
        from . import nb201

        return nb201.platforms()
    return None


def load(name: str, features: bool = True, *, device: str | None = None, keep_impossible: bool = False) -> pd.DataFrame:
    """Load a shipped dataset by name (see :func:`list`) or a dataset file by path.

    The file is checked (required columns, types, statuses, config ids that match their
    parameters) and the static features are recomputed when ``features`` (a network row's are
    read from the file, as stored when it was measured: no code is imported). ``device``: only
    that device's (platform's) rows, where the dataset can load them alone (``nb201``);
    other datasets ignore it (filter the result). Impossible target values
    (:func:`impossible_targets`) are made missing, with a warning that counts them, so that nothing learns from
    them, unless ``keep_impossible`` (for :func:`check`, which reports them).

    Raises:
        DatasetError: unknown name, unreadable file or a schema problem (one line).
    """
    if name == "help-fbnet":
        from . import help_fbnet

        return help_fbnet.load()
    if name == "nb201":
        from . import nb201

        return nb201.load(device, features=features)
    path = _data_dir() / f"{name}.parquet"
    if not path.exists():
        p = Path(name)
        if p.suffix in (".parquet", ".csv") and p.exists():
            path = p
        else:
            names = ", ".join(d.name for d in list())
            raise DatasetError(f"{name}: no such dataset (shipped: {names}; or a .parquet/.csv file path)")
    df = read(path)
    if not keep_impossible:
        df, dropped = drop_impossible(df)
        if dropped:
            warnings.warn(
                f"{name}: {sum(dropped.values()):,} impossible target value(s) left out "
                f"({', '.join(f'{t} {n:,}' for t, n in dropped.items())}): {_IMPOSSIBLE}",
                UserWarning,
                stacklevel=2,
            )
    if features:
        from carb.families.features import compute

        df = compute(df)
    return df


def read(path: str | Path) -> pd.DataFrame:
    """Read and validate a dataset file (Parquet or CSV); raises :class:`DatasetError`."""
    path = Path(path)
    try:
        df = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_csv(path)
    except FileNotFoundError:
        raise DatasetError(f"{path}: no such file") from None
    except Exception as e:  # pyarrow/pandas raise many kinds for a corrupt file
        raise DatasetError(
            f"{path}: not a readable {path.suffix.lstrip('.') or 'dataset'} file ({' '.join(str(e).split())[:200]})"
        ) from None
    required = _required_columns(df, path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise DatasetError(f"{path}: missing column {missing[0]!r} (a CARB dataset has {', '.join(required)})")
    for c in _NUMERIC:
        if c in df.columns and not pd.api.types.is_numeric_dtype(df[c]) and not df[c].isna().all():
            raise DatasetError(f"{path}: column {c!r} is not numeric (dtype {df[c].dtype})")
    bad = ~df["status"].isin(STATUSES)
    if bad.any():
        raise DatasetError(f"{path}: row {int(np.flatnonzero(bad)[0])}: unknown status {df['status'][bad].iloc[0]!r}")
    try:
        ids = _config_ids(df, required)
    except SpaceError as e:
        raise DatasetError(f"{path}: {e}") from None
    wrong = ids != df["config_id"].to_numpy()
    if wrong.any():
        i = int(np.flatnonzero(wrong)[0])
        raise DatasetError(
            f"{path}: row {i}: config_id {df['config_id'].iloc[i]!r} does not match its "
            f"parameters (expected {str(ids[i])!r})"
        )
    return df


def _required_columns(df: pd.DataFrame, path: Path) -> _list[str]:
    """The columns a dataset file must have, given the families of its rows.

    :data:`REQUIRED_COLUMNS` where every row is a ResNet (or no ``family`` column says otherwise); with rows of
    other families (``nb201``, ``fbnet``: :mod:`carb.families`), the common columns and each family's own
    parameters (the ResNet parameters only if ResNet rows are there too).
    """
    from carb import families
    from carb.families.resnet import FAMILIES

    if "family" not in df.columns:
        return _list(REQUIRED_COLUMNS)
    present = set(map(str, pd.unique(df["family"].dropna())))
    others = sorted(present - set(FAMILIES))
    if not others:
        return _list(REQUIRED_COLUMNS)
    need = ["config_id", "device", "family"]
    if present & set(FAMILIES) or df["family"].isna().any():
        need += _list(PARAMETERS)
    for name in others:
        try:
            fam = families.get(name)
            need += [p for p in fam.parameters if p not in fam.optional_parameters]
        except SpaceError as e:
            raise DatasetError(f"{path}: {e}") from None
    need += ["status", *TARGET_COLUMNS]
    return _list(dict.fromkeys(need))


def _optional_parameters(df: pd.DataFrame) -> _list[str]:
    """The optional parameters of the families of ``df``'s rows (a layer's ``dilation``, ``frames``, ...)."""
    from carb import families

    if "family" not in df.columns:
        return []
    out: _list[str] = []
    for name in sorted(set(map(str, pd.unique(df["family"].dropna())))):
        try:
            out += [p for p in families.get(name).optional_parameters if p not in out]
        except SpaceError:
            continue
    return out


def _config_ids(df: pd.DataFrame, required: _list[str]) -> np.ndarray:
    """The config id of each row, from its parameters.

    Each distinct parameter tuple is hashed once (a public dataset repeats one network on many platforms: nb201's
    640,625 rows hold about 78,000 distinct configs).

    Raises:
        SpaceError: a row is no valid config; the message names the row.
    """
    params = [c for c in required if c not in ("config_id", "device", "status", *TARGET_COLUMNS)]
    params += [c for c in _optional_parameters(df) if c in df.columns and c not in params]  # a set one changes the id
    # ResNet tables (the required columns say so) and small ones row by row
    if required == _list(REQUIRED_COLUMNS) or len(df) < 1000:
        return np.array([c.config_id for c in configs_from_frame(df)])
    key = df[params]
    uniq = key.drop_duplicates()
    try:
        ids = [c.config_id for c in configs_from_frame(uniq)]
    except SpaceError:
        configs_from_frame(df)  # the message names the row of the file, not of the distinct tuples
        raise
    table = uniq.assign(_config_id=ids)
    return key.merge(table, on=params, how="left")["_config_id"].to_numpy()


# -- checks -------------------------------------------------------------------------------

_IMPOSSIBLE = "not finite, <= 0, or above a day (latency), 1 MJ (energy) or 1 PB (memory) per forward"


def impossible_targets(df: pd.DataFrame) -> pd.DataFrame:
    """Which target values of ``df`` no forward pass can have, one boolean column per target ``df`` has.

    Impossible: a value (not NaN) that is not finite, <= 0 or above :data:`TARGET_LIMITS`.
    """
    out = {}
    for t, limit in TARGET_LIMITS.items():
        if t in df.columns:
            v = pd.to_numeric(df[t], errors="coerce").to_numpy(dtype=np.float64)
            out[t] = ~np.isnan(v) & ~((v > 0) & (v <= limit))
    return pd.DataFrame(out, index=df.index)


def drop_impossible(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """``df`` with its impossible target values (:func:`impossible_targets`) made missing, and how many per target.

    The rest of such a row stays: its other targets may be sound. ``df`` is returned unchanged when it has none.
    """
    bad = impossible_targets(df)
    counts = {t: int(bad[t].sum()) for t in bad.columns if bad[t].any()}
    if not counts:
        return df, {}
    df = df.copy()
    for t in counts:
        df[t] = df[t].astype(np.float64).mask(bad[t])
    return df, counts


def check(df: pd.DataFrame, max_cov: float = 0.25, max_ci_rel: float = 0.05) -> pd.DataFrame:
    """Problems of a dataset, one row each: ``problem``, ``config_id``, ``device``, ``detail``.

    Problems: ``duplicate`` (config and device twice), ``failed`` (status not ok),
    ``missing target`` (an ok row without latency or memory, or without energy where no
    ``energy_missing_reason`` explains it), ``impossible target`` (a value no forward pass can have:
    :func:`impossible_targets`), ``noisy`` (latency CoV over ``max_cov`` or
    relative 95% CI of the median over ``max_ci_rel``). An empty result means no problem.
    """
    rows: _list[tuple[str, str, str, str]] = []
    dup = df.duplicated(["config_id", "device"], keep="first")
    for r in df[dup].itertuples(index=False):
        rows.append(("duplicate", r.config_id, r.device, "config and device appear more than once"))
    failed = df["status"] != "ok"
    for r in df[failed].itertuples(index=False):
        msg = getattr(r, "message", "") or ""
        rows.append(("failed", r.config_id, r.device, f"{r.status}: {msg}"[:120]))
    ok = df[~failed]
    for t in TARGET_COLUMNS:
        miss = ok[t].isna()
        # a target missing for a stated reason (no energy sensor; a public dataset that does
        # not publish it) is not a problem: ``energy_missing_reason``, ``memory_missing_reason`` ...
        why = f"{t.split('_')[0]}_missing_reason"
        if why in ok.columns:
            miss &= ok[why].isna()
        for r in ok[miss].itertuples(index=False):
            rows.append(("missing target", r.config_id, r.device, f"{t} is missing"))
    impossible = impossible_targets(df)
    for t in impossible.columns:
        for r, v in zip(df[impossible[t]].itertuples(index=False), df.loc[impossible[t], t]):
            rows.append(("impossible target", r.config_id, r.device, f"{t} = {v!r}: {_IMPOSSIBLE}"))
    cov = ok["latency_ms_cov"] if "latency_ms_cov" in ok.columns else pd.Series(np.nan, index=ok.index)
    ci = ok["latency_ms_ci_rel"] if "latency_ms_ci_rel" in ok.columns else pd.Series(np.nan, index=ok.index)
    for r, c, h in zip(ok.itertuples(index=False), cov, ci):
        if c > max_cov:
            rows.append(("noisy", r.config_id, r.device, f"latency CoV {c:.3f} > {max_cov:g}"))
        elif h > max_ci_rel:
            rows.append(("noisy", r.config_id, r.device, f"latency 95% CI ±{100 * h:.1f}% > ±{100 * max_ci_rel:g}%"))
    return pd.DataFrame(rows, columns=["problem", "config_id", "device", "detail"])
