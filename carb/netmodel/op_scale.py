"""Per-op calibration: how much faster or slower each op runs on this machine than the model's convolutions.

One factor per network maps a network model to another machine (:func:`carb.netmodel.calibrate_on`),
but ops move apart between machine kinds: from the AVX2 EPYC to an AVX-512 Xeon, the op campaign's
ops ran x0.44 (attention, convolutions) to x0.74 (3-D max pooling) as long, 1.66x apart
(``experiments/ops_campaign/kinds.py``). A network made mostly of convolutions takes the factor
the K zoo networks give; a video network of 3-D pools, or a segmenter of up-sampling, does not.

So a few layers per op that the model's own campaigns measured (:func:`op_layers`) are measured again
here, and each op's speed here against there, over that of the dense convolutions measured in the same
minutes (:data:`REFERENCE`), becomes a factor on that op's price (:func:`fit_op_scale`,
:attr:`carb.netmodel.LayerModel.op_scale`); the K networks then map the whole. The same layers
measured on both machines: the factor holds no error of the model's, only the machines'.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from carb.netmodel.fallback import OP_DATASETS, fallback_unit
from carb.netmodel.roofline import op_class

__all__ = ["REFERENCE", "PER_OP", "op_layers", "fit_op_scale"]

#: the op every other op's speed here is measured against: dense convolutions, what the K zoo networks
#: are mostly made of (their factor maps the whole)
REFERENCE = "conv"
#: layers measured again per op
PER_OP = 3
#: latency band (ms, as the model's campaign measured) of the layers taken: fast to visit, above timer noise
BAND_MS = (0.05, 20.0)


def _layers_of(path: Path) -> pd.DataFrame:
    from carb.families.layers import layer_frame

    df = pd.read_parquet(path)
    df = df[(df.get("status", pd.Series("ok", index=df.index)).fillna("ok") == "ok") & (df["op"] != "se")]
    return df.reset_index(drop=True).assign(_lf=list(layer_frame(df.reset_index(drop=True)).to_dict("records")))


def op_layers(name: str, per_op: int = PER_OP, seed: int = 0, reference: int = 2 * PER_OP) -> pd.DataFrame:
    """Layers a shipped network model's campaigns measured, ``per_op`` of each op, to measure again here.

    Each op (:func:`carb.netmodel.fallback.fallback_unit`) of the model's layer dataset and of its op
    campaigns (:data:`carb.netmodel.fallback.OP_DATASETS`, at the model's campaign speed through their
    bridge layers) with at least 2 layers in :data:`BAND_MS`: ``per_op`` of them (seeded), ``reference``
    of the dense convolutions.

    Args:
        name: a shipped network model's name (its layer dataset ``carb/data/<name>.parquet``).
        per_op: layers per op.
        seed: the draw's seed.
        reference: dense convolutions (:data:`REFERENCE`).

    Returns:
        One row per layer: ``config_id``, ``family``, the layer's parameters, ``op_unit`` and ``there_ms``
        (its median latency in the model's campaign, ms).

    Raises:
        ValueError: ``name`` is no shipped model with a layer dataset.
    """
    from carb.families.layers import PARAMETERS

    data = Path(str(resources.files("carb") / "data"))
    base = data / f"{name}.parquet"
    if not base.is_file() or "/" in name:
        raise ValueError(f"ops: {name!r} has no shipped layer dataset to measure again (a shipped network model has)")
    frames = [_layers_of(base)]
    for extra in OP_DATASETS.get(name, ()):
        if (data / f"{extra}.parquet").is_file():
            ops = _layers_of(data / f"{extra}.parquet")
            bridge = ops["config_id"].isin(set(frames[0]["config_id"]))
            there = frames[0].drop_duplicates("config_id").set_index("config_id")["latency_ms"]
            ratio = there.loc[ops.loc[bridge, "config_id"]].to_numpy() / ops.loc[bridge, "latency_ms"].to_numpy()
            speed = float(np.median(ratio)) if bridge.sum() >= 3 else 1.0  # the model's campaign over this one
            frames.append(ops[~bridge].assign(latency_ms=ops.loc[~bridge, "latency_ms"] * speed))
    df = pd.concat(frames, ignore_index=True).drop_duplicates("config_id").reset_index(drop=True)
    lf = pd.DataFrame(list(df.pop("_lf")))
    df["op_unit"] = fallback_unit(lf, op_class(lf))
    df = df[df["latency_ms"].between(*BAND_MS)]
    rng = np.random.default_rng(seed)
    picked = []
    for unit, g in df.groupby("op_unit", sort=True):
        n = reference if unit == REFERENCE else per_op
        if len(g) >= 2:
            picked.append(g.iloc[np.sort(rng.choice(len(g), size=min(n, len(g)), replace=False))])
    out = pd.concat(picked, ignore_index=True) if picked else df.head(0)
    cols = ["config_id", "family", *[p for p in PARAMETERS if p in out.columns], "op_unit"]
    return out[cols].assign(there_ms=out["latency_ms"].to_numpy(np.float64)).reset_index(drop=True)


def fit_op_scale(layers: pd.DataFrame, here_ms: np.ndarray, min_layers: int = 2) -> dict[str, float]:
    """Each op's factor: its speed here against there, over the dense convolutions' (:data:`REFERENCE`).

    ``exp(median(log(here / there)) over the op's layers - the same over the reference's)``, for every op
    with at least ``min_layers`` layers measured here (a positive, finite latency); the reference's own
    factor is 1 and is left out. An op too few of whose layers measured keeps no factor (1).

    Args:
        layers: :func:`op_layers`' rows (``op_unit``, ``there_ms``).
        here_ms: their median latency measured here, aligned. Units: ms.
        min_layers: the fewest layers an op's factor rests on.

    Returns:
        op -> factor on its layers' price.

    Raises:
        ValueError: fewer than ``min_layers`` reference layers measured here.
    """
    y = np.asarray(here_ms, np.float64)
    ok = np.isfinite(y) & (y > 0)
    log = pd.Series(np.log(np.where(ok, y, 1.0) / layers["there_ms"].to_numpy(np.float64)))[ok]
    unit = layers["op_unit"].astype(str)[ok]
    per = log.groupby(unit).agg(["median", "size"])
    if REFERENCE not in per.index or per.loc[REFERENCE, "size"] < min_layers:
        raise ValueError(
            f"ops: {int(per['size'].get(REFERENCE, 0))} reference convolutions measured; need {min_layers}"
        )
    ref = float(per.loc[REFERENCE, "median"])
    return {
        str(u): float(np.exp(r["median"] - ref))
        for u, r in per.iterrows()
        if u != REFERENCE and r["size"] >= min_layers
    }
