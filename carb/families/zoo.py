"""A zoo of real CNN designs in plain PyTorch (no torchvision).

For evaluating :mod:`carb.netmodel` on networks it never saw.

Ten families, each a published design written from its paper's tables and scaled by a
width multiplier, a depth multiplier, a kernel choice where the design has one, at any
input size and batch (ImageNet-style stems and heads, 1000 classes by default):

========================  ====================================================================
``vgg``                   VGG-11/13/16 with BN (depth 11, 13, 16), 3x3 convs, max pools,
                          global average pool + one linear classifier (no 4096-wide FCs)
``mobilenetv2``           MobileNetV2 inverted residuals (ReLU6), depthwise kernel 3 or 5
``mobilenetv3``           MobileNetV3-Large blocks (SE, hard-swish), kernels as published or all 3/5
``shufflenetv2``          ShuffleNetV2 units (channel split, shuffle, concat), 0.5x..2.0x
``mnasnet``               MnasNet-B1 (MBConv, 3x3/5x5 as published, no SE)
``efficientnet``          EfficientNet-B0 MBConv with SE and SiLU (compound width/depth)
``regnet``                RegNetX / RegNetY (SE) stages of grouped bottlenecks, group width 8..48
``densenet``              DenseNet-BC dense blocks (BN-ReLU-conv1x1-BN-ReLU-conv3x3, concat)
``resnext``               ResNeXt bottlenecks (32 groups x 4d), depths 26/38/50
``wideresnet``            Wide-ResNet bottlenecks (groups 1, 2x mid width), same depths
========================  ====================================================================

``resnext`` and ``wideresnet`` of equal depth have the same stage layout, blocks and
output widths; the 3x3 convolutions are grouped (32 groups, ResNeXt's 32x4d) in one and
dense at twice the base width in the other (Wide-ResNet-50-2's), the pair nn-Meter prices
identically because it ignores ``groups``.

A :class:`ZooConfig` is a family member and how it is run; :data:`ZOO` is its
:class:`carb.families.Family` record, a built-in family (:mod:`carb.families` registers it),
so that ``run_campaign`` and the store handle it like any family. The torch modules and one
builder per design live in :mod:`carb.families._zoo_nets`. Features come from
:func:`carb.graph.capture` on the meta device.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from carb.families._base import (
    PRECISIONS,
    Family,
    SpaceError,
    _as_float,
    _as_int,
    _py,
    init_weights,
    row_parameters,
    stable_id,
)
from carb.families.nets import captured_features

__all__ = ["ARCHS", "ZooConfig", "build", "ZOO", "sample_configs", "PARAMETERS"]

FAMILY = "zoo"
ARCHS: tuple[str, ...] = (
    "vgg",
    "mobilenetv2",
    "mobilenetv3",
    "shufflenetv2",
    "mnasnet",
    "efficientnet",
    "regnet",
    "densenet",
    "resnext",
    "wideresnet",
)
PARAMETERS: tuple[str, ...] = ("arch", "width", "depth", "kernel", "input_size", "batch", "precision", "classes")


@dataclass(frozen=True)
class ZooConfig:
    """One zoo network and how it is run.

    Attributes:
        arch: one of :data:`ARCHS`.
        width: channel multiplier (1.0 = the published width).
        depth: depth setting: a multiplier of each stage's repeats (1.0 = published), or the
            layer count for ``vgg`` (11, 13, 16) and ``resnext``/``wideresnet`` (26, 38, 50),
            or the variant (0: X, 1: Y with SE) times 10 plus a multiplier for ``regnet`` —
            see the builders of :mod:`carb.families._zoo_nets`.
        kernel: depthwise kernel (3 or 5) where the design has one; 0 = as published.
        input_size: input height = width. Units: px.
        batch: images per forward.
        precision: ``fp32``, ``fp16`` or ``bf16``.
        classes: classifier outputs.
    """

    arch: str
    width: float = 1.0
    depth: float = 1.0
    kernel: int = 0
    input_size: int = 224
    batch: int = 1
    precision: str = "fp32"
    classes: int = 1000

    def __post_init__(self) -> None:
        """Normalise the fields' types and check the config; raises :class:`SpaceError` when it is invalid."""
        object.__setattr__(self, "arch", _py(self.arch))
        object.__setattr__(self, "width", _as_float("width", self.width))
        object.__setattr__(self, "depth", _as_float("depth", self.depth))
        for name in ("kernel", "input_size", "batch", "classes"):
            object.__setattr__(self, name, _as_int(name, getattr(self, name)))
        if self.arch not in ARCHS:
            raise SpaceError(f"arch: unknown value {self.arch!r} (expected one of {', '.join(ARCHS)})")
        if self.precision not in PRECISIONS:
            raise SpaceError(f"precision: unknown value {self.precision!r}")
        if self.width <= 0 or self.depth <= 0 or self.batch < 1 or self.input_size < 32 or self.classes < 1:
            raise SpaceError("width, depth > 0, batch >= 1, input_size >= 32, classes >= 1")
        if self.kernel not in (0, 3, 5, 7):
            raise SpaceError(f"kernel: {self.kernel} not one of 0, 3, 5, 7")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-serialisable dict: ``family`` (``"zoo"``) and the parameters."""
        return {
            "family": FAMILY,
            "arch": self.arch,
            "width": self.width,
            "depth": self.depth,
            "kernel": self.kernel,
            "input_size": self.input_size,
            "batch": self.batch,
            "precision": self.precision,
            "classes": self.classes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ZooConfig":
        """A config from a mapping of its parameters; raises :class:`SpaceError` on an unknown key or family."""
        d = dict(d)
        if d.pop("family", FAMILY) != FAMILY:
            raise SpaceError("family: not zoo")
        unknown = set(d) - set(PARAMETERS)
        if unknown:
            raise SpaceError(f"unknown parameter {sorted(unknown)[0]!r} (known: {', '.join(PARAMETERS)})")
        return cls(**d)

    def canonical(self) -> str:
        """Canonical JSON text of :meth:`to_dict` (sorted keys, no spaces)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @property
    def config_id(self) -> str:
        """Stable 16-hex-digit id: SHA-256 of :meth:`canonical`."""
        return stable_id(self.canonical())

    def label(self) -> str:
        """Short label: design, width, depth, kernel, input size, batch and precision."""
        return (
            f"{self.arch}-w{self.width:g}-d{self.depth:g}-k{self.kernel}-i{self.input_size}-b{self.batch}"
            f"-{self.precision}"
        )


