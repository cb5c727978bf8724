"""Generate the supported-operators page from the code: the table of docs/guides/operators.md.

    python scripts/operators_page.py            # rewrite the block between the page's operators markers
    python scripts/operators_page.py --check    # exit 1 when the page is stale (the test runs this)

One row per op capture reads (``carb.graph.KNOWN_OPS``), split where the network models price
one op by several classes (a convolution: dense, depthwise, grouped, dilated): where capture
reads it from (torch modules, torch functions, ONNX operators and the exporters' patterns), how
each shipped network model prices it (its own model fitted on measured layers, or the measured
fallback of its class with that fallback's leave-one-op-out 90% error), the ranges its layers
were measured over in the default model's dataset, and its measured error in each model:
``experiments/ops_campaign/results/op_errors.json`` (the median and 90% quantile of its layers'
held-out error), else a dash.
Everything comes from the code and the shipped data; nothing is typed by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PAGE = ROOT / "docs" / "guides" / "operators.md"
ERRORS = ROOT / "experiments" / "ops_campaign" / "results" / "op_errors.json"
BEGIN, END = "<!--operators:table-->", "<!--/operators:table-->"

#: Rows where one op is priced by several classes: (op, class, label).
SPLITS = {
    "conv": [
        ("conv", "conv", "conv (dense, pointwise)"),
        ("conv", "conv_dw", "conv, depthwise"),
        ("conv", "conv_dw_multiplier", "conv, depthwise with a channel multiplier"),
        ("conv", "conv_grouped", "conv, grouped"),
        ("conv", "conv_dilated", "conv, dilated"),
    ],
    "linear": [("linear", "linear", "linear, one row an image"), ("linear", "conv", "linear over tokens or pixels")],
    "layernorm": [
        ("layernorm", "layernorm", "layernorm"),
        ("layernorm", "layernorm_strided", "layernorm of a permuted view"),
    ],
    "softmax": [
        ("softmax", "softmax", "softmax over the last dimension"),
        ("softmax", "softmax_strided", "softmax over another dimension"),
    ],
    "maxpool": [("maxpool", "pool", "maxpool"), ("maxpool", "pool_dilated", "maxpool, dilated")],
    "maxpool1d": [("maxpool1d", "pool1d", "maxpool1d"), ("maxpool1d", "pool1d_dilated", "maxpool1d, dilated")],
    "maxpool3d": [("maxpool3d", "pool3d", "maxpool3d"), ("maxpool3d", "pool3d_dilated", "maxpool3d, dilated")],
    "copy": [
        ("copy", "copy", "copy whose rows are runs (a channel shuffle, a window partition)"),
        ("copy", "copy_strided", "copy of a view strided over its last dimension"),
    ],
}
#: The exporters' patterns capture_onnx reads as one op (carb.graph.onnx._fusions).
ONNX_PATTERNS = {
    "silu": "Mul(x, Sigmoid(x))",
    "hardswish": "Mul(x, HardSigmoid(x))",
    "mish": "Mul(x, Tanh(Softplus(x)))",
    "gelu": "Mul(Mul(x, Add(Erf(Div(x, c)), 1)), 0.5) (before opset 20)",
    "linear": "MatMul(x, W) + b",
    "groupnorm": "Reshape, InstanceNormalization, Reshape, Mul, Add",
    "sdpa": "MatMul, Softmax, MatMul",
}
#: ONNX operators read with their rank (carb.graph.onnx._Graph._read).
ONNX_RANKED = {
    "conv1d": "Conv",
    "conv3d": "Conv",
    "convtranspose1d": "ConvTranspose",
    "convtranspose3d": "ConvTranspose",
    "maxpool1d": "MaxPool",
    "maxpool3d": "MaxPool",
    "avgpool1d": "AveragePool",
    "avgpool3d": "AveragePool",
    "gap1d": "GlobalAveragePool",
    "gap3d": "GlobalAveragePool",
    "upsample_bilinear": "Resize",
    "pad_reflect": "Pad",
    "pad_replicate": "Pad",
}


def _sources(op: str) -> tuple[str, str, str]:
    """Where capture reads ``op`` from: torch modules, torch functions, ONNX operators."""
    from carb.graph.nodes import _FUNCTION_OPS, _MODULE_OPS
    from carb.graph.onnx import ONNX_OPS

    mods = sorted(k for k, v in _MODULE_OPS.items() if v == op)
    funcs = sorted(k for k, v in _FUNCTION_OPS.items() if v == op and not k.endswith("_") and k not in ("iadd", "imul"))
    if op == "upsample_nearest":  # nn.Upsample's mode decides the op
        mods = ["Upsample", "UpsamplingNearest2d"]
    if op == "upsample_bilinear":
        mods, funcs = ["Upsample", "UpsamplingBilinear2d"], ["interpolate", "upsample", "upsample_bilinear2d"]
    onnx = sorted(k for k, v in ONNX_OPS.items() if v == op)
    if op in ONNX_RANKED:
        onnx = [ONNX_RANKED[op]]
    if op in ONNX_PATTERNS:
        onnx.append(ONNX_PATTERNS[op])
    return ", ".join(mods) or "-", ", ".join(funcs) or "-", ", ".join(onnx) or "-"


def _priced(nm, cls: str, op: str) -> str:
    """How a network model prices a class: its own model, an op campaign's roofline, or its class's fallback."""
    from carb.netmodel.layers import _FALLBACK_OF, GENERIC, OWN

    if cls in nm.layer.classes:
        return f"own model ({cls}, {nm.layer.n.get(cls, 0):,} layers)"
    own = (nm.layer.fallback or {}).get(OWN + (op if cls in ("pool", "pool1d", "pool3d") else cls))
    if own is not None:
        return f"own roofline ({own['n']} layers, x{math.exp(own['q']):.1f})"
    fb = _FALLBACK_OF.get(cls, GENERIC)
    q = (nm.layer.fallback or {}).get(fb, {}).get("q", nm.layer.q_generic)
    return f"fallback: {fb} (x{math.exp(q):.1f})"


def _ranges(lf, cls_of, cls: str) -> str:
    """The measured ranges of a class's layers in a dataset: channels, map side, batch, kernels."""
    m = cls_of == cls
    if not m.any():
        return "-"
    d = lf[m]

    def span(col: str) -> str:
        lo, hi = int(d[col].min()), int(d[col].max())
        return str(lo) if lo == hi else f"{lo}-{hi}"

    parts = [f"c {span('cin')}", f"h {span('h')}", f"b {span('batch')}"]
    ks = sorted(set(int(k) for k in d["kernel"]))
    if ks != [1]:
        parts.append("k " + "/".join(map(str, ks)))
    return ", ".join(parts)


