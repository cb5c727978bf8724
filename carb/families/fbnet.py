"""The FBNet family: HW-NAS-Bench's FBNet space as PyTorch networks, with closed-form features.

One :class:`FBNetConfig` is the FBNet macro-architecture (CIFAR-100 variant, the one of
HW-NAS-Bench and of HELP's public data, :mod:`carb.datasets.help_fbnet`) with one of 9 operations
chosen for each of its 22 searchable layers, run at an input size, batch and precision.
The channel, stride and layer tables (``STEM_CHANNELS``, ``STAGE_LAYERS``, ``STAGE_CHANNELS``,
``STAGE_STRIDES``, ``HEAD_CHANNELS``, ``OP_SPECS``) live in :mod:`carb.families._fbnet_tables`
and the torch modules in :mod:`carb.families._fbnet_nets`; this module re-exports both.

The network (:func:`build`), operator by operator:

- stem: 3x3 convolution, 3 -> 16 channels, stride 1, padding 1, + BN + ReLU;
- 22 searchable layers in 7 stages of 1, 4, 4, 4, 4, 4, 1 layers with 16, 24, 32, 64, 112,
  184, 352 output channels; the first layer of a stage has the stage's stride
  (1, 1, 2, 2, 1, 2, 1), the others stride 1. A layer is one of
  ``k{3,5}_e{1,3,6}`` / ``k{3,5}_e1_g2``: FBNet's inverted-residual block (``IRFBlock``):
  1x1 expansion to ``e * cin`` channels (2 groups for ``_g2``) + BN + ReLU, for ``_g2`` a
  channel shuffle of 2 groups, a k x k depthwise convolution (padding k // 2) with the
  layer's stride + BN + ReLU, a 1x1 projection to ``cout`` (2 groups for ``_g2``) + BN,
  and the residual addition (no ReLU after it) when the stride is 1 and ``cin == cout``;
  or ``skip``: the identity where the shape is kept, otherwise a 1x1 convolution with the
  layer's stride + BN + ReLU;
- head: 1x1 convolution to 1504 channels + BN + ReLU, global average pooling, a linear
  classifier (with bias) to ``classes`` outputs.

Choices, and where they come from. HW-NAS-Bench's published API
(``hw_nas_bench_api``, ``fbnet_get_metrics``) gives the macro-architecture above and the
op list, and prices each layer from a look-up table keyed by shapes
(``ConvBlock_H_W_Cin_Cout_exp_kernel_stride_group``, ``Skip_H_W_Cin_Cout_stride``); it
does not ship the modules. The op definitions are therefore FBNet's own: the original
FBNet v1 builder (``fbnet_builder.py``, as vendored in maskrcnn-benchmark: ``PRIMITIVES``,
``IRFBlock``, ``Identity``, ``ChannelShuffle``), which this module follows:

- ``skip`` is FBNet v1's ``Identity`` primitive: the input itself when ``cin == cout``
  and the stride is 1, otherwise ``ConvBNRelu(cin, cout, kernel=1, stride=stride)`` -- a
  1x1 convolution, BN *and ReLU*. Here that is the first layer of stages 2 to 7, whose
  channels all change; HW-NAS-Bench's table keys the skip cost by shapes and stride,
  consistent with a projection there.
- ``_g2`` ops are FBNet's ``ir_k3_s2`` / ``ir_k5_s2``: ``IRFBlock(expansion=1,
  pw_group=2, shuffle_type="mid")``: both 1x1 convolutions have 2 groups and the channels
  are shuffled (view, transpose, contiguous copy) between the expansion and the depthwise
  convolution. The shuffle does no arithmetic (FlopCounterMode counts nothing for it) but
  writes a copy of the expanded tensor, which the activation columns count.
- the expansion convolution is always there, also for ``e1`` (FBNet v1 builds it
  unconditionally; mobile-vision's later FBNet v2 drops it when ``e * cin == cin``).
- the expanded width is ``e * cin`` exactly: FBNet rounds it to a multiple of its width
  divisor, which changes nothing here (every channel count of the space is a multiple of 8).
- convolutions have no bias (each is followed by BN); the classifier has one.
- ``input_size`` other than 32 runs the same network (no resolution-dependent choices);
  a k x k convolution with padding ``k // 2`` and stride s maps a side h to
  ``(h - 1) // s + 1``.

:func:`features` computes the static figures of many configs at once without building a
module, with the same column names and meanings as :mod:`carb.families.features` where they apply;
the tests check them against ``torch.utils.flop_counter.FlopCounterMode``, the module's
parameters and a tracker of the tensors a forward allocates, exactly.

This module imports torch only when a network is built, so that :mod:`carb.datasets.help_fbnet`
can use :func:`features` without it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ._base import (
    COUNT_COLUMNS,
    PRECISIONS,
    SHAPE_COLUMNS,
    SIZE_COLUMNS,
    Family,
    PerNetColumns,
    SpaceError,
    _as_int,
    _py,
    distinct_networks,
    flop_fraction,
    init_weights,
    int_values,
    missing,
    own_parameters,
    per_row_features,
    precision_bytes,
    run_limits_problem,
    stable_id,
)
from ._fbnet_tables import (
    CLASSES,
    HEAD_CHANNELS,
    INPUT_SIZE,
    N_LAYERS,
    OP_SPECS,
    OPS,
    STAGE_CHANNELS,
    STAGE_LAYERS,
    STAGE_STRIDES,
    STEM_CHANNELS,
)
from ._fbnet_tables import layer_plan as layer_plan  # re-exported: carb.datasets.help_fbnet reads it here
from ._fbnet_walk import _ADD, _MAX, _network_figures

if TYPE_CHECKING:  # pragma: no cover - types only; torch is imported lazily
    from torch import nn

__all__ = [
    "FAMILY",
    "OPS",
    "N_LAYERS",
    "LAYER_COLUMNS",
    "PARAMETERS",
    "FEATURE_COLUMNS",
    "OP_COUNT_COLUMNS",
    "MIN_INPUT_SIZE",
    "OP_SPECS",
    "STEM_CHANNELS",
    "STAGE_LAYERS",
    "STAGE_CHANNELS",
    "STAGE_STRIDES",
    "HEAD_CHANNELS",
    "FBNetConfig",
    "build",
    "features",
    "from_help",
    "to_frame",
]

#: The ``family`` key of a config's canonical form.
FAMILY = "fbnet"

#: The table columns of the 22 layers' operations (HELP's names).
LAYER_COLUMNS: tuple[str, ...] = tuple(f"layer_{i:02d}" for i in range(N_LAYERS))
_OPS_INDEX = pd.Index(OPS)


def op_codes(archs: pd.DataFrame) -> np.ndarray:
    """Operation index (into :data:`OPS`) per layer, shape (n, 22), int8.

    ``archs`` needs the columns ``layer_00`` .. ``layer_21`` (operation names).

    Raises:
        ValueError: an unknown operation (one line naming the column and the value).
    """
    cols = []
    for c in LAYER_COLUMNS:
        values = np.asarray(archs[c], dtype=object)
        codes = _OPS_INDEX.get_indexer(values)
        if (codes < 0).any():
            bad = values[codes < 0][0]
            raise ValueError(f"{c}: unknown operation {bad!r} (expected one of {', '.join(OPS)})")
        cols.append(codes)
    return np.stack(cols, axis=1).astype(np.int8)


#: The parameters of a config (the fields of :class:`FBNetConfig`).
PARAMETERS: tuple[str, ...] = ("ops", "input_size", "batch", "precision", "classes")
#: Smallest input side accepted: the three stride-2 stages take 8 px to 1 px. Units: px.
MIN_INPUT_SIZE = 8
_OP_INDEX = {op: i for i, op in enumerate(OPS)}


# --- configs -------------------------------------------------------------------------


@dataclass(frozen=True)
class FBNetConfig:
    """One FBNet-space network and how it is run.

    Attributes:
        ops: 22 operation names of :data:`OPS`, one per searchable layer, in order.
        input_size: input height = width. Units: px.
        batch: images per forward pass.
        precision: ``fp32``, ``fp16`` or ``bf16`` (weights and activations).
        classes: classifier outputs (100: CIFAR-100, as in HW-NAS-Bench and HELP).

    Raises:
        carb.families.space.SpaceError: (a ``ValueError``, one line) an invalid value.
    """

    ops: tuple[str, ...]
    input_size: int = INPUT_SIZE
    batch: int = 1
    precision: str = "fp32"
    classes: int = CLASSES

    def __post_init__(self) -> None:
        """Normalise the fields' types and check the config; raises :class:`SpaceError` when it is invalid."""
        # Normalise types so that equal configs hash equally whatever their source (lists,
        # numpy strings and integers from a DataFrame, ...).
        ops = self.ops
        if isinstance(ops, (str, bytes)) or not isinstance(ops, Iterable):
            raise SpaceError(f"ops: expected a sequence of {N_LAYERS} operation names, got a {type(ops).__name__}")
        object.__setattr__(self, "ops", tuple(_py(o) for o in ops))
        for name in ("input_size", "batch", "classes"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def problem(self) -> str | None:
        """Why this config is invalid (one line), or ``None`` when it is valid."""
        if len(self.ops) != N_LAYERS:
            return f"ops: expected {N_LAYERS} operations (one per searchable layer), got {len(self.ops)}"
        for i, op in enumerate(self.ops):
            if not isinstance(op, str) or op not in _OP_INDEX:
                return f"ops[{i}]: unknown operation {op!r} (expected one of {', '.join(OPS)})"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        if self.input_size < MIN_INPUT_SIZE:
            return f"input_size: {self.input_size} too small for the fbnet family (>= {MIN_INPUT_SIZE})"
        if self.batch < 1:
            return f"batch: {self.batch!r} must be >= 1"
        if self.classes < 1:
            return f"classes: {self.classes!r} must be >= 1"
        return run_limits_problem(self.input_size, self.batch, self.classes)

    @property
    def codes(self) -> tuple[int, ...]:
        """Index into :data:`OPS` of each layer's operation."""
        return tuple(_OP_INDEX[op] for op in self.ops)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict: ``family`` (``"fbnet"``) and the parameters (``ops`` as a list)."""
        return {
            "family": FAMILY,
            "ops": list(self.ops),
            "input_size": self.input_size,
            "batch": self.batch,
            "precision": self.precision,
            "classes": self.classes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "FBNetConfig":
        """A config from a mapping of its parameters (``family``, if present, must be ``"fbnet"``).

        Raises:
            ~carb.families.space.SpaceError: an unknown key.
        """
        d = own_parameters(d, FAMILY, PARAMETERS, required=("ops",))
        return cls(**d)

    def canonical(self) -> str:
        """Canonical JSON text of the config (sorted keys, no spaces); its hash is the id."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical`.

        The ``family`` key keeps it apart from every :class:`carb.families.space.Config` id.
        """
        return stable_id(self.canonical())

    @property
    def arch_key(self) -> tuple:
        """The parameters that define the network's shapes (not batch or precision)."""
        return (self.ops, self.input_size, self.classes)

    def label(self) -> str:
        """Short label: op indices (0..8, :data:`OPS` order) then size, batch, precision.

        For example ``fbnet-0000000000000000000008-i32-b1-fp32``.
        """
        return f"fbnet-{''.join(map(str, self.codes))}-i{self.input_size}-b{self.batch}-{self.precision}"


def from_help(archs: pd.DataFrame, *, batch: int = 1, precision: str = "fp32") -> list[FBNetConfig]:
    """Configs of HELP's architectures (rows with ``layer_00`` .. ``layer_21``), in row order.

    At HELP's 32x32 input and 100 classes.

    Raises:
        ValueError: a layer column is missing or holds an unknown operation (one line).
    """
    missing = [c for c in LAYER_COLUMNS if c not in archs.columns]
    if missing:
        raise ValueError(
            f"fbnet.from_help: missing column {missing[0]} (need {LAYER_COLUMNS[0]} .. {LAYER_COLUMNS[-1]})"
        )
    codes = op_codes(archs)
    return [FBNetConfig(tuple(OPS[j] for j in row), batch=batch, precision=precision) for row in codes.tolist()]


def to_frame(configs: FBNetConfig | Iterable[FBNetConfig]) -> pd.DataFrame:
    """The parameter table of configs: ``config_id``, ``layer_00`` ..

    ``layer_21`` (categorical, categories :data:`OPS`), ``input_size``, ``batch``, ``precision``, ``classes``.
    """
    cs = [configs] if isinstance(configs, FBNetConfig) else list(configs)
    bad = next((c for c in cs if not isinstance(c, FBNetConfig)), None)
    if bad is not None:
        raise TypeError(f"fbnet: expected FBNetConfigs, got a {type(bad).__name__}")
    codes = np.array([c.codes for c in cs], dtype=np.int8).reshape(len(cs), N_LAYERS)
    out: dict[str, Any] = {"config_id": [c.config_id for c in cs]}
    for k, col in enumerate(LAYER_COLUMNS):
        out[col] = pd.Categorical.from_codes(codes[:, k], categories=OPS)
    out["input_size"] = np.array([c.input_size for c in cs], dtype=np.int64)
    out["batch"] = np.array([c.batch for c in cs], dtype=np.int64)
    out["precision"] = [c.precision for c in cs]
    out["classes"] = np.array([c.classes for c in cs], dtype=np.int64)
    return pd.DataFrame(out)


# --- the network ---------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    # carb.families.fbnet.FBNet, .IRBlock, .SkipProjection, .channel_shuffle: the torch modules, torch imported on use
    if name in ("FBNet", "IRBlock", "SkipProjection", "channel_shuffle"):
        from . import _fbnet_nets

        return getattr(_fbnet_nets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(config: FBNetConfig | Mapping[str, Any]) -> "nn.Module":
    """The network of a config, in eval mode, with fp32 weights.

    Batch, precision and input size do not change the module; cast it yourself, e.g.
    ``build(cfg).to(carb.families.arch.dtype_of(cfg.precision))``, and feed inputs of shape
    ``(batch, 3, input_size, input_size)``; the output has shape ``(batch, classes)``.
    The module is created on torch's current default device, so
    ``with torch.device("meta"): build(cfg)`` allocates nothing.

    Initialisation: FBNet's (He normal, fan_out, for convolutions; BN at identity);
    the classifier keeps PyTorch's default.

    Raises:
        carb.families.space.SpaceError: (a ``ValueError``, one line) the config is invalid.
    """
    from ._fbnet_nets import FBNet  # torch is imported here, on use

    cfg = config if isinstance(config, FBNetConfig) else FBNetConfig.from_dict(config)
    model = FBNet(cfg.ops, cfg.classes)
    init_weights(model)  # the same He (fan_out) / BN-identity initialisation as the ResNets
    return model.eval()


# --- closed-form features ------------------------------------------------------------

#: Per-op layer counts :func:`features` adds (``n_<op>``, as :func:`carb.datasets.help_fbnet.config_columns`).
OP_COUNT_COLUMNS: list[str] = [f"n_{op}" for op in OPS]

#: The numeric columns :func:`features` adds, in order. Units and meanings are those of
#: :mod:`carb.families.features` (all figures for one forward of the whole batch unless the name
#: says per image; "activation": a tensor the forward produces, not the input or weights):
#:
#: - ``bytes_per_element`` (B), ``flops`` (FLOP, 2 x multiply-accumulates of convolutions
#:   and the classifier, as FlopCounterMode counts), ``flops_per_image`` (FLOP),
#:   ``params`` (count: convolution weights, BN weight and bias, classifier weight and
#:   bias), ``weight_bytes`` (B), ``model_bytes`` (B: parameters, BN running statistics
#:   and each BN's 8-byte ``num_batches_tracked``), ``input_bytes``, ``output_bytes`` (B);
#: - ``activation_bytes`` (B: outputs of every operator, in-place ReLUs and residual
#:   additions and the channel shuffles' copies included), ``peak_activation_bytes`` (B:
#:   largest input + output of an allocating operator), ``live_activation_bytes`` (B:
#:   peak of the activations alive at once in an eager forward under
#:   ``torch.inference_mode()``, the input batch and kernel workspaces not counted; a
#:   memory-peak estimate is ``model_bytes + input_bytes + live_activation_bytes``),
#:   ``largest_activation_bytes`` (B);
#: - ``n_conv``, ``n_bn``, ``n_linear``, ``n_layers`` (``n_conv + n_linear``), ``n_ops``
#:   (operator calls: convolutions, BNs, ReLUs, channel-shuffle copies, residual
#:   additions, pooling, linear), ``n_stages`` (7), ``n_blocks`` (inverted-residual
#:   blocks: the layers that are not ``skip``), ``n_projections`` (``skip`` layers that
#:   are a 1x1 conv + BN + ReLU), ``n_residual`` (blocks with a residual addition)
#:   (counts);
#: - ``min_channels``, ``max_channels`` (of any convolution's output), ``final_channels``
#:   (entering the classifier) (channels); ``stem_output_size``, ``final_feature_size`` (px);
#: - ``n_k3_e1`` .. ``n_skip`` (searchable layers per op, count);
#: - ``arithmetic_intensity`` (FLOP/B, ``flops / (weight_bytes + activation_bytes)``),
#:   ``conv1x1_flop_fraction`` and ``depthwise_flop_fraction`` (shares of ``flops`` in
#:   1x1 and in k x k depthwise convolutions, in [0, 1]).
FEATURE_COLUMNS: list[str] = [
    *SIZE_COLUMNS,
    *COUNT_COLUMNS,
    "n_residual",
    *SHAPE_COLUMNS,
    *OP_COUNT_COLUMNS,
    "arithmetic_intensity",
    "conv1x1_flop_fraction",
    "depthwise_flop_fraction",
]
_FLOAT_COLUMNS = ("arithmetic_intensity", "conv1x1_flop_fraction", "depthwise_flop_fraction")


def _check_min(values: np.ndarray, name: str, low: int, why: str = "") -> None:
    if len(values) and (values < low).any():
        i = int(np.flatnonzero(values < low)[0])
        raise ValueError(f"fbnet.features: row {i}: {name}: {values[i]} must be >= {low}{why}")


def _frame_and_codes(configs: FBNetConfig | Iterable[FBNetConfig] | pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """The table of :func:`features`' input and its op codes, shape (n, 22), int64."""
    if not isinstance(configs, pd.DataFrame):
        df = to_frame(configs)
        codes = (
            np.stack([df[c].cat.codes.to_numpy() for c in LAYER_COLUMNS], axis=1).astype(np.int64)
            if len(df)
            else np.zeros((0, N_LAYERS), np.int64)
        )
        return df, codes
    absent = [c for c in LAYER_COLUMNS if c not in configs.columns]
    if absent:
        raise ValueError(f"fbnet.features: missing column {absent[0]} (need {LAYER_COLUMNS[0]} .. {LAYER_COLUMNS[-1]})")
    try:
        return configs, op_codes(configs).astype(np.int64)
    except ValueError as e:
        raise ValueError(f"fbnet.features: {e}") from None


def _run_values(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's input size, batch, classes and bytes per element, checked."""
    where = "fbnet.features"
    size = int_values(df, "input_size", INPUT_SIZE, where)
    batch = int_values(df, "batch", 1, where)
    classes = int_values(df, "classes", CLASSES, where)
    _check_min(size, "input_size", MIN_INPUT_SIZE, " for the fbnet family")
    _check_min(batch, "batch", 1)
    _check_min(classes, "classes", 1)
    return size, batch, classes, precision_bytes(df, where)


def _per_net_columns(
    nets: np.ndarray,
    a: dict[str, np.ndarray],
    m: dict[str, np.ndarray],
    mn: np.ndarray,
    stem_side: np.ndarray,
    final_side: np.ndarray,
) -> PerNetColumns:
    """The integer feature columns per distinct network (see :data:`PerNetColumns`).

    Computed from its additive figures ``a`` and maxima ``m``.
    """
    g = len(nets)
    op_counts = (
        (nets[:, :N_LAYERS, None] == np.arange(len(OPS))).sum(axis=1) if g else np.zeros((0, len(OPS)), np.int64)
    )
    return {
        "bytes_per_element": (np.ones(g, np.int64), False, True),
        "flops": (a["flops"], True, False),
        "flops_per_image": (a["flops"], False, False),
        "params": (a["params"], False, False),
        "weight_bytes": (a["params"], False, True),
        "model_bytes": (a["params"] + 2 * a["bn_channels"], False, True),
        "input_bytes": (3 * nets[:, N_LAYERS] ** 2, True, True),
        "output_bytes": (nets[:, N_LAYERS + 1].copy(), True, True),
        "activation_bytes": (a["activation"], True, True),
        "peak_activation_bytes": (m["peak_io"], True, True),
        "live_activation_bytes": (m["live"], True, True),
        "largest_activation_bytes": (m["largest"], True, True),
        "n_conv": (a["n_conv"], False, False),
        "n_bn": (a["n_bn"], False, False),
        "n_linear": (a["n_linear"], False, False),
        "n_layers": (a["n_conv"] + a["n_linear"], False, False),
        "n_ops": (a["n_ops"], False, False),
        "n_stages": (np.full(g, len(STAGE_LAYERS), np.int64), False, False),
        "n_blocks": (a["n_blocks"], False, False),
        "n_projections": (a["n_projections"], False, False),
        "n_residual": (a["n_residual"], False, False),
        "min_channels": (mn, False, False),
        "max_channels": (m["max_channels"], False, False),
        "final_channels": (np.full(g, HEAD_CHANNELS, np.int64), False, False),
        "stem_output_size": (stem_side, False, False),
        "final_feature_size": (final_side, False, False),
        **{c: (op_counts[:, j].astype(np.int64), False, False) for j, c in enumerate(OP_COUNT_COLUMNS)},
    }


def features(configs: FBNetConfig | Iterable[FBNetConfig] | pd.DataFrame) -> pd.DataFrame:
    """Closed-form static features of FBNet configs, vectorized: :data:`FEATURE_COLUMNS`.

    Each distinct network (operations, input size, classes) is counted once, by summing and
    maximising per-(layer, op) tables with numpy; batch and precision then scale its
    per-image figures for every row. No torch module is built.

    Args:
        configs: :class:`FBNetConfig` (one or many: the result starts with
            :func:`to_frame`'s columns), or a DataFrame with the columns ``layer_00`` ..
            ``layer_21`` (operation names, as HELP's) and optionally ``input_size`` (default
            32), ``batch`` (1), ``precision`` (``fp32``), ``classes`` (100): the result is a
            copy with the feature columns added (recomputed if present), index kept.

    Returns:
        The table with the :data:`FEATURE_COLUMNS` appended.

    Raises:
        ValueError: a missing layer column or an invalid value (one line naming the row
            and column).
    """
    df, codes = _frame_and_codes(configs)
    df = df.drop(columns=[c for c in FEATURE_COLUMNS if c in df.columns])
    size, batch, classes, bpe = _run_values(df)
    nets, group = distinct_networks(codes, size, classes)
    add, mx, mn, stem_side, final_side = _network_figures(nets)
    a = {f: add[:, k] for k, f in enumerate(_ADD)}
    m = {f: mx[:, k] for k, f in enumerate(_MAX)}
    per_net = _per_net_columns(nets, a, m, mn, stem_side, final_side)
    assert list(per_net) == [c for c in FEATURE_COLUMNS if c not in _FLOAT_COLUMNS]
    feats = per_row_features(per_net, group, batch, bpe, a["n_bn"], df.index, widen=False)
    feats["conv1x1_flop_fraction"] = flop_fraction(a["flops_1x1"], a["flops"], group)
    feats["depthwise_flop_fraction"] = flop_fraction(a["flops_dw"], a["flops"], group)
    return pd.concat([df, feats[FEATURE_COLUMNS]], axis=1)


# --- the family record ---------------------------------------------------------------


def _from_row(row: Mapping[str, Any]) -> Any:
    d = {k: v for k, v in row.items() if not missing(v)}
    if "ops" not in d:  # a table row (the store expands its arch JSON into these columns)
        absent = [c for c in LAYER_COLUMNS if c not in d]
        if absent:
            raise SpaceError(
                f"fbnet: missing column {absent[0]} (needs {LAYER_COLUMNS[0]} .. {LAYER_COLUMNS[-1]} or ops)"
            )
        d["ops"] = [str(d[c]) for c in LAYER_COLUMNS]
    keep = {k: d[k] for k in PARAMETERS if k in d}
    return FBNetConfig.from_dict(keep)


def _to_row(config: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"family": FAMILY}
    row.update(zip(LAYER_COLUMNS, config.ops))
    row.update(input_size=config.input_size, batch=config.batch, precision=config.precision, classes=config.classes)
    return row


FBNET = Family(
    name=FAMILY,
    config_type=FBNetConfig,
    from_row=_from_row,
    to_row=_to_row,
    build=build,
    features=lambda df: features(df),
    description="FBNet v1 macro-architecture, 22 searchable layers x 9 operations (HW-NAS-Bench, HELP)",
    parameters=(*LAYER_COLUMNS, "input_size", "batch", "precision", "classes"),
)