def build(config: ZooConfig | Mapping[str, Any]) -> Any:
    """The network of a zoo config (eval mode, fp32 weights, torch's default device).

    Raises:
        carb.families.space.SpaceError: the config is invalid (one line).
    """
    from ._zoo_nets import build_network  # torch is imported here, on use

    cfg = config if isinstance(config, ZooConfig) else ZooConfig.from_dict(config)
    net = build_network(cfg.arch, cfg.width, cfg.depth, cfg.kernel, cfg.classes)
    init_weights(net)
    return net.eval()


#: Per-family grids :func:`sample_configs` draws from: width, depth and kernel values.
GRIDS: dict[str, dict[str, tuple]] = {
    "vgg": {"width": (0.25, 0.375, 0.5), "depth": (11, 13, 16), "kernel": (0,)},
    "mobilenetv2": {"width": (0.5, 0.75, 1.0, 1.4), "depth": (0.7, 1.0, 1.3), "kernel": (3, 5)},
    "mobilenetv3": {"width": (0.5, 0.75, 1.0, 1.25), "depth": (1.0, 2.0), "kernel": (0, 3, 5)},
    "shufflenetv2": {"width": (0.5, 1.0, 1.5, 2.0), "depth": (0.5, 1.0), "kernel": (3, 5)},
    "mnasnet": {"width": (0.5, 0.75, 1.0, 1.3), "depth": (0.7, 1.0, 1.3), "kernel": (0, 3)},
    "efficientnet": {"width": (0.5, 0.75, 1.0, 1.2), "depth": (0.7, 1.0, 1.4), "kernel": (0, 3)},
    "regnet": {"width": (0.5, 0.75, 1.0, 1.5), "depth": (0.5, 1.0, 10.5, 11.0), "kernel": (0,)},
    "densenet": {"width": (0.375, 0.5, 0.75), "depth": (0.34, 0.5, 0.67), "kernel": (0,)},
    "resnext": {"width": (0.25, 0.5, 0.75), "depth": (26, 38, 50), "kernel": (0,)},
    "wideresnet": {"width": (0.25, 0.5, 0.75), "depth": (26, 38, 50), "kernel": (0,)},
}
SIZES = (96, 128, 160, 192, 224)
BATCHES = (1, 2, 4)


