"""Graph capture: any ``torch.nn.Module`` -> a table of its layers, on the meta device.

- :mod:`carb.graph.table`: :class:`LayerTable` (its columns), :class:`CaptureError`, shapes and precisions.
- :mod:`carb.graph.trace`: :func:`capture` and its steps (trace, BN folding, totals).
- :mod:`carb.graph._run`: one run of a traced graph on meta tensors (rows, liveness).
- :mod:`carb.graph._export`: the ``torch.export`` fallback of :func:`capture` (forwards that
  branch on their input's shape), folded back into ``torch.fx``'s layers.
- :mod:`carb.graph.onnx`: :func:`capture_onnx`, an ONNX file -> the same table (needs the
  ``onnx`` package: ``pip install 'carb[onnx]'``); :mod:`carb.graph._onnx_fold` folds its
  shape arithmetic.
- :mod:`carb.graph.nodes`: one node: operator types, meta copies, closed forms, its row.
- :mod:`carb.graph.modules`: importing user code (``--module`` specs) and building on meta.

It imports torch and onnx only inside its functions (``import carb.graph`` is light) and
never imports torchvision; reading an ONNX file never imports torch.
"""

from __future__ import annotations

from carb.graph.modules import build_meta, build_module, load_module, resolve_module, skip_meta_init
from carb.graph.onnx import capture_onnx
from carb.graph.table import DTYPES, KNOWN_OPS, CaptureError, LayerTable, capture_features, dtype_of, parse_shape
from carb.graph.trace import capture, gc_paused

__all__ = [
    "capture",
    "capture_onnx",
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
