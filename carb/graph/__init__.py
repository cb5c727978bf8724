"""Graph capture: any ``torch.nn.Module`` -> a table of its layers, on the meta device.

- :mod:`carb.graph.table`: :class:`LayerTable` (its columns), :class:`CaptureError`, shapes and precisions.
- :mod:`carb.graph.trace`: :func:`capture` and its steps (trace, run on meta, liveness, BN folding).
- :mod:`carb.graph.nodes`: one node: operator types, meta copies, closed forms, its row.
- :mod:`carb.graph.modules`: importing user code (``--module`` specs) and building on meta.

It imports torch only inside its functions (``import carb.graph`` is light) and never
imports torchvision.
"""

from __future__ import annotations

from carb.graph.modules import build_meta, build_module, load_module, resolve_module, skip_meta_init
from carb.graph.table import DTYPES, KNOWN_OPS, CaptureError, LayerTable, capture_features, dtype_of, parse_shape
from carb.graph.trace import capture, gc_paused

__all__ = [
    "capture",
    "LayerTable",
    "CaptureError",
    "KNOWN_OPS",
    "parse_shape",
    "DTYPES",
    "dtype_of",
    "load_module",
    "resolve_module",
    "build_meta",
    "build_module",
    "gc_paused",
    "skip_meta_init",
    "capture_features",
]
