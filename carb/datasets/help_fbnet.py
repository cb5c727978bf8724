"""HELP's public FBNet-space latency data: 5,000 CNNs measured on 27 device settings.

The data (``carb/data/help_fbnet/``, MIT License, see the LICENSE beside it) comes from
HELP (Lee et al., NeurIPS 2021, repository HayeonLee/HELP, ``data/fbnet``), converted to
Parquet with values unchanged. It is the public benchmark for few-shot latency transfer
to an unseen device: :mod:`carb.transfer` is measured on it by
``benchmarks/bench_help_fewshot.py``.

Every architecture is the FBNet macro-architecture (CIFAR-100 variant: 32x32 input,
100 classes) with one operation chosen for each of its 22 searchable layers. Besides the
operations, :func:`load` gives numeric config columns derived from them and from the
fixed macro-architecture (channels, strides, resolutions as in HW-NAS-Bench's FBNet
space): per-operation counts, per-layer kernel/expansion/group codes and analytic totals
(multiply-accumulates, parameters, activations, convolutions), and the exact static
features of the networks as :mod:`carb.families.fbnet` builds them (:data:`FEATURE_COLUMNS`:
FLOPs, parameters, activation bytes, operator counts; see :func:`features`).

The two agree where they overlap: ``2 * macs_m * 1e6 == flops`` for every architecture
(FlopCounterMode counts 2 FLOPs per multiply-accumulate of the convolutions and the
classifier, nothing else), and ``convs == n_conv + n_linear``. ``params_m`` counts
convolution and classifier weights only; ``params`` adds each BN's weight and bias and the
classifier's bias (12,468 to 38,772 more, 1.0 % to 1.7 % of ``params``).
"""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from carb.families.fbnet import (  # the macro-architecture is the fbnet family's, re-exported here
    CLASSES,
    HEAD_CHANNELS,
    INPUT_SIZE,
    LAYER_COLUMNS,
    N_LAYERS,
    OP_SPECS,
    OPS,
    STAGE_CHANNELS,
    STAGE_LAYERS,
    STAGE_STRIDES,
    STEM_CHANNELS,
    layer_plan,
    op_codes,
)

__all__ = [
    "OPS",
    "LAYER_COLUMNS",
    "N_LAYERS",
    "SOURCE_DEVICES",
    "VALIDATION_DEVICES",
    "TARGET_DEVICES",
    "HELP_RESULTS",
    "TRAIN_ARCH_IDS",
    "TEST_ARCH_IDS",
    "load",
    "devices",
    "reference_arch_ids",
    "layer_onehot",
    "block_counts",
    "config_columns",
    "op_codes",
    "layer_plan",
    "features",
    "OP_SPECS",
    "STEM_CHANNELS",
    "STAGE_LAYERS",
    "STAGE_CHANNELS",
    "STAGE_STRIDES",
    "HEAD_CHANNELS",
    "INPUT_SIZE",
    "CLASSES",
    "FEATURE_COLUMNS",
]

# --- the published protocol (HELP, Table 2, FBNet space) ---------------------------

#: Devices HELP meta-trains on.
SOURCE_DEVICES: tuple[str, ...] = (
    "1080ti_1",
    "1080ti_32",
    "1080ti_64",
    "silver_4114",
    "silver_4210r",
    "samsung_a50",
    "pixel3",
    "essential_ph_1",
    "samsung_s7",
)
#: Devices HELP uses for validation (never targets, never sources in the faithful protocol).
VALIDATION_DEVICES: tuple[str, ...] = ("titanx_1", "titanx_32", "titanx_64", "gold_6240")
#: Unseen target devices of Table 2.
TARGET_DEVICES: tuple[str, ...] = ("fpga", "raspi4", "eyeriss")
#: HELP's published Spearman rank correlation per target (10 reference + 10 random archs).
HELP_RESULTS: dict[str, float] = {"raspi4": 0.887, "eyeriss": 0.943, "fpga": 0.892}
#: Architectures a predictor may learn from (sources) or sample measurements from (target).
TRAIN_ARCH_IDS = range(0, 4000)
#: Architectures the predictor is tested on.
TEST_ARCH_IDS = range(4000, 5000)