def sample_configs(
    per_family: int = 10, seed: int = 0, max_gflops: float = 3.0, archs: Iterable[str] = ARCHS
) -> list[ZooConfig]:
    """``per_family`` distinct configs of each family, drawn at random (seeded).

    Drawn from its :data:`GRIDS` x :data:`SIZES` x :data:`BATCHES`, keeping those under ``max_gflops`` GFLOP per
    forward (so a forward takes well under a second on one core). ``resnext`` and ``wideresnet`` get the same (width,
    depth, size, batch) draws, pairwise.
    """
    rng = np.random.default_rng(seed)
    out: list[ZooConfig] = []
    pairs: list[tuple] = []
    for a in archs:
        g = GRIDS[a]
        got: list[ZooConfig] = []
        tries = 0
        while len(got) < per_family and tries < 400:
            tries += 1
            budget = max_gflops
            if a == "wideresnet" and pairs:
                if tries > len(pairs):
                    break
                w, dd, kk, s, b = pairs[tries - 1]
                budget = 2.5 * max_gflops  # the dense twin of a resnext has ~2.4x its FLOPs
            else:
                w, dd, kk = (g[p][rng.integers(len(g[p]))] for p in ("width", "depth", "kernel"))
                s, b = SIZES[rng.integers(len(SIZES))], BATCHES[rng.integers(len(BATCHES))]
            cfg = ZooConfig(a, float(w), float(dd), int(kk), int(s), int(b))
            if cfg in got:
                continue
            lt = capture(cfg)
            if lt.flops > budget * 1e9:
                continue
            got.append(cfg)
            if a == "resnext":
                pairs.append((w, dd, kk, s, b))
        out += got
    return out


def _meta_build(cfg: ZooConfig) -> Any:
    """The network of ``cfg`` on the meta device, built without running any weight initialisation.

    See :func:`carb.graph.skip_meta_init`: a meta tensor has no values to initialise, and on meta ``normal_`` and
    ``uniform_`` go through slow Python decompositions.
    """
    import torch

    from carb import graph

    with torch.device("meta"), graph.skip_meta_init():
        return graph.gc_paused(build)(cfg)


def capture(cfg: ZooConfig) -> Any:
    """:func:`carb.graph.capture` of a config's network, built on the meta device."""
    from carb import graph

    return graph.capture(_meta_build(cfg), (cfg.batch, 3, cfg.input_size, cfg.input_size), cfg.precision)


def features(df: pd.DataFrame) -> pd.DataFrame:
    """:func:`carb.families.nets.captured_features` of zoo rows."""
    return captured_features(df, _from_row, capture)


def _from_row(row: Mapping[str, Any]) -> ZooConfig:
    # a store row: the ``arch`` column is the family's parameters as JSON, and this
    # family's own ``arch`` parameter is inside it
    return ZooConfig.from_dict(row_parameters(row, PARAMETERS))


ZOO = Family(
    name=FAMILY,
    config_type=ZooConfig,
    from_row=_from_row,
    to_row=lambda c: c.to_dict(),
    build=build,
    features=features,
    description="real CNN designs in plain torch (carb.families.zoo), for evaluation",
    parameters=PARAMETERS,
)
