"""The ResNet families ``cifar`` and ``imagenet``: their config, network and closed-form static features.

The network is built on first use (:mod:`carb.families._resnet_nets`).

A :class:`Config` is one point of a ResNet deployment space: the network (family, block,
depth, width multiplier, stem) and how it is run (input size, batch, precision). It is a
plain, frozen, hashable record; :attr:`Config.config_id` is a stable hash of its canonical
form and is the key everywhere (store, datasets, predictions).

Features (:func:`features`)
---------------------------

:func:`compute` adds the columns below to a table of configs without building a single
torch module: each distinct network (family, block, depth, width, early_downsample,
input_size, classes) is walked once, in Python, through a layer table that mirrors
:mod:`carb.families.arch` operator by operator; batch and precision then scale those per-image
figures for every row with numpy. The tests check the results against the built modules
(``params``, ``model_bytes``, layer counts), against ``torch.utils.flop_counter`` (``flops``)
and against a tracker of the tensors a forward allocates and frees (the activation
columns, ``n_ops``), exactly.

All figures are for one forward pass of the whole batch unless the name says per image.
"Activation" means a tensor that the forward produces (not the input batch, not weights).

Columns (:data:`FEATURE_COLUMNS`, in this order):

``bytes_per_element``
    Bytes of one weight or activation element at the row's precision: 4 (fp32), 2 (fp16,
    bf16). Units: B.
``flops``
    Floating-point operations of the forward, counted as ``torch.utils.flop_counter``
    counts them: 2 x multiply-accumulates of convolutions and of the classifier's matrix
    product; BN, ReLU, additions, pooling and biases count zero. Units: FLOP.
``flops_per_image``
    ``flops / batch``. Units: FLOP.
``params``
    Trainable parameters (convolution weights, BN weight and bias, classifier weight and
    bias) = ``sum(p.numel() for p in build(cfg).parameters())``. Units: count.
``weight_bytes``
    ``params * bytes_per_element``. Units: B.
``model_bytes``
    Bytes of the module's whole state once cast to the precision: parameters plus BN
    running mean and variance (``bytes_per_element`` each) plus each BN's int64
    ``num_batches_tracked`` (8 B). Resident for the whole run. Units: B.
``input_bytes``
    The input batch, ``batch * 3 * input_size**2 * bytes_per_element``. Units: B.
``output_bytes``
    The logits, ``batch * classes * bytes_per_element``. Units: B.
``activation_bytes``
    Sum over every operator of the forward (convolution, BN, ReLU, residual addition,
    max/average pooling, linear) of the bytes of its output, in-place ones included:
    the activation bytes written by an unfused eager forward. Units: B.
``peak_activation_bytes``
    Largest, over the operators that allocate their output (convolution, BN, pooling,
    linear), of input bytes + output bytes; the stem's input is the input batch.
    Units: B.
``live_activation_bytes``
    Peak of the bytes of activations alive at the same time during an eager PyTorch
    forward under ``torch.inference_mode()``, given the way
    :mod:`carb.families.arch` writes its forwards: a block's input stays alive while its branch
    runs, a stage's input stays alive for the whole stage (the caller's variable holds
    it), ``out = f(out)`` frees the old tensor only after ``f`` returns, ReLU and the
    residual addition are in place. The input batch is not counted (add
    ``input_bytes``); nor are what kernels allocate inside themselves (cuDNN/oneDNN
    workspaces, the int64 indices CUDA's max-pool makes; under plain ``no_grad`` with
    parameters that require grad, the CPU max-pool makes them too), nor allocator
    rounding. A memory-peak estimate is ``model_bytes + input_bytes +
    live_activation_bytes``. Units: B.
``largest_activation_bytes``
    The largest single activation tensor. Units: B.
``n_conv``, ``n_bn``, ``n_linear``
    Convolution, BatchNorm and Linear modules (projection shortcuts included). Units: count.
``n_layers``
    Weighted layers, ``n_conv + n_linear`` (unlike ``depth``, this counts the projection
    shortcuts). Units: count.
``n_ops``
    Operator calls of the forward: convolutions, BNs, ReLUs, residual additions, poolings
    and the linear layer (the flatten view excluded): a proxy for kernel launches and
    per-operator framework overhead. Units: count.
``n_stages``, ``n_blocks``, ``n_projections``
    Residual stages (3 or 4), residual blocks, and projection (1x1 conv + BN) shortcuts.
    Units: count.
``min_channels``, ``max_channels``
    Fewest and most output channels of any convolution. Units: channels.
``final_channels``
    Channels entering the classifier (the pooled feature size). Units: channels.
``stem_output_size``
    Side of the feature map that enters the first stage (after the stem's stride and,
    for imagenet, the max-pool). Units: px.
``final_feature_size``
    Side of the last stage's feature map, before global pooling. Units: px.
``arithmetic_intensity``
    ``flops / (weight_bytes + activation_bytes)``. Units: FLOP/B.
``conv1x1_flop_fraction``
    Share of ``flops`` in 1x1 convolutions (bottleneck reductions, expansions and
    projections), which map to plain matrix products. Units: fraction in [0, 1].
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

import numpy as np
import pandas as pd

from ._base import (
    COUNT_COLUMNS,
    MAX_BATCH,
    PRECISIONS,
    SHAPE_COLUMNS,
    SIZE_COLUMNS,
    Family,
    PerNetColumns,
    SpaceError,
    _as_bool,
    _as_float,
    _as_int,
    _py,
    flop_fraction,
    init_weights,
    missing,
    per_row_features,
    precision_bytes,
    run_limits_problem,
    stable_id,
)

__all__ = [
    "Config",
    "FAMILIES",
    "BLOCKS",
    "IMAGENET_LAYERS",
    "DEFAULT_CLASSES",
    "PARAMETERS",
    "FEATURE_COLUMNS",
    "REQUIRED_COLUMNS",
    "ARCH_KEYS",
    "arch_features",
    "features",
    "build",
    "config_id",
    "CIFAR",
    "IMAGENET",
]

from ._resnet_tables import BLOCKS, DEFAULT_CLASSES, FAMILIES, IMAGENET_LAYERS
from ._resnet_tables import channels as channels  # re-exported with the tables
from ._resnet_walk import _ARCH_FIELDS, arch_features

#: Largest width multiplier (base channels 16..512 become 1,024..32,768).
MAX_WIDTH = 64.0
#: Largest depth (He et al.'s deepest CIFAR ResNet has 1,202 layers). With the shared
#: limits of :mod:`carb.families._base` every per-image feature stays inside int64.
MAX_DEPTH = 2000


@dataclass(frozen=True)
class Config:
    """One CNN inference configuration.

    Attributes:
        family: ``cifar`` (3-stage ResNet of He et al. 2016, 16/32/64 base channels) or
            ``imagenet`` (4-stage ResNet with 7x7/2 stem and max-pool, 64..512 channels).
        block: ``basic`` or ``bottleneck`` (for imagenet, fixed by the depth).
        depth: number of weighted layers; cifar: 6n+2 (basic) or 9n+2 (bottleneck);
            imagenet: 18, 34, 50, 101 or 152.
        width: channel multiplier applied to the base channels (> 0).
        early_downsample: cifar only: a stride-2 stem, halving every feature map.
        input_size: input height = width, pixels.
        batch: images per forward pass.
        precision: ``fp32``, ``fp16`` or ``bf16`` (weights and activations).
        classes: classifier outputs; ``None`` means the family's default (10 or 1000).
    """

    family: str = "cifar"
    block: str = "basic"
    depth: int = 20
    width: float = 1.0
    early_downsample: bool = False
    input_size: int = 32
    batch: int = 1
    precision: str = "fp32"
    classes: int | None = None

    def __post_init__(self) -> None:
        """Normalise the fields' types and check the config; raises :class:`SpaceError` when it is invalid."""
        # Normalise types so that equal configs hash equally whatever their source
        # (TOML ints for widths, numpy scalars from a DataFrame, ...).
        object.__setattr__(self, "depth", _as_int("depth", self.depth))
        object.__setattr__(self, "width", _as_float("width", self.width))
        object.__setattr__(self, "input_size", _as_int("input_size", self.input_size))
        object.__setattr__(self, "batch", _as_int("batch", self.batch))
        object.__setattr__(self, "early_downsample", _as_bool("early_downsample", self.early_downsample))
        if self.classes is None or (isinstance(self.classes, float) and np.isnan(self.classes)):
            object.__setattr__(self, "classes", DEFAULT_CLASSES.get(self.family, 10))
        else:
            object.__setattr__(self, "classes", _as_int("classes", self.classes))
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def problem(self) -> str | None:
        """Return why this config is invalid, or ``None`` when it is valid."""
        if self.family not in FAMILIES:
            return f"family: unknown value {self.family!r} (expected one of {', '.join(FAMILIES)})"
        if self.block not in BLOCKS:
            return f"block: unknown value {self.block!r} (expected one of {', '.join(BLOCKS)})"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        if not 0 < self.width <= MAX_WIDTH:
            return f"width: {self.width!r} must be > 0 and <= {MAX_WIDTH}"
        if self.batch < 1:
            return f"batch: {self.batch!r} must be >= 1"
        if self.classes < 1:
            return f"classes: {self.classes!r} must be >= 1"
        if self.depth > MAX_DEPTH:
            return f"depth: {self.depth} is above the limit {MAX_DEPTH}"
        limits = run_limits_problem(self.input_size, self.batch, self.classes)
        if limits:
            return limits
        if self.family == "cifar":
            step = 6 if self.block == "basic" else 9
            if self.depth < step + 2 or (self.depth - 2) % step:
                form = "6n+2" if self.block == "basic" else "9n+2"
                return f"depth: {self.depth} is not {form} (n >= 1) for cifar {self.block} blocks"
            if self.input_size < 8:
                return f"input_size: {self.input_size} too small for the cifar family (>= 8)"
        else:
            if self.depth not in IMAGENET_LAYERS:
                return f"depth: {self.depth} not an imagenet ResNet depth (18, 34, 50, 101, 152)"
            want = IMAGENET_LAYERS[self.depth][0]
            if self.block != want:
                return f"block: imagenet ResNet-{self.depth} uses {want} blocks, not {self.block!r}"
            if self.early_downsample:
                return "early_downsample: only the cifar family has it (the imagenet stem already downsamples)"
            if self.input_size < 32:
                return f"input_size: {self.input_size} too small for the imagenet family (>= 32)"
        return None

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the parameters (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Config":
        """Build a config from a mapping; unknown keys raise :class:`SpaceError`."""
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        return cls(**{k: _py(v) for k, v in d.items()})

    def canonical(self) -> str:
        """Canonical JSON text of the config; its hash is the config id."""
        d = self.to_dict()
        d["width"] = float(f"{self.width:.6g}")
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical`."""
        return stable_id(self.canonical())

    @property
    def arch_key(self) -> tuple:
        """The parameters that define the network alone (not batch or precision)."""
        return (self.family, self.block, self.depth, self.width, self.early_downsample, self.input_size, self.classes)

    def label(self) -> str:
        """Short human-readable label, e.g. ``cifar-basic20-w1-i32-b8-fp32``."""
        ed = "-ed" if self.early_downsample else ""
        return (
            f"{self.family}-{self.block}{self.depth}-w{self.width:g}{ed}-i{self.input_size}"
            f"-b{self.batch}-{self.precision}"
        )


PARAMETERS: tuple[str, ...] = tuple(f.name for f in fields(Config))


def config_id(config: Config | Mapping[str, Any]) -> str:
    """Config id of a ResNet config or a plain dict of its parameters."""
    if not isinstance(config, Config):
        config = Config.from_dict(config)
    return config.config_id


def config_ids(df: pd.DataFrame) -> np.ndarray:
    """The ``config_id`` of every ResNet row of a table, vectorized and byte-identical to ``Config(**row).config_id``.

    Each distinct network-and-precision is checked and serialised once through :class:`Config`; batch, the first key
    of the canonical JSON, is joined as text; each distinct canonical text is hashed once.

    Raises:
        SpaceError: a column is missing or a row is not a valid config (names the row).
    """
    import hashlib

    absent = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if absent:
        raise SpaceError(f"missing column{'s' if len(absent) > 1 else ''} {', '.join(absent)}")
    n = len(df)
    if n == 0:
        return np.zeros(0, dtype=object)
    cols = [c for c in PARAMETERS if c != "batch"]
    rest = pd.DataFrame({c: df[c].reset_index(drop=True) if c in df.columns else None for c in cols})
    if rest["classes"].isna().any():
        fcodes, funiq = pd.factorize(rest["family"])
        default = np.array([DEFAULT_CLASSES.get(f, 10) for f in funiq] + [10])[fcodes]
        rest["classes"] = rest["classes"].where(rest["classes"].notna(), default)
    codes = rest.groupby(cols, sort=False, dropna=False).ngroup().to_numpy()
    # ngroup numbers groups by first appearance: a row starts one when its code is new
    first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    suffix = np.empty(len(first), dtype=object)
    for g, i in enumerate(first):
        try:
            cfg = Config.from_dict({**{c: rest[c].iat[i] for c in cols}, "batch": 1})
        except SpaceError as e:
            raise SpaceError(f"row {i}: {e}") from None
        suffix[g] = cfg.canonical().removeprefix('{"batch":1,')
    raw = df["batch"].to_numpy()
    try:
        batch = raw.astype(np.float64)
    except (TypeError, ValueError):
        batch = np.full(n, np.nan)
    bad = ~np.isfinite(batch) | (batch != np.round(batch)) | (batch < 1) | (batch > MAX_BATCH)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        Config.from_dict({**{c: rest[c].iat[i] for c in cols}, "batch": _py(raw[i])})  # raises, naming why
        raise SpaceError(f"row {i}: batch: {raw[i]!r} is not a valid batch")
    # distinct (network, batch) pairs as integers first: text and hashes only for those
    bcodes, buniq = pd.factorize(batch.astype(np.int64))
    pair, _ = pd.factorize(codes.astype(np.int64) * len(buniq) + bcodes)
    firsts = np.flatnonzero(np.r_[True, pair[1:] > np.maximum.accumulate(pair)[:-1]])
    ids = np.array(
        [hashlib.sha256(f'{{"batch":{int(batch[i])},{suffix[codes[i]]}'.encode()).hexdigest()[:16] for i in firsts],
        dtype=object,
    )
    return ids[pair]


# --- closed-form features ------------------------------------------------------------

#: The parameters that define the network (not batch, not precision).
ARCH_KEYS: tuple[str, ...] = ("family", "block", "depth", "width", "early_downsample", "input_size", "classes")
#: Columns a table must have (``classes`` may be absent or missing: the family's default).
REQUIRED_COLUMNS: tuple[str, ...] = (
    "family",
    "block",
    "depth",
    "width",
    "early_downsample",
    "input_size",
    "batch",
    "precision",
)

#: The numeric columns :func:`compute` adds, in order.
FEATURE_COLUMNS: list[str] = [
    *SIZE_COLUMNS,
    *COUNT_COLUMNS,
    *SHAPE_COLUMNS,
    "arithmetic_intensity",
    "conv1x1_flop_fraction",
]
_INT_COLUMNS = FEATURE_COLUMNS[:-2]  # int64; the last two are float64


def _classes_column(df: pd.DataFrame) -> pd.Series:
    """Each row's classes, the family's default where absent or missing."""
    if "classes" not in df.columns:
        return df["family"].map(DEFAULT_CLASSES)
    classes = df["classes"]
    return classes.fillna(df["family"].map(DEFAULT_CLASSES)) if classes.isna().any() else classes


def _network_groups(cols: dict[str, pd.Series]) -> tuple[np.ndarray, np.ndarray]:
    """Each row's distinct network (numbered by first appearance) and the first row of each network.

    Computed from the :data:`ARCH_KEYS` columns: each key factorized, the codes combined in mixed radix, factorized
    again.
    """
    n = len(next(iter(cols.values())))
    combined = np.zeros(n, dtype=np.int64)
    radix = 1
    for k in ARCH_KEYS:
        codes, uniq = pd.factorize(cols[k], use_na_sentinel=False)
        if radix * (len(uniq) + 1) >= 2**62:  # keep the mixed-radix code inside int64
            combined, seen = pd.factorize(combined)
            radix = len(seen)
        combined = combined * (len(uniq) + 1) + codes
        radix *= len(uniq) + 1
    group, _ = pd.factorize(combined)
    # factorize numbers networks by first appearance: a row starts a network when its
    # code exceeds every earlier code
    first = np.flatnonzero(np.r_[True, group[1:] > np.maximum.accumulate(group)[:-1]]) if n else group
    return group, first


def _network_table(key_values: dict[str, np.ndarray], first: np.ndarray) -> np.ndarray:
    """Per-image figures (:data:`_ARCH_FIELDS` order) of each distinct network, from its :data:`ARCH_KEYS` values.

    ``first`` names each network's first row in errors.
    """
    table = np.empty((len(first), len(_ARCH_FIELDS)), dtype=np.int64)
    for g in range(len(first)):
        raw = {k: key_values[k][g] for k in ARCH_KEYS}
        try:
            cfg = Config.from_dict(raw)
        except SpaceError as e:
            raise ValueError(f"features: row {int(first[g])}: {e}") from None
        table[g] = arch_features(*cfg.arch_key)
    return table


def _per_net_columns(a: dict[str, np.ndarray], side: np.ndarray, cls: np.ndarray) -> PerNetColumns:
    """The integer feature columns per distinct network (see :data:`PerNetColumns`).

    Computed from its figures ``a``, input side and classes.
    """
    return {
        "bytes_per_element": (np.ones(len(side), np.int64), False, True),
        "flops": (a["flops"], True, False),
        "flops_per_image": (a["flops"], False, False),
        "params": (a["params"], False, False),
        "weight_bytes": (a["params"], False, True),
        "model_bytes": (a["params"] + 2 * a["bn_channels"], False, True),
        "input_bytes": (3 * side * side, True, True),
        "output_bytes": (cls, True, True),
        "activation_bytes": (a["activation"], True, True),
        "peak_activation_bytes": (a["peak_io"], True, True),
        "live_activation_bytes": (a["live"], True, True),
        "largest_activation_bytes": (a["largest"], True, True),
        "n_conv": (a["n_conv"], False, False),
        "n_bn": (a["n_bn"], False, False),
        "n_linear": (a["n_linear"], False, False),
        "n_layers": (a["n_conv"] + a["n_linear"], False, False),
        "n_ops": (a["n_ops"], False, False),
        "n_stages": (a["n_stages"], False, False),
        "n_blocks": (a["n_blocks"], False, False),
        "n_projections": (a["n_projections"], False, False),
        "min_channels": (a["min_channels"], False, False),
        "max_channels": (a["max_channels"], False, False),
        "final_channels": (a["final_channels"], False, False),
        "stem_output_size": (a["stem_output_size"], False, False),
        "final_feature_size": (a["final_feature_size"], False, False),
    }


def _checked_batch(df: pd.DataFrame) -> np.ndarray:
    """Each row's batch, checked against 1 and ``MAX_BATCH``."""
    batch = _int_column(df, "batch")
    if len(df) and ((batch < 1) | (batch > MAX_BATCH)).any():
        i = int(np.flatnonzero((batch < 1) | (batch > MAX_BATCH))[0])
        raise ValueError(f"features: row {i}: batch: {df['batch'].iloc[i]} must be >= 1 and <= {MAX_BATCH:,}")
    return batch


def features(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of the configs table with the feature columns :data:`FEATURE_COLUMNS` added.

    Closed form, vectorized: each distinct network is walked once, then batch and precision
    scale its figures per row with numpy. See the module docstring for every column and
    its unit (FLOP, B, count, channels, px).

    The integer columns are int64; when a row's value would overflow int64 (a batch near
    10^12 and beyond: the limit is ``MAX_BATCH``), they are float64 for the whole table
    instead (exact to 2^53, then 16 significant digits), never wrapped around.

    Args:
        df: a DataFrame of ResNet rows with the columns :data:`REQUIRED_COLUMNS` (others are
            kept; ``classes`` may be absent or missing, meaning the family's default).

    Returns:
        A copy of ``df`` with the :data:`FEATURE_COLUMNS` appended (recomputed if present).

    Raises:
        ValueError: a required column is missing, or a row is not a valid config (the
            message names the column or the first bad row).
    """
    missing_cols = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing_cols:
        raise ValueError(
            f"features: missing column{'s' if len(missing_cols) > 1 else ''} "
            f"{', '.join(missing_cols)} (required: {', '.join(REQUIRED_COLUMNS)})"
        )
    clash = [c for c in FEATURE_COLUMNS if c in df.columns]
    if clash:
        df = df.drop(columns=clash)  # recompute rather than keep stale figures
    bpe = precision_bytes(df, "features")
    batch = _checked_batch(df)
    classes = _classes_column(df)
    cols = {k: (classes if k == "classes" else df[k]) for k in ARCH_KEYS}
    group, first = _network_groups(cols)
    key_values = {k: cols[k].iloc[first].to_numpy() for k in ARCH_KEYS}
    table = _network_table(key_values, first)
    a = {f: table[:, k] for k, f in enumerate(_ARCH_FIELDS)}
    cls = np.asarray([int(v) for v in key_values["classes"]], dtype=np.int64)
    side = np.asarray([int(v) for v in key_values["input_size"]], dtype=np.int64)
    per_net = _per_net_columns(a, side, cls)
    assert list(per_net) == _INT_COLUMNS
    feats = per_row_features(per_net, group, batch, bpe, a["n_bn"], df.index)
    feats["conv1x1_flop_fraction"] = flop_fraction(a["flops_1x1"], a["flops"], group)
    return pd.concat([df, feats], axis=1)


def _int_column(df: pd.DataFrame, name: str) -> np.ndarray:
    col = df[name]
    try:
        values = col.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"features: {name}: not numeric") from None
    if np.isnan(values).any() or (values != np.round(values)).any():
        i = int(np.flatnonzero(np.isnan(values) | (values != np.round(values)))[0])
        raise ValueError(f"features: row {i}: {name}: {col.iloc[i]!r} is not an integer")
    if np.abs(values).max(initial=0) >= 2.0**62:  # beyond int64: the caller's limit check names it
        values = np.clip(values, -(2.0**62), 2.0**62)
    return values.astype(np.int64)


# --- the network ---------------------------------------------------------------------


def build(config: Config | Mapping[str, Any]) -> Any:
    """The network of a ResNet config (a ``torch.nn.Module``), in eval mode, with fp32 weights.

    Batch and precision do not change the module; cast it yourself, e.g.
    ``build(cfg).to(carb.families.arch.dtype_of(cfg.precision))``, and feed inputs of shape
    ``(batch, 3, input_size, input_size)``. The module is created on torch's current
    default device, so ``with torch.device("meta"): build(cfg)`` allocates nothing.

    Raises:
        SpaceError: (a ``ValueError``) the config is invalid.
    """
    from ._resnet_nets import CifarResNet, ImageNetResNet  # torch is imported here, on use

    cfg = config if isinstance(config, Config) else Config.from_dict(config)
    if cfg.family == "cifar":
        model = CifarResNet(cfg.block, cfg.depth, cfg.width, cfg.early_downsample, cfg.classes)
    else:
        model = ImageNetResNet(cfg.depth, cfg.width, cfg.classes)
    init_weights(model)
    return model.eval()


def _from_row(row: Mapping[str, Any]) -> Config:
    return Config.from_dict({k: v for k, v in row.items() if k in PARAMETERS and not missing(v)})


CIFAR = Family(
    name="cifar",
    config_type=Config,
    from_row=_from_row,
    to_row=Config.to_dict,
    build=build,
    features=features,
    description="3-stage ResNets of He et al. 2016 (CIFAR-style)",
    parameters=tuple(p for p in PARAMETERS if p != "family"),
)
IMAGENET = Family(
    name="imagenet",
    config_type=Config,
    from_row=_from_row,
    to_row=Config.to_dict,
    build=build,
    features=features,
    description="torchvision's 4-stage ResNet-18/34/50/101/152",
    parameters=tuple(p for p in PARAMETERS if p != "family"),
)