_FILES = ("archs.parquet", "latency.parquet", "reference_archs.parquet")


# --- layer geometry and analytic costs ----------------------------------------------


@functools.cache
def _layer_geometry() -> tuple[tuple[int, int, int, int, int, bool], ...]:
    """(stage, input h=w, in channels, out channels, stride, first of its stage) per layer.

    At the published 32x32 input.
    """
    out = []
    hw = INPUT_SIZE
    for stage, cin, cout, s, first in layer_plan():
        out.append((stage, hw, cin, cout, s, first))
        hw //= s
    return tuple(out)


def _op_costs(hw: int, cin: int, cout: int, stride: int, op: str) -> tuple[float, float, float, float, float]:
    """(pointwise MACs, depthwise MACs, parameters, activation elements, convolutions) of one layer.

    A block is 1x1 expand (grouped) -> kxk depthwise (strided) -> 1x1 project (grouped); a skip is free when shapes
    match, otherwise a strided 1x1 conv.
    """
    hout = hw // stride
    k, e, g = OP_SPECS[op]
    if op == "skip":
        if cin == cout and stride == 1:
            return 0.0, 0.0, 0.0, 0.0, 0.0
        pw = hout * hout * cin * cout
        return float(pw), 0.0, float(cin * cout), float(hw * hw * cin + hout * hout * cout), 1.0
    mid = cin * e
    pw = hw * hw * cin * mid / g + hout * hout * mid * cout / g
    dw = hout * hout * mid * k * k
    params = cin * mid / g + mid * k * k + mid * cout / g
    acts = hw * hw * cin + hw * hw * mid + hout * hout * mid + hout * hout * cout
    return float(pw), float(dw), float(params), float(acts), 3.0


@functools.cache
def _cost_table() -> np.ndarray:
    """Analytic costs, shape (layers, ops, 5): see :func:`_op_costs`."""
    table = np.zeros((N_LAYERS, len(OPS), 5))
    for layer, (_, hw, cin, cout, stride, _) in enumerate(_layer_geometry()):
        for j, op in enumerate(OPS):
            table[layer, j] = _op_costs(hw, cin, cout, stride, op)
    return table


def _fixed_costs() -> tuple[float, float, float, float, float]:
    """Stem, head conv, pooling and classifier: the same in every architecture."""
    hw_end = INPUT_SIZE // int(np.prod(STAGE_STRIDES))
    stem = INPUT_SIZE * INPUT_SIZE * 3 * STEM_CHANNELS * 9
    head = hw_end * hw_end * STAGE_CHANNELS[-1] * HEAD_CHANNELS
    fc = HEAD_CHANNELS * CLASSES
    params = 3 * STEM_CHANNELS * 9 + STAGE_CHANNELS[-1] * HEAD_CHANNELS + fc
    acts = (
        INPUT_SIZE**2 * (3 + STEM_CHANNELS) + hw_end**2 * (STAGE_CHANNELS[-1] + HEAD_CHANNELS) + HEAD_CHANNELS + CLASSES
    )
    return float(stem + head + fc), 0.0, float(params), float(acts), 3.0


def layer_onehot(archs: pd.DataFrame) -> np.ndarray:
    """One-hot layer operations, shape (n, 22 * 9), float: column ``9 * layer + op``.

    ``archs`` needs the columns ``layer_00`` .. ``layer_21`` (operation names of OPS).
    """
    codes = op_codes(archs)
    out = np.zeros((len(codes), N_LAYERS * len(OPS)))
    rows = np.arange(len(codes))[:, None]
    out[rows, np.arange(N_LAYERS) * len(OPS) + codes] = 1.0
    return out


