"""The NAS-Bench-201 family: its 15,625 cell-based CNNs as PyTorch networks, with closed-form features.

The networks are those of NAS-Bench-201 (Dong & Yang, ICLR 2020).

One :class:`NB201Config` is the NAS-Bench-201 macro skeleton with one operation chosen for
each of the six edges of its cell, run at an input size, class count, batch and precision.
The public measurements of these networks (HW-NAS-Bench, HELP) are the ``nb201`` dataset
(:mod:`carb.datasets.nb201`).

The network (:func:`build`), operator by operator, as NAS-Bench-201's inference model
(``TinyNetwork`` with ``InferCell``, ``cell_operations.py`` of D-X-Y/AutoDL-Projects, read
as reference; C = 16, N = 5):

- stem: 3x3 convolution, 3 -> 16 channels, padding 1, + BN (no ReLU);
- three stages of 5 cells at 16, 32, 64 channels; between stages a residual reduction
  block (``ResNetBasicblock``, stride 2): ``conv_a`` = ReLU + 3x3 convolution (stride 2)
  + BN, ``conv_b`` = ReLU + 3x3 convolution + BN, shortcut = 2x2 average pooling
  (stride 2) + 1x1 convolution (no BN, no ReLU), output = shortcut + ``conv_b``;
- the cell: 4 nodes; node 0 is the cell's input, node j the sum of an operation on each
  earlier node. Edges in the order of ``arch_str`` (:data:`EDGES`): node 1 <- 0 |
  node 2 <- 0, 1 | node 3 <- 0, 1, 2; node 3 is the output. Operations (:data:`OPS`):
  ``none`` (no edge), ``skip_connect`` (identity), ``nor_conv_1x1`` / ``nor_conv_3x3``
  (ReLU, not in place, + convolution, padding k // 2 + BN), ``avg_pool_3x3`` (3x3
  average pooling, stride 1, padding 1, ``count_include_pad=False``); every edge of a
  cell keeps the shape (the cell never reduces), so skip is always the identity and
  pooling never has a 1x1 preprocessing convolution;
- head (``lastact``): BN + ReLU, global average pooling, a linear classifier (with bias).

Every BN has ``affine=True`` and tracks running statistics (the inference model's
settings); convolutions have no bias. HW-NAS-Bench measured ``classes = 10`` / ``100`` at
32x32 (CIFAR-10/100) and ``120`` at 16x16 (ImageNet16-120).

Choices, and why:

- ``none`` contributes nothing: the reference adds ``x.mul(0.)`` for it; adding zero
  changes no value, so the edge is dropped. A node whose incoming edges are all ``none``
  is a tensor of zeros (``torch.zeros_like``), as in the reference; the operations on the
  edges leaving such a node still run (on zeros), as they do in the reference, and
  every figure counts them.
- ``skip_connect`` is the identity: no operator runs, nothing is allocated, nothing counts
  (no FLOPs, no parameters, no activation); a node fed by one skip edge alone *is* its
  source tensor.
- a node fed by several edges sums them with out-of-place additions, in edge order (the
  additions do no FLOPs for FlopCounterMode but each writes a tensor: ``n_ops`` and the
  activation columns count them).
- the model returns the logits only (the reference returns ``(features, logits)``).
- ``input_size`` must be a multiple of 4 (each reduction's shortcut pools 2x2 while its
  convolution strides with padding; the two sides agree on even sides only).

:func:`features` computes the static figures of many configs at once without building a
module, vectorized over the edge operations with numpy, with the same column names and
meanings as :mod:`carb.families.features` where they apply; the tests check them against
``torch.utils.flop_counter.FlopCounterMode``, the module's parameters and a tracker of
the tensors a forward allocates, exactly. This module imports torch only when a network
is built.

The fixed tables live in :mod:`carb.families._nb201_tables`, the torch modules in
:mod:`carb.families._nb201_nets` and the effective-DAG figures of a cell
(:func:`cell_features`) in :mod:`carb.families._nb201_cells`; this module re-exports them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping

import numpy as np
import pandas as pd

from ._base import (
    COUNT_COLUMNS,
    MAX_BATCH,
    MAX_CLASSES,
    MAX_INPUT_SIZE,
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
from ._nb201_cells import CELL_FEATURE_COLUMNS, cell_features, effective_edges
from ._nb201_tables import CELLS_PER_STAGE, EDGES, OPS, STAGE_CHANNELS, STEM_CHANNELS
from ._nb201_tables import CONV1 as CONV1  # the op codes, re-exported
from ._nb201_tables import CONV3 as CONV3
from ._nb201_tables import NONE as NONE
from ._nb201_tables import POOL as POOL
from ._nb201_walk import _network_figures

if TYPE_CHECKING:  # pragma: no cover - types only; torch is imported lazily
    from torch import nn

__all__ = [
    "FAMILY",
    "OPS",
    "EDGES",
    "EDGE_COLUMNS",
    "PARAMETERS",
    "FEATURE_COLUMNS",
    "OP_COUNT_COLUMNS",
    "INPUT_VARIANTS",
    "NB201Config",
    "build",
    "features",
    "to_frame",
    "parse_arch_str",
    "arch_str",
    "CELL_FEATURE_COLUMNS",
    "cell_features",
    "effective_edges",
    "edge_codes",
]

#: The ``family`` key of a config's canonical form.
FAMILY = "nb201"
#: The table columns of the 6 edges' operations.
EDGE_COLUMNS: tuple[str, ...] = tuple(f"edge_{i}" for i in range(6))
#: HW-NAS-Bench's three input variants: dataset name -> (input side px, classes).
INPUT_VARIANTS: dict[str, tuple[int, int]] = {"cifar10": (32, 10), "cifar100": (32, 100), "ImageNet16-120": (16, 120)}
#: The parameters of a config (the fields of :class:`NB201Config`).
PARAMETERS: tuple[str, ...] = ("edges", "input_size", "classes", "batch", "precision")
_OP_INDEX = {op: i for i, op in enumerate(OPS)}
_OPS_INDEX = pd.Index(OPS)


def parse_arch_str(text: str) -> tuple[str, ...]:
    """The 6 edge operations of a NAS-Bench-201 ``arch_str`` (``|op~0|+|op~0|op~1|+|op~0|op~1|op~2|``), in edge order.

    Raises:
        SpaceError: (one line) not an arch string of this space.
    """
    nodes = str(text).split("+")
    ops: list[str] = []
    try:
        for j, node in enumerate(nodes, start=1):
            parts = [p for p in node.strip().strip("|").split("|")]
            if len(parts) != j:
                raise ValueError
            for i, p in enumerate(parts):
                op, src = p.split("~")
                if int(src) != i or op not in _OP_INDEX:
                    raise ValueError
                ops.append(op)
    except ValueError:
        raise SpaceError(
            f"arch_str: {text!r} is not a NAS-Bench-201 cell (|op~0|+|op~0|op~1|+|op~0|op~1|op~2|)"
        ) from None
    if len(ops) != 6:
        raise SpaceError(f"arch_str: {text!r} is not a NAS-Bench-201 cell (6 edges)")
    return tuple(ops)


def arch_str(edges: Iterable[str]) -> str:
    """NAS-Bench-201's ``arch_str`` of 6 edge operations."""
    e = list(edges)
    return f"|{e[0]}~0|+|{e[1]}~0|{e[2]}~1|+|{e[3]}~0|{e[4]}~1|{e[5]}~2|"