def _error(errors: dict, model: str, cls: str) -> str:
    """The class's held-out error in ``model``: the median |predicted / measured - 1|, the 90% quantile, the layers."""
    got = (errors.get(model) or {}).get(cls)
    return f"{got['median_pct']:.0f}% / {100 * math.expm1(got['q90']):.0f}% (n {got['n']})" if got else "-"


def table() -> str:
    """The page's table, from the code and the shipped data."""
    import pandas as pd

    from carb import netmodel
    from carb.families import layers as L
    from carb.graph import KNOWN_OPS
    from carb.netmodel.io import DEFAULT_MODEL, SHIPPED

    models = {name: netmodel.load(name) for name in SHIPPED}
    default = DEFAULT_MODEL
    df = pd.read_parquet(ROOT / "carb" / "data" / f"{default}.parquet")
    lf = L.layer_frame(df[df["op"] != "se"]).reset_index(drop=True)
    cls_of = netmodel.op_class(lf)
    errors = json.loads(ERRORS.read_text()) if ERRORS.is_file() else {}
    with_errors = [name for name in models if name in errors]
    rows = []
    for op in KNOWN_OPS:
        if op == "view":
            continue
        for _, cls, label in SPLITS.get(op, [(op, str(netmodel.op_class(_one(op))[0]), op)]):
            mods, funcs, onnx = _sources(op)
            priced = " | ".join(_priced(nm, cls, op) for nm in models.values())
            measured = " | ".join(_error(errors, name, cls) for name in with_errors)
            rows.append(f"| {label} | {mods} | {funcs} | {onnx} | {priced} | {_ranges(lf, cls_of, cls)} | {measured} |")
    head = (
        "| op | torch modules | torch functions | ONNX | "
        + " | ".join(f"priced by {name}" for name in models)
        + f" | measured in {default} | "
        + " | ".join(f"error in {name}" for name in with_errors)
        + " |"
    )
    sep = "|" + "---|" * (5 + len(models) + len(with_errors))
    return "\n".join([head, sep, *rows])


def _one(op: str):
    """A one-row layer table of ``op`` (what op_class reads of it)."""
    import pandas as pd

    return pd.DataFrame([{"op": op, "groups": 1, "cin": 8, "h": 1, "w": 1, "dilation": 1, "geometry": ""}])


def render(page: str) -> str:
    """``page`` with the block between the markers replaced by :func:`table`."""
    if BEGIN not in page or END not in page:
        raise SystemExit(f"error: {PAGE}: no {BEGIN} ... {END} block")
    before, rest = page.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    return f"{before}{BEGIN}\n{table()}\n{END}{after}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when the page is stale")
    a = ap.parse_args(argv)
    page = PAGE.read_text()
    new = render(page)
    if a.check:
        if new != page:
            print(f"{PAGE} is stale: python scripts/operators_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