@functools.cache
def _block_slots() -> tuple[np.ndarray, list[str]]:
    """Map layer -> slot, with one slot for the layers of identical shapes.

    Layers with identical shapes (all but the first of a stage) share a slot, because the same op at the same shape
    costs the same on a given device.
    """
    slot_of, names, seen = [], [], {}
    for stage, hw, cin, cout, stride, first in _layer_geometry():
        key = (stage, first)
        if key not in seen:
            seen[key] = len(names)
            names.append(f"s{stage}_{'first' if first else 'rest'}")
        slot_of.append(seen[key])
    return np.array(slot_of), names


def block_counts(archs: pd.DataFrame) -> pd.DataFrame:
    """How many layers of each (slot, op) an architecture has, one column per pair.

    Columns are named ``n_<slot>_<op>`` (slot: ``s<stage>_first`` or ``s<stage>_rest``).

    A latency that is a sum of per-layer costs (a lookup-table model) is exactly linear in these counts, with fewer
    columns than :func:`layer_onehot` (12 slots x 9 ops).
    """
    slot_of, names = _block_slots()
    onehot = layer_onehot(archs).reshape(len(archs), N_LAYERS, len(OPS))
    counts = np.zeros((len(archs), len(names), len(OPS)))
    np.add.at(counts, (slice(None), slot_of), onehot)
    cols = [f"n_{s}_{op}" for s in names for op in OPS]
    return pd.DataFrame(counts.reshape(len(archs), -1).astype(np.int8), columns=cols, index=archs.index)


def config_columns(archs: pd.DataFrame) -> pd.DataFrame:
    """Numeric config columns of architectures (``layer_00`` .. ``layer_21`` needed).

    - ``n_<op>``: layers using each op (9 columns, sum 22);
    - ``layer_XX_kernel`` / ``layer_XX_expansion`` / ``layer_XX_groups``: 0 for skip;
    - ``macs_m`` (millions of multiply-accumulates, whole network at batch 1),
      ``pw_macs_m`` and ``dw_macs_m`` (of it, 1x1 and depthwise convs of the searchable
      layers), ``params_m`` (millions), ``activations_m`` (millions of tensor elements
      written and read per layer, summed), ``convs`` (convolutions executed).
    """
    codes = op_codes(archs)
    out: dict[str, np.ndarray] = {}
    for j, op in enumerate(OPS):
        out[f"n_{op}"] = (codes == j).sum(axis=1).astype(np.int8)
    keg = np.array([OP_SPECS[op] for op in OPS], dtype=np.int8)
    for layer, c in enumerate(LAYER_COLUMNS):
        for k, name in enumerate(("kernel", "expansion", "groups")):
            out[f"{c}_{name}"] = keg[codes[:, layer], k]
    table = _cost_table()
    per = table[np.arange(N_LAYERS)[None, :], codes.astype(np.intp)].sum(axis=1)  # (n, 5)
    fixed = np.array(_fixed_costs())
    out["macs_m"] = (per[:, 0] + per[:, 1] + fixed[0]) / 1e6
    out["pw_macs_m"] = per[:, 0] / 1e6
    out["dw_macs_m"] = per[:, 1] / 1e6
    out["params_m"] = (per[:, 2] + fixed[2]) / 1e6
    out["activations_m"] = (per[:, 3] + fixed[3]) / 1e6
    out["convs"] = (per[:, 4] + fixed[4]).astype(np.int16)
    return pd.DataFrame(out, index=archs.index)


#: The :mod:`carb.families.fbnet` feature columns :func:`load` adds per architecture, at batch 1
#: and fp32 (HELP's devices ran single images; bytes assume 4-byte elements): those that
#: vary across the space and are not already config columns (the per-op counts are).
FEATURE_COLUMNS: tuple[str, ...] = (
    "flops",
    "params",
    "model_bytes",
    "activation_bytes",
    "peak_activation_bytes",
    "live_activation_bytes",
    "largest_activation_bytes",
    "n_conv",
    "n_bn",
    "n_ops",
    "n_blocks",
    "n_projections",
    "n_residual",
    "arithmetic_intensity",
    "conv1x1_flop_fraction",
    "depthwise_flop_fraction",
)


