"""The configs of the op campaign: the new op kinds of carb.families.layers, a balanced sample, and bridge layers.

    python experiments/ops_campaign/make_configs.py                       # campaigns/layers-ops.parquet
    python experiments/ops_campaign/make_configs.py --per-op 25 --budget-min 12 --bridge 20 --seed 0
    python experiments/ops_campaign/make_configs.py --groups conv1d gru --new-only --seed 1 --base layers-cpu-epyc512-1t

Writes one config per row (``config_id``, ``family``, the layers family's parameters), for
``carb characterize --configs FILE``:

- ``carb.families.layers.new_ops_sample``: per group of ``NEW_OP_GRIDS`` (each new op, and the
  new parameters of earlier ones: dilated convolutions, ceil-mode k3s2 pools), up to
  ``--per-op`` layers spread over its grid; groups whose layers take longest to measure are cut
  first (never below ``--min-per-op``) until the whole campaign's estimate fits ``--budget-min``;
- ``--bridge`` convolutions already in the shipped dataset (latency 0.05-20 ms), measured again
  in the same campaign: their ratio to the shipped values says how far this campaign's machine
  and moment sit from the first (the shipped card quotes it for each later campaign).

The estimate: each layer's latency as the shipped network model prices it (its own class where
measured; where not, the measured fallback of its class, from FLOPs and bytes, times the class's
90% error: an upper estimate), turned into the wall
time of two visits by what the shipped campaign spent per layer at that latency (its rows'
``wall_s``: 1.0 s below 0.1 ms, 1.2 s at 0.1-1 ms, 2.2 s at 1-10 ms, 2.6 s above). Prints the
counts, the estimate per group and in total.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from carb import netmodel  # noqa: E402
from carb.families import layers as L  # noqa: E402

#: Two visits' wall time (s) at a layer's latency (ms), from the shipped campaign's rows (medians by band).
_LATENCY_MS = [0.03, 0.3, 3.0, 30.0, 300.0]
_WALL_S = [1.0, 1.2, 2.2, 2.6, 3.4]


def wall_s(latency_ms: np.ndarray) -> np.ndarray:
    """Estimated wall time of a layer's two visits (s), from its latency (ms)."""
    return np.interp(np.log10(np.maximum(latency_ms, 1e-3)), np.log10(_LATENCY_MS), _WALL_S)


def estimate(configs: list, nm) -> np.ndarray:
    """Each config's estimated wall time (s) on the shipped model's machine.

    At the upper end of its price: an op the model has not measured costs its fallback's price
    times its class's 90% error (the fallback under-priced the ops the audit timed, 3-14x).
    """
    lf = L.layer_frame(configs).reset_index(drop=True)
    return wall_s(nm.layer.predict(lf) * np.exp(nm.layer.fallback_q(lf)))


def sample(
    per_op: int,
    min_per_op: int,
    budget_s: float,
    bridge_s: float,
    seed: int,
    nm,
    groups: list[str] | None = None,
    measured: frozenset[str] = frozenset(),
) -> dict[str, list]:
    """Per group, its configs: ``per_op`` each, the slowest groups cut until the total fits ``budget_s``.

    ``groups``: those of ``NEW_OP_GRIDS`` to sample (all by default); ``measured``: config ids left out
    (already in a dataset).
    """
    counts = dict.fromkeys(groups or L.NEW_OP_GRIDS, per_op)
    while True:
        got = {g: [c for c in L.new_ops_sample({g: n}, seed) if c.config_id not in measured] for g, n in counts.items()}
        cost = {g: float(estimate(cs, nm).sum()) if cs else 0.0 for g, cs in got.items()}
        if sum(cost.values()) + bridge_s <= budget_s:
            return got
        cuttable = [g for g in counts if counts[g] > min_per_op]
        if not cuttable:
            return got
        slow = max(cuttable, key=lambda g: cost[g] / max(len(got[g]), 1))
        counts[slow] -= 1


def bridge(n: int, seed: int, base: str = "layers-cpu-avx2-1t") -> pd.DataFrame:
    """``n`` convolutions of the shipped layer dataset ``base`` (latency 0.05-20 ms), as configs."""
    shipped = pd.read_parquet(ROOT / "carb" / "data" / f"{base}.parquet")
    latency = shipped["latency_ms_min"] if "latency_ms_min" in shipped else shipped["latency_ms"]
    convs = shipped[(shipped["op"] == "conv") & latency.between(0.05, 20)]
    cols = [c for c in ("config_id", "family", *L.PARAMETERS) if c in convs.columns]
    return convs.sample(n, random_state=seed)[cols] if n else convs.head(0)[cols]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "campaigns" / "layers-ops.parquet"))
    ap.add_argument("--per-op", type=int, default=25, help="layers per group at most")
    ap.add_argument("--min-per-op", type=int, default=12, help="layers per group at least, whatever the budget")
    ap.add_argument("--budget-min", type=float, default=12.0, help="the campaign's estimated wall time at most (min)")
    ap.add_argument("--bridge", type=int, default=20, help="shipped convolutions measured again")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--base",
        default="layers-cpu-avx2-1t",
        help="the shipped network model (and its layer dataset) the bridge joins",
    )
    ap.add_argument("--groups", nargs="+", choices=list(L.NEW_OP_GRIDS), help="only these groups (default: all)")
    ap.add_argument(
        "--new-only", action="store_true", help="leave out layers the base's dataset already holds (another --seed)"
    )
    a = ap.parse_args(argv)
    nm = netmodel.load(a.base)
    br = bridge(a.bridge, a.seed, a.base)
    bridge_s = float(estimate(L._layer_configs(br)[0], nm).sum()) if len(br) else 0.0
    measured: frozenset[str] = frozenset()
    if a.new_only:
        measured = frozenset(pd.read_parquet(ROOT / "carb" / "data" / f"{a.base}.parquet")["config_id"])
    got = sample(a.per_op, a.min_per_op, 60 * a.budget_min, bridge_s, a.seed, nm, a.groups, measured)
    total = bridge_s
    for g, cs in got.items():
        s = float(estimate(cs, nm).sum())
        total += s
        print(f"{g:18s} {len(cs):3d} layers  ~{s / 60:5.2f} min")
    print(f"{'bridge':18s} {len(br):3d} layers  ~{bridge_s / 60:5.2f} min")
    cfgs = [c for cs in got.values() for c in cs]
    n = write(cfgs, br, Path(a.out), a.seed)
    print(f"{n} configs ({len(cfgs)} new, {len(br)} bridge), ~{total / 60:.1f} min estimated -> {a.out}")
    return 0


def write(cfgs: list, br: pd.DataFrame, out: Path, seed: int) -> int:
    """The new layer configs and the bridge rows, shuffled (``seed``) and deduplicated, into ``out``; their count."""
    cols = ["config_id", "family", *L.PARAMETERS]
    new = pd.DataFrame([c.to_dict() | {"config_id": c.config_id} for c in cfgs], columns=cols)
    df = pd.concat([new, br.reindex(columns=cols)], ignore_index=True).sample(frac=1, random_state=seed)
    df = df.drop_duplicates("config_id").reset_index(drop=True)
    # a parameter a row does not use is missing (None): the config's id is that of its set fields
    for c in ("dilation", "padding", "ceil_mode", "align_corners", "output_size", "frames", "kernel_d"):
        default = {"dilation": 1, "padding": -1, "frames": 1}.get(c, 0)
        df[c] = df[c].where(df[c].notna() & (df[c] != default)).astype("Int64")
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(out)
    return len(df)


if __name__ == "__main__":
    sys.exit(main())
