"""Closed-form static features of configs, for whole tables at once.

:func:`compute` adds the columns below to a table of configs without building a single
torch module: each distinct network (family, block, depth, width, early_downsample,
input_size, classes) is walked once, in Python, through a layer table that mirrors
:mod:`carb.arch` operator by operator; batch and precision then scale those per-image
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
    :mod:`carb.arch` writes its forwards: a block's input stays alive while its branch
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

from functools import lru_cache
from typing import Iterable

import numpy as np
import pandas as pd

from .space import DEFAULT_CLASSES, IMAGENET_LAYERS, PARAMETERS, Config, SpaceError

__all__ = ["compute", "FEATURE_COLUMNS", "ARCH_KEYS", "REQUIRED_COLUMNS", "arch_features"]

#: The parameters that define the network (not batch, not precision).
ARCH_KEYS: tuple[str, ...] = ("family", "block", "depth", "width", "early_downsample", "input_size", "classes")
#: Columns a table must have (``classes`` may be absent or missing: the family's default).
REQUIRED_COLUMNS: tuple[str, ...] = ("family", "block", "depth", "width", "early_downsample",
                                     "input_size", "batch", "precision")
_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}

# per-image, per-architecture quantities, in elements (or counts); see _Walk
_ARCH_FIELDS = ("flops", "params", "bn_channels", "n_bn", "activation", "peak_io", "live",
                "largest", "n_conv", "n_linear", "n_ops", "n_stages", "n_blocks", "n_projections",
                "min_channels", "max_channels", "final_channels", "stem_output_size",
                "final_feature_size", "flops_1x1")
# the _Walk fields that add up over blocks (the others are maxima or set once)
_ADDITIVE = ("flops", "params", "bn_channels", "n_bn", "activation", "n_conv", "n_linear", "n_ops",
             "n_blocks", "n_projections", "flops_1x1")

#: The numeric columns :func:`compute` adds, in order.
FEATURE_COLUMNS: list[str] = [
    "bytes_per_element", "flops", "flops_per_image", "params", "weight_bytes", "model_bytes",
    "input_bytes", "output_bytes", "activation_bytes", "peak_activation_bytes",
    "live_activation_bytes", "largest_activation_bytes",
    "n_conv", "n_bn", "n_linear", "n_layers", "n_ops", "n_stages", "n_blocks", "n_projections",
    "min_channels", "max_channels", "final_channels", "stem_output_size", "final_feature_size",
    "arithmetic_intensity", "conv1x1_flop_fraction",
]
_INT_COLUMNS = FEATURE_COLUMNS[:-2]  # int64; the last two are float64


def _channels(base: int, width: float) -> int:
    # same rule as carb.arch.channels (kept here so that this module never imports torch)
    return max(1, round(base * width))


class _Walk:
    """Walks one network's forward for one image, accumulating counts in elements.

    ``held`` arguments are the activation elements that enclosing frames keep alive (other
    than the block's input); ``live_before`` ones, those alive when an operator starts.
    """

    def __init__(self) -> None:
        self.flops = self.params = self.bn_channels = self.n_bn = 0
        self.activation = self.peak_io = self.live = self.largest = 0
        self.n_conv = self.n_linear = self.n_ops = 0
        self.n_stages = self.n_blocks = self.n_projections = 0
        self.min_channels = 1 << 62
        self.max_channels = 0
        self.final_channels = self.stem_output_size = self.final_feature_size = 0
        self.flops_1x1 = 0

    def _out(self, elems: int, inp: int | None = None, live: int | None = None) -> None:
        """Book an operator's output; ``inp`` for the peak-io figure (allocating ops only),
        ``live`` the live elements while it runs (allocating ops only)."""
        self.activation += elems
        self.n_ops += 1
        self.largest = max(self.largest, elems)
        if inp is not None:
            self.peak_io = max(self.peak_io, inp + elems)
        if live is not None:
            self.live = max(self.live, live)

    def conv(self, cin: int, cout: int, k: int, stride: int, h: int, live_before: int) -> tuple[int, int]:
        """A bias-free k x k convolution, padding k // 2; returns (output side, output elements).
        ``live_before``: live elements when it starts (its input included when counted)."""
        ho = (h - 1) // stride + 1
        out = cout * ho * ho
        flops = 2 * cin * cout * k * k * ho * ho
        self.flops += flops
        if k == 1:
            self.flops_1x1 += flops
        self.params += cin * cout * k * k
        self.n_conv += 1
        self.min_channels = min(self.min_channels, cout)
        self.max_channels = max(self.max_channels, cout)
        self._out(out, inp=cin * h * h, live=live_before + out)
        return ho, out

    def bn(self, c: int, elems: int, live_before: int) -> int:
        self.params += 2 * c
        self.bn_channels += c
        self.n_bn += 1
        self._out(elems, inp=elems, live=live_before + elems)
        return elems

    def inplace(self, elems: int) -> None:  # ReLU or residual addition
        self._out(elems)

    def basic(self, cin: int, planes: int, stride: int, h: int, held: int) -> tuple[int, int, int]:
        """BasicBlock of carb.arch; returns (output channels, output side, output elements)."""
        x = cin * h * h
        ho, a = self.conv(cin, planes, 3, stride, h, held + x)
        self.bn(planes, a, held + x + a)
        self.inplace(a)                                   # relu
        _, a2 = self.conv(planes, planes, 3, 1, ho, held + x + a)
        self.bn(planes, a2, held + x + a2)                # conv1 output freed by out = conv2(out)
        out = self._shortcut(cin, planes, stride, h, held + x + a2, a2)
        self.inplace(a2)                                  # out += identity
        self.inplace(a2)                                  # relu
        self.n_blocks += 1
        return planes, ho, out

    def bottleneck(self, cin: int, planes: int, stride: int, h: int, held: int) -> tuple[int, int, int]:
        """Bottleneck of carb.arch (stride on the 3x3); returns (channels, side, elements)."""
        x = cin * h * h
        cout = 4 * planes
        _, p1 = self.conv(cin, planes, 1, 1, h, held + x)
        self.bn(planes, p1, held + x + p1)
        self.inplace(p1)
        ho, p2 = self.conv(planes, planes, 3, stride, h, held + x + p1)
        self.bn(planes, p2, held + x + p2)
        self.inplace(p2)
        _, o = self.conv(planes, cout, 1, 1, ho, held + x + p2)
        self.bn(cout, o, held + x + o)
        out = self._shortcut(cin, cout, stride, h, held + x + o, o)
        self.inplace(o)
        self.inplace(o)
        self.n_blocks += 1
        return cout, ho, out

    def _shortcut(self, cin: int, cout: int, stride: int, h: int, live: int, out: int) -> int:
        # identity, or 1x1 conv + BN on the block input while the branch's output is alive
        if stride == 1 and cin == cout:
            return out
        self.n_projections += 1
        _, d = self.conv(cin, cout, 1, stride, h, live)
        self.bn(cout, d, live + d)
        return out

    def stage(self, block: str, cin: int, planes: int, n: int, stride: int, h: int) -> tuple[int, int, int]:
        """``n`` blocks; the stage's input stays alive for the whole stage (held by the caller)."""
        step = self.basic if block == "basic" else self.bottleneck
        x0 = cin * h * h
        c, side, elems = step(cin, planes, stride, h, 0)
        if n > 1:
            # blocks 2..n are identical (same shapes, same stage input held): walk one and
            # add the others' sums; maxima (peaks, channels) do not change
            before = [getattr(self, f) for f in _ADDITIVE]
            c, side, elems = step(c, planes, 1, side, x0)
            for f, b in zip(_ADDITIVE, before):
                setattr(self, f, getattr(self, f) + (n - 2) * (getattr(self, f) - b))
        self.n_stages += 1
        return c, side, elems

    def head(self, c: int, h: int, classes: int) -> None:
        x = c * h * h
        self._out(c, inp=x, live=x + c)                        # global average pooling
        self.flops += 2 * c * classes
        self.params += c * classes + classes
        self.n_linear += 1
        self._out(classes, inp=c, live=c + classes)            # linear (flatten is a view)
        self.final_channels = c
        self.final_feature_size = h


@lru_cache(maxsize=4096)
def arch_features(family: str, block: str, depth: int, width: float, early_downsample: bool,
                  input_size: int, classes: int) -> tuple[int, ...]:
    """Per-image figures of one network, in the order of ``_ARCH_FIELDS`` (elements, counts).

    Assumes a valid config (see :meth:`carb.space.Config.problem`).
    """
    w = _Walk()
    h = input_size
    if family == "cifar":
        per = 6 if block == "basic" else 9
        n = (depth - 2) // per
        c = _channels(16, width)
        h, s = w.conv(3, c, 3, 2 if early_downsample else 1, h, 0)
        w.bn(c, s, s)
        w.inplace(s)
        plan = [(_channels(16, width), n, 1), (_channels(32, width), n, 2), (_channels(64, width), n, 2)]
    else:
        block, counts = IMAGENET_LAYERS[depth]
        c = _channels(64, width)
        h, s = w.conv(3, c, 7, 2, h, 0)
        w.bn(c, s, s)
        w.inplace(s)
        h = (h - 1) // 2 + 1                                      # max-pool 3x3/2, padding 1
        m = c * h * h
        w._out(m, inp=s, live=s + m)
        plan = [(_channels(b, width), k, 1 if i == 0 else 2)
                for i, (b, k) in enumerate(zip((64, 128, 256, 512), counts))]
    w.stem_output_size = h
    for planes, n, stride in plan:
        c, h, _ = w.stage(block, c, planes, n, stride, h)
    w.head(c, h, classes)
    return tuple(int(getattr(w, f)) for f in _ARCH_FIELDS)


def _as_frame(configs: pd.DataFrame | Config | Iterable[Config]) -> pd.DataFrame:
    if isinstance(configs, pd.DataFrame):
        return configs  # never modified: compute returns a new frame
    if isinstance(configs, Config):
        configs = [configs]
    cs = list(configs)
    others = [c for c in cs if not isinstance(c, Config)]
    if not others:
        df = pd.DataFrame([c.to_dict() for c in cs], columns=list(PARAMETERS))
        df.insert(0, "config_id", [c.config_id for c in cs])
        return df
    from carb import families

    try:
        rows = [families.to_row(c) for c in cs]
    except SpaceError:
        bad = next(c for c in others if not hasattr(c, "config_id"))
        raise TypeError(f"features.compute: expected a DataFrame or Configs, got a {type(bad).__name__}") from None
    df = pd.DataFrame(rows)
    df.insert(0, "config_id", [c.config_id for c in cs])
    return df


def _compute_families(df: pd.DataFrame, other: np.ndarray) -> pd.DataFrame:
    """:func:`compute` of a table with rows of other families: each family's rows by its
    own ``features`` (:mod:`carb.families`), in the table's row order."""
    from carb import families

    pos = np.arange(len(df))
    parts = []
    if (~other).any():
        parts.append(compute(df[~other]).assign(_row=pos[~other]))
    fam = df["family"].to_numpy()
    for name in pd.unique(fam[other]):
        rows = fam == name
        parts.append(families.get(name).features(df[rows]).assign(_row=pos[rows]))
    out = pd.concat(parts).sort_values("_row")
    out.index = df.index
    return out.drop(columns="_row")


def compute(configs: pd.DataFrame | Config | Iterable[Config]) -> pd.DataFrame:
    """A copy of the configs table with the feature columns :data:`FEATURE_COLUMNS` added.

    Closed form, vectorized: each distinct network is walked once, then batch and precision
    scale its figures per row with numpy. See the module docstring for every column and
    its unit (FLOP, B, count, channels, px).

    Args:
        configs: a DataFrame with the columns :data:`REQUIRED_COLUMNS` (others are kept;
            ``classes`` may be absent or missing, meaning the family's default), or a
            list of :class:`~carb.space.Config` (the result then starts with ``config_id``
            and the parameter columns, as :meth:`carb.space.Space.to_frame`).

    Raises:
        ValueError: a required column is missing, or a row is not a valid config (the
            message names the column or the first bad row).
    """
    df = _as_frame(configs)
    if "family" in df.columns and not df["family"].isin(("cifar", "imagenet")).all():
        from carb import families

        # rows of the other registered families; unknown names fall through to the errors below
        other = df["family"].isin([n for n in families.names() if n not in ("cifar", "imagenet")]).to_numpy()
        if other.any():
            return _compute_families(df, other)
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"features.compute: missing column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (required: {', '.join(REQUIRED_COLUMNS)})")
    clash = [c for c in FEATURE_COLUMNS if c in df.columns]
    if clash:
        df = df.drop(columns=clash)  # recompute rather than keep stale figures
    n = len(df)

    # precision -> bytes per element, vectorized over the few distinct values
    pcodes, puniq = pd.factorize(df["precision"], use_na_sentinel=True)
    pbytes = np.array([_BYTES.get(p, 0) if isinstance(p, str) else 0 for p in puniq], dtype=np.int64)
    bpe = pbytes[pcodes] if len(puniq) else np.zeros(n, dtype=np.int64)
    if n and ((pcodes < 0).any() or (bpe == 0).any()):
        i = int(np.flatnonzero((pcodes < 0) | (bpe == 0))[0])
        raise ValueError(f"features.compute: row {i}: precision: unknown value {df['precision'].iloc[i]!r} "
                         f"(expected one of {', '.join(_BYTES)})")
    batch = _int_column(df, "batch")
    if n and (batch < 1).any():
        i = int(np.flatnonzero(batch < 1)[0])
        raise ValueError(f"features.compute: row {i}: batch: {batch[i]} must be >= 1")

    # distinct networks: factorize each key column, combine the codes, factorize again
    if "classes" in df.columns:
        classes = df["classes"]
        if classes.isna().any():
            classes = classes.fillna(df["family"].map(DEFAULT_CLASSES))
    else:
        classes = df["family"].map(DEFAULT_CLASSES)
    cols = {k: (classes if k == "classes" else df[k]) for k in ARCH_KEYS}
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
    ngroups = int(group.max()) + 1 if n else 0
    # factorize numbers networks by first appearance: a row starts a network when its
    # code exceeds every earlier code
    first = np.flatnonzero(np.r_[True, group[1:] > np.maximum.accumulate(group)[:-1]]) if n else group

    table = np.empty((ngroups, len(_ARCH_FIELDS)), dtype=np.int64)
    key_values = {k: cols[k].iloc[first].to_numpy() for k in ARCH_KEYS}
    for g in range(ngroups):
        raw = {k: key_values[k][g] for k in ARCH_KEYS}
        try:
            cfg = Config.from_dict(raw)
        except SpaceError as e:
            raise ValueError(f"features.compute: row {int(first[g])}: {e}") from None
        table[g] = arch_features(*cfg.arch_key)

    # per network, then one gather to the rows and in-place scaling by batch and precision
    a = {f: table[:, k] for k, f in enumerate(_ARCH_FIELDS)}
    cls = np.asarray([int(v) for v in key_values["classes"]], dtype=np.int64)
    side = np.asarray([int(v) for v in key_values["input_size"]], dtype=np.int64)
    per_net = {  # column: (value per network, scaled by batch?, scaled by bytes per element?)
        "bytes_per_element": (np.ones(ngroups, np.int64), False, True),
        "flops": (a["flops"], True, False),
        "flops_per_image": (a["flops"], False, False),
        "params": (a["params"], False, False),
        "weight_bytes": (a["params"], False, True),
        "model_bytes": (a["params"] + 2 * a["bn_channels"], False, True),  # + 8 B per BN below
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
    assert list(per_net) == _INT_COLUMNS
    rows = np.stack([v for v, _, _ in per_net.values()], axis=1)[group] if ngroups else \
        np.zeros((0, len(_INT_COLUMNS)), np.int64)
    for k, (_, by_batch, by_bpe) in enumerate(per_net.values()):
        if by_batch:
            rows[:, k] *= batch
        if by_bpe:
            rows[:, k] *= bpe
    rows[:, _INT_COLUMNS.index("model_bytes")] += 8 * a["n_bn"][group]
    col = {c: rows[:, k] for k, c in enumerate(_INT_COLUMNS)}
    with np.errstate(invalid="ignore", divide="ignore"):
        intensity = col["flops"] / (col["weight_bytes"] + col["activation_bytes"]).astype(np.float64)
        frac_1x1 = (a["flops_1x1"] / a["flops"].astype(np.float64))[group]
    feats = pd.DataFrame(rows, columns=_INT_COLUMNS, index=df.index, copy=False)
    feats["arithmetic_intensity"] = intensity
    feats["conv1x1_flop_fraction"] = frac_1x1
    return pd.concat([df, feats], axis=1)


def _int_column(df: pd.DataFrame, name: str) -> np.ndarray:
    col = df[name]
    try:
        values = col.to_numpy(dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"features.compute: {name}: not numeric") from None
    if np.isnan(values).any() or (values != np.round(values)).any():
        i = int(np.flatnonzero(np.isnan(values) | (values != np.round(values)))[0])
        raise ValueError(f"features.compute: row {i}: {name}: {col.iloc[i]!r} is not an integer")
    return values.astype(np.int64)