def features(archs: pd.DataFrame, *, batch: int = 1, precision: str = "fp32") -> pd.DataFrame:
    """:func:`carb.families.fbnet.features` of architectures at HELP's 32x32 input and 100 classes.

    The architectures need ``layer_00`` .. ``layer_21``. Returns every column of
    :data:`carb.families.fbnet.FEATURE_COLUMNS`, index kept. Units as there (FLOP, B, counts).

    Raises:
        ValueError: a missing layer column or an unknown operation (one line).
    """
    from carb.families import fbnet

    table = archs[list(LAYER_COLUMNS)].assign(batch=batch, precision=precision)
    return fbnet.features(table)[fbnet.FEATURE_COLUMNS]


# --- files -------------------------------------------------------------------------


def _default_dir() -> Path:
    # importlib.resources finds the files in an installed wheel as well as in a source tree.
    return Path(str(resources.files("carb") / "data" / "help_fbnet"))


def _read(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ValueError(f"{path}: file missing")
    try:
        return pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a damaged file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"{path}: not a readable Parquet file ({first})") from None


def _check_columns(path: Path, df: pd.DataFrame, expected: list[str]) -> None:
    if list(df.columns) != expected:
        missing = [c for c in expected if c not in df.columns]
        extra = [c for c in df.columns if c not in expected]
        what = (f"missing columns {missing}" if missing else "") + (
            (", " if missing and extra else "") + (f"unexpected columns {extra}" if extra else "")
        )
        raise ValueError(f"{path}: {what or 'columns out of order'}; expected {expected}")


def _check_ids(path: Path, ids: pd.Series) -> None:
    if not pd.api.types.is_integer_dtype(ids):
        raise ValueError(f"{path}: arch_id must be integers, got {ids.dtype}")
    if (ids < 0).any():
        raise ValueError(f"{path}: negative arch_id {int(ids[ids < 0].iloc[0])}")


@functools.cache
def _validated_archs(path: Path) -> pd.DataFrame:
    """The architectures table, checked, sorted by ``arch_id``, operations categorical."""
    archs = _read(path)
    _check_columns(path, archs, ["arch_id", *LAYER_COLUMNS])
    _check_ids(path, archs["arch_id"])
    dup = archs["arch_id"].duplicated()
    if dup.any():
        raise ValueError(f"{path}: duplicate arch_id {int(archs.loc[dup, 'arch_id'].iloc[0])}")
    if archs[list(LAYER_COLUMNS)].isna().any().any():
        raise ValueError(f"{path}: missing operations")
    try:
        op_codes(archs)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    archs = archs.sort_values("arch_id", ignore_index=True)
    # Categoricals: 135,000 rows x 22 op names cost little this way, and keep OPS' order.
    for c in LAYER_COLUMNS:
        archs[c] = pd.Categorical(archs[c], categories=OPS)
    return archs


def _validated_latency(path: Path, archs: pd.DataFrame, arch_file: str) -> pd.DataFrame:
    """The latency table, checked: one positive finite ``latency_ms`` per architecture and device."""
    lat = _read(path)
    _check_columns(path, lat, ["arch_id", "device", "latency_ms"])
    _check_ids(path, lat["arch_id"])
    if not pd.api.types.is_numeric_dtype(lat["latency_ms"]):
        raise ValueError(f"{path}: latency_ms must be numeric, got {lat['latency_ms'].dtype}")
    ms = lat["latency_ms"].to_numpy(dtype=float)
    bad = ~np.isfinite(ms) | (ms <= 0)
    if bad.any():
        raise ValueError(f"{path}: latency_ms must be finite and positive ({int(bad.sum())} rows are not)")
    if lat["device"].isna().any():
        raise ValueError(f"{path}: missing device names")
    if lat.duplicated(["arch_id", "device"]).any():
        row = lat[lat.duplicated(["arch_id", "device"])].iloc[0]
        raise ValueError(f"{path}: duplicate row for arch_id {int(row['arch_id'])} on {row['device']}")
    unknown = ~lat["arch_id"].isin(archs["arch_id"])
    if unknown.any():
        raise ValueError(f"{path}: arch_id {int(lat.loc[unknown, 'arch_id'].iloc[0])} is not in {arch_file}")
    per_device = lat.groupby("device").size()
    short = per_device[per_device != len(archs)]
    if len(short):
        raise ValueError(
            f"{path}: device {short.index[0]} has {int(short.iloc[0])} rows, expected one per "
            f"architecture ({len(archs)})"
        )
    return lat.assign(device=lat["device"].astype(str))


