"""Any network from its layers: per-operator cost models + a network model, per device.

How a prediction is made (:func:`predict_module`):

1. :func:`carb.graph.capture` turns the module into a table of layers (meta device).
2. :mod:`carb.netmodel.layers`: each layer's latency from its operator class and shapes
   (:class:`LayerModel`: a roofline per class times a forest's correction); an operator
   without measurements is priced by a measured fallback (the roofline of its class:
   element-wise, normalization, data movement, pooling, compute, :func:`fit_fallback`),
   listed in ``unknown_ops``, and its class's leave-one-op-out error widens the interval; a
   network more than :data:`UNKNOWN_SHARE_MAX` of whose latency is so priced gets no latency
   budget decision (:meth:`Prediction.decision`).
3. :mod:`carb.netmodel.network`: the network's latency from the sum of its layers, the
   per-node and per-forward overheads, and its peak memory from a liveness simulation
   corrected by a learned linear term (:class:`NetModel`, :func:`fit_netmodel`, :func:`load`).
4. :mod:`carb.netmodel.calibrate`: the model mapped to a device from K whole networks
   measured there (:func:`calibrate_on`, ``carb calibrate --model <network model>``).

:mod:`carb.netmodel.predict` captures and prices modules (:class:`Prediction`,
:func:`predict_modules` in worker processes); :mod:`carb.netmodel.io` is the directory
format (``netmodel.json`` + ``layer_forest.npz``, no code runs on loading) and the shipped
models; :func:`default_model` picks the shipped model measured on this machine's kind. Intervals are
90% by default.
"""

from __future__ import annotations

from carb.graph import CaptureError
from carb.netmodel.calibrate import (
    CALIBRATION_MAX_GFLOPS,
    CALIBRATION_METHODS,
    CHOICE_RULES,
    DEFAULT_CALIBRATION_METHOD,
    calibrate_on,
    calibrate_rows,
    capture_config,
    choose_networks,
    pick_networks,
    read_networks,
    runtime_of,
)
from carb.netmodel.domain import default_model
from carb.netmodel.io import DEFAULT_MODEL, FORMAT, SHIPPED, ModelError, resolve

# the underscored names are internals that tests and benchmarks reach through this package
from carb.netmodel.layers import (  # noqa: F401
    _FEATURES,
    _FEATURES_V1,
    _FEATURES_V2,
    FALLBACK_CLASSES,
    FEATURES_VERSION,
    SHRINKS,
    LayerModel,
    _onednn_mb,
    _work,
    _x,
    fallback_class,
    fit_fallback,
    native_conv_columns,
    onednn_conv,
    op_class,
)
from carb.netmodel.network import (  # noqa: F401
    LAT_SHRINK_STRENGTH,
    LAT_SHRUNK,
    NETWORK_COLUMNS,
    NetModel,
    _network_rows,
    _nnls_rel,
    allocator_of,
    fit_netmodel,
    load,
    network_row,
)
from carb.netmodel.predict import (
    UNKNOWN_SHARE_MAX,
    Prediction,
    input_memory_problem,
    memory_problem,
    physical_memory_bytes,
    predict_module,
    predict_modules,
    predict_table,
    predict_tables,
)

__all__ = [
    "NetModel",
    "LayerModel",
    "Prediction",
    "predict_module",
    "predict_modules",
    "predict_table",
    "predict_tables",
    "op_class",
    "fallback_class",
    "fit_fallback",
    "FALLBACK_CLASSES",
    "UNKNOWN_SHARE_MAX",
    "physical_memory_bytes",
    "memory_problem",
    "input_memory_problem",
    "onednn_conv",
    "native_conv_columns",
    "network_row",
    "fit_netmodel",
    "load",
    "resolve",
    "ModelError",
    "CaptureError",
    "FORMAT",
    "SHIPPED",
    "DEFAULT_MODEL",
    "default_model",
    "FEATURES_VERSION",
    "SHRINKS",
    "NETWORK_COLUMNS",
    "LAT_SHRUNK",
    "LAT_SHRINK_STRENGTH",
    "allocator_of",
    "capture_config",
    "runtime_of",
    "read_networks",
    "pick_networks",
    "choose_networks",
    "calibrate_on",
    "calibrate_rows",
    "CALIBRATION_METHODS",
    "CALIBRATION_MAX_GFLOPS",
    "DEFAULT_CALIBRATION_METHOD",
    "CHOICE_RULES",
]