# --- configs -------------------------------------------------------------------------


@dataclass(frozen=True)
class NB201Config:
    """One NAS-Bench-201 network and how it is run.

    Attributes:
        edges: 6 operation names of :data:`OPS`, one per cell edge, in ``arch_str`` order.
        input_size: input height = width, a multiple of 4. Units: px.
        classes: classifier outputs (CIFAR-10: 10, CIFAR-100: 100, ImageNet16-120: 120).
        batch: images per forward pass.
        precision: ``fp32``, ``fp16`` or ``bf16`` (weights and activations).

    Raises:
        carb.families.space.SpaceError: (a ``ValueError``, one line) an invalid value.
    """

    edges: tuple[str, ...]
    input_size: int = 32
    classes: int = 10
    batch: int = 1
    precision: str = "fp32"

    def __post_init__(self) -> None:
        """Normalise the fields (an ``arch_str`` becomes its edges) and check the config; raises :class:`SpaceError`."""
        edges = self.edges
        if isinstance(edges, str) and "~" in edges:
            edges = parse_arch_str(edges)
        if isinstance(edges, (str, bytes)) or not isinstance(edges, Iterable):
            raise SpaceError(f"edges: expected 6 operation names, got a {type(edges).__name__}")
        object.__setattr__(self, "edges", tuple(_py(o) for o in edges))
        for name in ("input_size", "classes", "batch"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        problem = self.problem()
        if problem:
            raise SpaceError(problem)

    def problem(self) -> str | None:
        """Why this config is invalid (one line), or ``None`` when it is valid."""
        if len(self.edges) != 6:
            return f"edges: expected 6 operations (one per cell edge), got {len(self.edges)}"
        for i, op in enumerate(self.edges):
            if not isinstance(op, str) or op not in _OP_INDEX:
                return f"edges[{i}]: unknown operation {op!r} (expected one of {', '.join(OPS)})"
        if self.precision not in PRECISIONS:
            return f"precision: unknown value {self.precision!r} (expected one of {', '.join(PRECISIONS)})"
        if self.input_size < 4 or self.input_size % 4:
            return f"input_size: {self.input_size} must be a positive multiple of 4 for the nb201 family"
        if self.batch < 1:
            return f"batch: {self.batch!r} must be >= 1"
        if self.classes < 1:
            return f"classes: {self.classes!r} must be >= 1"
        # the limits every family shares: absurd values refused here, as the ResNets do
        return run_limits_problem(self.input_size, self.batch, self.classes)

    @property
    def codes(self) -> tuple[int, ...]:
        """Index into :data:`OPS` of each edge's operation."""
        return tuple(_OP_INDEX[op] for op in self.edges)

    @property
    def arch_str(self) -> str:
        """NAS-Bench-201's string of the cell."""
        return arch_str(self.edges)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict: ``family`` (``"nb201"``) and the parameters (``edges`` as a list)."""
        return {
            "family": FAMILY,
            "edges": list(self.edges),
            "input_size": self.input_size,
            "classes": self.classes,
            "batch": self.batch,
            "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "NB201Config":
        """A config from a mapping of its parameters (``family``, if present, must be ``"nb201"``).

        Raises:
            ~carb.families.space.SpaceError: an unknown key.
        """
        d = own_parameters(d, FAMILY, PARAMETERS, required=("edges",))
        return cls(**d)

    def canonical(self) -> str:
        """Canonical JSON text of the config (sorted keys, no spaces); its hash is the id."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical`.

        The ``family`` key keeps it apart from every other family's ids.
        """
        return stable_id(self.canonical())

    @property
    def arch_key(self) -> tuple:
        """The parameters that define the network's shapes (not batch or precision)."""
        return (self.edges, self.input_size, self.classes)

    def label(self) -> str:
        """Short label: edge op codes (0..4, :data:`OPS` order), size, classes, batch, precision.

        For example ``nb201-412313-i32-c10-b1-fp32``.
        """
        return (
            f"nb201-{''.join(map(str, self.codes))}-i{self.input_size}-c{self.classes}-b{self.batch}-{self.precision}"
        )


def edge_codes(df: pd.DataFrame) -> np.ndarray:
    """Operation index (into :data:`OPS`) of each edge, shape (n, 6), int64, from the columns ``edge_0`` ..

    ``edge_5`` (operation names).

    Raises:
        ValueError: a missing column or an unknown operation (one line).
    """
    cols = []
    for c in EDGE_COLUMNS:
        if c not in df.columns:
            raise ValueError(f"missing column {c} (need {EDGE_COLUMNS[0]} .. {EDGE_COLUMNS[-1]})")
        values = np.asarray(df[c], dtype=object)
        codes = _OPS_INDEX.get_indexer(values)
        if (codes < 0).any():
            raise ValueError(f"{c}: unknown operation {values[codes < 0][0]!r} (expected one of {', '.join(OPS)})")
        cols.append(codes)
    return np.stack(cols, axis=1).astype(np.int64) if cols else np.zeros((len(df), 6), np.int64)


def to_frame(configs: NB201Config | Iterable[NB201Config]) -> pd.DataFrame:
    """The parameter table of configs: ``config_id``, ``family``, ``edge_0`` ..

    ``edge_5``, ``input_size``, ``classes``, ``batch``, ``precision``.
    """
    cs = [configs] if isinstance(configs, NB201Config) else list(configs)
    bad = next((c for c in cs if not isinstance(c, NB201Config)), None)
    if bad is not None:
        raise TypeError(f"nb201: expected NB201Configs, got a {type(bad).__name__}")
    out: dict[str, Any] = {"config_id": [c.config_id for c in cs], "family": [FAMILY] * len(cs)}
    for k, col in enumerate(EDGE_COLUMNS):
        out[col] = [c.edges[k] for c in cs]
    for name in ("input_size", "classes", "batch"):
        out[name] = np.array([getattr(c, name) for c in cs], dtype=np.int64)
    out["precision"] = [c.precision for c in cs]
    return pd.DataFrame(out)


# --- the network ---------------------------------------------------------------------


def __getattr__(name: str) -> Any:
    # carb.families.nb201.NB201Net, .Cell, ...: the module classes, torch imported on use
    if name in ("NB201Net", "Cell", "ReductionBlock", "ReLUConvBN"):
        from . import _nb201_nets

        return getattr(_nb201_nets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build(config: NB201Config | Mapping[str, Any]) -> "nn.Module":
    """The network of a config, in eval mode, with fp32 weights.

    Feed inputs of shape ``(batch, 3, input_size, input_size)``; the output (logits) has shape ``(batch, classes)``.
    Cast it yourself for other precisions; built on torch's current default device (``with torch.device("meta")``
    allocates nothing).

    Initialisation: He normal (fan_out) for convolutions, BN at identity (the family
    record's shared :func:`~carb.families._base.init_weights`); the classifier keeps
    PyTorch's default.

    Raises:
        carb.families.space.SpaceError: (a ``ValueError``, one line) the config is invalid.
    """
    from ._nb201_nets import NB201Net  # torch is imported here, on use

    cfg = config if isinstance(config, NB201Config) else NB201Config.from_dict(config)
    model = NB201Net(cfg.edges, cfg.classes)
    init_weights(model)
    return model.eval()


# --- closed-form features ------------------------------------------------------------

#: Cell edges per operation (``n_<op>``, 0..6; the same cell is in all 15 places).
OP_COUNT_COLUMNS: list[str] = [f"n_{op}" for op in OPS]

#: The numeric columns :func:`features` adds, in order. Units and meanings are those of
#: :mod:`carb.families.features` (figures for one forward of the whole batch unless the name says
#: per image; "activation": a tensor the forward produces, not the input or weights):
#:
#: - ``bytes_per_element`` (B), ``flops`` (FLOP: 2 x multiply-accumulates of convolutions
#:   and the classifier, as FlopCounterMode counts; pooling, BN, additions count 0),
#:   ``flops_per_image``, ``params`` (count: conv weights, BN weight and bias, classifier
#:   weight and bias), ``weight_bytes``, ``model_bytes`` (B: parameters, BN running
#:   statistics and each BN's 8-byte ``num_batches_tracked``), ``input_bytes``,
#:   ``output_bytes`` (B);
#: - ``activation_bytes`` (B: outputs of every operator: ReLUs, convolutions, BNs, pools,
#:   node sums, zero nodes, in-place ReLU), ``peak_activation_bytes`` (B: largest input +
#:   output of an allocating operator), ``live_activation_bytes`` (B: peak of the
#:   activations alive at once in an eager forward under ``torch.inference_mode()``,
#:   the input batch not counted), ``largest_activation_bytes`` (B);
#: - ``n_conv``, ``n_bn``, ``n_linear``, ``n_layers`` (``n_conv + n_linear``), ``n_ops``
#:   (operator calls), ``n_stages`` (3), ``n_blocks`` (17: 15 cells + 2 reduction
#:   blocks), ``n_projections`` (2: the reductions' 1x1 shortcut convolutions),
#:   ``n_residual`` (2: the reductions' additions) (counts);
#: - ``min_channels``, ``max_channels`` (of any convolution's output), ``final_channels``
#:   (64, entering the classifier) (channels); ``stem_output_size``,
#:   ``final_feature_size`` (px);
#: - ``n_none`` .. ``n_avg_pool_3x3`` (cell edges per op), ``n_zero_nodes`` (cell nodes
#:   whose incoming edges are all ``none``), ``n_node_adds`` (additions per cell);
#: - ``arithmetic_intensity`` (FLOP/B), ``conv1x1_flop_fraction``,
#:   ``depthwise_flop_fraction`` (0: no depthwise convolution in this space).
FEATURE_COLUMNS: list[str] = [
    *SIZE_COLUMNS,
    *COUNT_COLUMNS,
    "n_residual",
    *SHAPE_COLUMNS,
    *OP_COUNT_COLUMNS,
    "n_zero_nodes",
    "n_node_adds",
    "arithmetic_intensity",
    "conv1x1_flop_fraction",
    "depthwise_flop_fraction",
]
_FLOAT_COLUMNS = ("arithmetic_intensity", "conv1x1_flop_fraction", "depthwise_flop_fraction")


def _run_values(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each row's input size, batch, classes and bytes per element, checked against the limits."""
    where = "nb201.features"
    size = int_values(df, "input_size", 32, where)
    batch = int_values(df, "batch", 1, where)
    classes = int_values(df, "classes", 10, where)
    checks = (
        (
            "input_size",
            size,
            (size >= 4) & (size % 4 == 0) & (size <= MAX_INPUT_SIZE),
            f"must be a positive multiple of 4 and <= {MAX_INPUT_SIZE:,}",
        ),
        ("batch", batch, (batch >= 1) & (batch <= MAX_BATCH), f"must be >= 1 and <= {MAX_BATCH:,}"),
        ("classes", classes, (classes >= 1) & (classes <= MAX_CLASSES), f"must be >= 1 and <= {MAX_CLASSES:,}"),
    )
    for name, v, ok, why in checks:
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise ValueError(f"{where}: row {i}: {name}: {v[i]} {why}")
    return size, batch, classes, precision_bytes(df, where)


def _per_net_columns(nets: np.ndarray, t: dict[str, np.ndarray]) -> PerNetColumns:
    """The integer feature columns per distinct network, from its figures ``t`` (see :data:`PerNetColumns`)."""
    g = len(nets)
    op_counts = (nets[:, :6, None] == np.arange(len(OPS))).sum(axis=1) if g else np.zeros((0, len(OPS)), np.int64)
    ones = np.ones(g, np.int64)
    return {
        "bytes_per_element": (ones, False, True),
        "flops": (t["flops"], True, False),
        "flops_per_image": (t["flops"], False, False),
        "params": (t["params"], False, False),
        "weight_bytes": (t["params"], False, True),
        "model_bytes": (t["params"] + 2 * t["bn_channels"], False, True),
        "input_bytes": (3 * nets[:, 6] ** 2, True, True),
        "output_bytes": (nets[:, 7].copy(), True, True),
        "activation_bytes": (t["activation"], True, True),
        "peak_activation_bytes": (t["peak_io"], True, True),
        "live_activation_bytes": (t["live"], True, True),
        "largest_activation_bytes": (t["largest"], True, True),
        "n_conv": (t["n_conv"], False, False),
        "n_bn": (t["n_bn"], False, False),
        "n_linear": (ones, False, False),
        "n_layers": (t["n_conv"] + 1, False, False),
        "n_ops": (t["n_ops"], False, False),
        "n_stages": (3 * ones, False, False),
        "n_blocks": ((3 * CELLS_PER_STAGE + 2) * ones, False, False),
        "n_projections": (2 * ones, False, False),
        "n_residual": (2 * ones, False, False),
        "min_channels": (STEM_CHANNELS * ones, False, False),
        "max_channels": (t["max_channels"], False, False),
        "final_channels": (STAGE_CHANNELS[-1] * ones, False, False),
        "stem_output_size": (nets[:, 6].copy(), False, False),
        "final_feature_size": (t["final_side"], False, False),
        **{c: (op_counts[:, j].astype(np.int64), False, False) for j, c in enumerate(OP_COUNT_COLUMNS)},
        "n_zero_nodes": (t["zero_nodes"], False, False),
        "n_node_adds": (t["node_adds"], False, False),
    }


def features(configs: NB201Config | Iterable[NB201Config] | pd.DataFrame) -> pd.DataFrame:
    """Closed-form static features of NAS-Bench-201 configs, vectorized: :data:`FEATURE_COLUMNS`.

    Each distinct network (edges, input size, classes) is counted once, by a walk over
    the forward whose values are numpy arrays over all networks at once; batch and
    precision then scale its per-image figures for every row. No torch module is built.
    Where a huge batch (up to ``MAX_BATCH``) would overflow int64, the integer columns
    are float64 for the whole table.

    Args:
        configs: :class:`NB201Config` (one or many: the result starts with :func:`to_frame`'s
            columns), or a DataFrame with ``edge_0`` .. ``edge_5`` (operation names) and
            optionally ``input_size`` (default 32), ``classes`` (10), ``batch`` (1),
            ``precision`` (``fp32``): the result is a copy with the feature columns added
            (recomputed if present), index kept.

    Returns:
        The table with the :data:`FEATURE_COLUMNS` appended.

    Raises:
        ValueError: a missing edge column or an invalid value (one line naming the row and
            column).
    """
    df = configs if isinstance(configs, pd.DataFrame) else to_frame(configs)
    try:
        codes = edge_codes(df)
    except ValueError as e:
        raise ValueError(f"nb201.features: {e}") from None
    df = df.drop(columns=[c for c in FEATURE_COLUMNS if c in df.columns])
    size, batch, classes, bpe = _run_values(df)
    nets, group = distinct_networks(codes, size, classes)
    t = _network_figures(nets)
    per_net = _per_net_columns(nets, t)
    assert list(per_net) == [c for c in FEATURE_COLUMNS if c not in _FLOAT_COLUMNS]
    feats = per_row_features(per_net, group, batch, bpe, t["n_bn"], df.index)
    feats["conv1x1_flop_fraction"] = flop_fraction(t["flops_1x1"], t["flops"], group)
    feats["depthwise_flop_fraction"] = 0.0
    return pd.concat([df, feats[FEATURE_COLUMNS]], axis=1)


# --- the family record ---------------------------------------------------------------


def _from_row(row: Mapping[str, Any]) -> NB201Config:
    d = {k: v for k, v in row.items() if not missing(v)}
    if "edges" not in d:  # a table row (edge_0 .. edge_5, or NAS-Bench-201's arch_str)
        if all(c in d for c in EDGE_COLUMNS):
            d["edges"] = [str(d[c]) for c in EDGE_COLUMNS]
        elif "arch_str" in d:
            d["edges"] = parse_arch_str(d["arch_str"])
        else:
            absent = next(c for c in EDGE_COLUMNS if c not in d)
            raise SpaceError(
                f"nb201: missing column {absent} (needs {EDGE_COLUMNS[0]} .. {EDGE_COLUMNS[-1]}, arch_str or edges)"
            )
    return NB201Config.from_dict({k: d[k] for k in PARAMETERS if k in d})


def _to_row(config: NB201Config) -> dict[str, Any]:
    row: dict[str, Any] = {"family": FAMILY}
    row.update(zip(EDGE_COLUMNS, config.edges))
    row.update(input_size=config.input_size, classes=config.classes, batch=config.batch, precision=config.precision)
    return row


NB201 = Family(
    name=FAMILY,
    config_type=NB201Config,
    from_row=_from_row,
    to_row=_to_row,
    build=build,
    features=lambda df: features(df),
    description="NAS-Bench-201: 6 cell edges x 5 operations, 15,625 cells in a fixed 3-stage skeleton",
    parameters=(*EDGE_COLUMNS, "input_size", "classes", "batch", "precision"),
)