def _validated_reference(path: Path, archs: pd.DataFrame, arch_file: str) -> np.ndarray:
    """The reference architectures' ids, checked: distinct, non-empty, all in the architectures table."""
    ref = _read(path)
    _check_columns(path, ref, ["arch_id"])
    _check_ids(path, ref["arch_id"])
    ref_ids = ref["arch_id"].to_numpy()
    distinct = len(set(ref_ids.tolist()))
    if distinct != len(ref_ids) or len(ref_ids) == 0:
        raise ValueError(f"{path}: expected distinct arch_ids, got {len(ref_ids)} rows with {distinct} distinct")
    outside = ~np.isin(ref_ids, archs["arch_id"])
    if outside.any():
        raise ValueError(f"{path}: arch_id {int(ref_ids[outside][0])} is not in {arch_file}")
    return ref_ids


def _load_validated(directory: str) -> tuple[pd.DataFrame, pd.DataFrame, np.ndarray]:
    arch_path, lat_path, ref_path = (Path(directory) / f for f in _FILES)
    archs = _validated_archs(arch_path)
    lat = _validated_latency(lat_path, archs, arch_path.name)
    ref_ids = _validated_reference(ref_path, archs, arch_path.name)
    return archs, lat, ref_ids


def _data_dir(data_dir: str | Path | None) -> str:
    return str(Path(data_dir).resolve() if data_dir is not None else _default_dir())


def load(wide: bool = False, *, data_dir: str | Path | None = None) -> pd.DataFrame:
    """The data set, validated.

    Long form (default): one row per architecture and device (5,000 x 27 rows), sorted by
    device then ``arch_id``: ``arch_id``, ``device``, ``latency_ms`` (units: ms, as
    published), ``layer_00`` .. ``layer_21`` (categorical, categories :data:`OPS`), then the
    numeric columns of :func:`config_columns`, then the static features
    :data:`FEATURE_COLUMNS` (batch 1, fp32; see :func:`features`).

    Wide form: one row per architecture: ``arch_id``, layers, config columns, feature
    columns, then ``latency_ms_<device>`` for each device (units: ms).

    ``data_dir`` overrides the packaged files (``carb/data/help_fbnet``). A missing,
    unreadable or inconsistent file raises a one-line :class:`ValueError` naming it.
    """
    archs, lat, _ = _load_validated(_data_dir(data_dir))
    base = pd.concat([archs, config_columns(archs), features(archs)[list(FEATURE_COLUMNS)]], axis=1)
    if wide:
        table = lat.pivot(index="arch_id", columns="device", values="latency_ms")
        table.columns = [f"latency_ms_{d}" for d in table.columns]
        return base.merge(table, left_on="arch_id", right_index=True, how="left")
    long = lat.sort_values(["device", "arch_id"], ignore_index=True)
    return long.merge(base, on="arch_id", how="left", validate="many_to_one")


def devices(*, data_dir: str | Path | None = None) -> list[str]:
    """Device settings in the data, sorted (27 in the published files)."""
    _, lat, _ = _load_validated(_data_dir(data_dir))
    return sorted(lat["device"].unique().tolist())


def reference_arch_ids(*, data_dir: str | Path | None = None) -> list[int]:
    """The 10 reference architectures whose latencies HELP uses as a device's hardware embedding.

    In the file's order.
    """
    _, _, ref = _load_validated(_data_dir(data_dir))
    return [int(i) for i in ref]
