"""The configs of the video-layer campaign: 3-D convolutions and pools at the sizes video networks run them.

    python experiments/ops_campaign/video_configs.py --base layers-cpu-epyc512-1t \
        --groups conv3d_cubic conv3d_factored conv3d_depthwise pool3d_video --out campaigns/video-amd512.parquet
    python experiments/ops_campaign/video_configs.py --base layers-cpu-epyc512-1t \
        --groups conv3d_stem --out campaigns/video-stem-amd512.parquet

The op campaign's 3-D grids (``carb.families.layers.NEW_OP_GRIDS``) stay within the layers
space's budget (1.5 GFLOP, 8 M elements): a video network's early layers lie beyond it (a
3x3x3 convolution of 3 or 8 channels over 8 frames of 112x112 runs its vol2col buffers at
tens of MB), and its late layers (256-512 channels) too. This draws, space-filling (the same
greedy farthest-point spread as the op campaign) and at random (the grids' bulk), from the layer shapes of C3D, R3D,
R(2+1)D, X3D and I3D-style networks up to ``--max-gflops`` and ``--max-elements``:

- cubic 3x3x3 convolutions, 3-512 channels, 2-16 frames, 7-112 pixels, stride 1 and 2;
- R(2+1)D's factored kernels (1x3x3 spatial, 3x1x1 temporal) and 1x1x1 pointwise ones;
- X3D's depthwise 3x3x3 convolutions (``groups = 0``: one group per channel);
- 3-D max and average pools: 1x2x2 (C3D's first), 2x2x2, 3x3x3 stride 2 (R3D's stem), ceil mode;
- the stems' and early stages' few-channel 3x3x3 convolutions at 28-112 pixels (3-32 channels in,
  8-64 out), where the kernels take another path than the wide layers' (a second campaign: the
  first one's random spread drew few of them and the layer model priced them 2-3x too cheap);

and ``--bridge`` convolutions of the ``--base`` network model's own layer dataset, measured again
in the same campaign: ``scripts/ship.py netmodel --bridge`` scales this campaign to the first's
speed by them (it needs 10 at least).
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb.families import layers as L  # noqa: E402
from carb.families.space import SpaceError  # noqa: E402

_B = [1, 2]
#: Video networks' layer shapes, per group (each a list of grids, as ``NEW_OP_GRIDS``).
VIDEO_GRIDS: dict[str, list[dict[str, list]]] = {
    "conv3d_cubic": [
        {
            "op": ["conv3d"],
            "cin": [3, 8, 16, 32, 64, 128, 256, 512],
            "cout": [8, 16, 32, 64, 128, 256, 512],
            "input_size": [7, 14, 28, 56, 112],
            "frames": [2, 4, 8, 16],
            "kernel": [3],
            "stride": [1, 2],
            "batch": _B,
        }
    ],
    "conv3d_factored": [
        {
            "op": ["conv3d"],
            "cin": [3, 16, 45, 64, 144, 256, 576],
            "cout": [16, 45, 64, 144, 256, 576],
            "input_size": [7, 14, 28, 56, 112],
            "frames": [2, 4, 8, 16],
            "kernel": [1, 3],
            "kernel_d": [1, 3],
            "stride": [1, 2],
            "batch": _B,
        }
    ],
    "conv3d_depthwise": [
        {
            "op": ["conv3d"],
            "cin": [24, 48, 54, 108, 216, 432],
            "cout": [24, 48, 54, 108, 216, 432],
            "groups": [0],
            "input_size": [7, 14, 28, 56, 112],
            "frames": [4, 8, 16],
            "kernel": [3, 5],
            "stride": [1, 2],
            "batch": _B,
        }
    ],
    "pool3d_video": [
        {
            "op": ["maxpool3d", "avgpool3d"],
            "cin": [8, 16, 32, 64, 128, 256],
            "input_size": [14, 28, 56, 112],
            "frames": [2, 4, 8, 16],
            "kernel": [2, 3],
            "kernel_d": [0, 1],
            "stride": [2],
            "ceil_mode": [0, 1],
            "batch": _B,
        }
    ],
    "conv3d_stem": [
        {
            "op": ["conv3d"],
            "cin": [3, 8, 16, 24, 32],
            "cout": [8, 16, 24, 32, 64],
            "input_size": [28, 56, 112],
            "frames": [4, 8, 16],
            "kernel": [3],
            "stride": [1, 2],
            "batch": _B,
        }
    ],
}
#: Per group: layers spread space-filling (the grid's corners and between), and layers drawn at random (its bulk).
COUNTS = {
    "conv3d_cubic": (24, 24),
    "conv3d_factored": (10, 10),
    "conv3d_depthwise": (8, 6),
    "pool3d_video": (10, 10),
    "conv3d_stem": (8, 24),
}


def grid_configs(grids: list[dict[str, list]], max_flops: float, max_elements: float) -> list:
    """Every valid layer config of ``grids`` within the FLOP and element budget (depthwise: ``cin == cout``)."""
    out = []
    for grid in grids:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            d = dict(zip(keys, values))
            if d.get("groups") == 0 and d["cin"] != d["cout"]:
                continue
            try:
                out.append(L.LayerConfig(**d))
            except SpaceError:
                continue
    lf = L.layer_frame(out)
    elements = (lf["in_bytes"] + lf["out_bytes"]).to_numpy(np.float64) / lf["bytes_per_element"].to_numpy(np.float64)
    keep = (lf["flops"].to_numpy(np.float64) <= max_flops) & (elements <= max_elements)
    return list(dict.fromkeys(c for c, k in zip(out, keep) if k))


def main(argv: list[str] | None = None) -> int:
    """Write the campaign's configs (``config_id``, ``family``, the layers family's parameters)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "campaigns" / "video-layers.parquet"))
    ap.add_argument("--base", default="layers-cpu-epyc512-1t", help="the shipped layer dataset the bridge joins")
    ap.add_argument("--bridge", type=int, default=20)
    ap.add_argument("--max-gflops", type=float, default=8.0)
    ap.add_argument("--max-elements", type=float, default=40e6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--groups", nargs="+", choices=list(VIDEO_GRIDS), help="only these groups (default: all)")
    a = ap.parse_args(argv)
    from make_configs import bridge, write

    rng = np.random.default_rng(a.seed)
    cfgs = []
    for group, grids in VIDEO_GRIDS.items():
        cs = grid_configs(grids, a.max_gflops * 1e9, a.max_elements)
        n_spread, n_random = COUNTS[group]
        got = L._spread(cs, min(n_spread, len(cs)), rng, L._new_shape_of)
        rest = [c for c in cs if c not in set(got)]
        got += [rest[i] for i in sorted(rng.choice(len(rest), min(n_random, len(rest)), replace=False))]
        lf = L.layer_frame(got)
        print(f"{group:18s} {len(got):3d} of {len(cs):5d}  GFLOP {lf['flops'].sum() / 1e9:7.1f} in all")
        if not a.groups or group in a.groups:
            cfgs += got
    br = bridge(a.bridge, a.seed, a.base)
    n = write(cfgs, br, Path(a.out), a.seed)
    print(f"{n} configs ({len(cfgs)} new, {len(br)} bridge) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
