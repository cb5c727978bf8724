"""The CPU backend's worker for a config run by ONNX Runtime (``runtime = "onnxruntime"``: an ONNX file).

The CPU backend (:mod:`carb.measure.cpu`) starts :func:`_onnx_child` instead of
:func:`~carb.measure._cpu_worker._cpu_child` for such a config (:func:`child_of`), in the same
fresh process forked from the forkserver, with the same job (:class:`~carb.measure._cpu_worker.CpuJob`).
The child follows the torch worker's steps and shares its code wherever the runtime allows:
the allocator, the CPUs and torch's thread pools (those of the paired speed sentinel, a torch
module) are set as there; the memory baseline, the warm-up, the repeat/stop protocol, the
paired sentinel's blocks, the peak memory and the reply are the torch worker's own functions.

Latency and memory, and what differs from a torch row
-----------------------------------------------------
The model is an ``onnxruntime.InferenceSession`` of the file on the ``CPUExecutionProvider``
alone, with ``intra_op_num_threads`` and ``inter_op_num_threads`` both the job's ``threads``
and sequential execution (``ORT_SEQUENTIAL``); every other session option keeps ONNX Runtime's
default (all graph optimizations, its CPU memory arena and memory patterns, spinning intra-op
threads) and is recorded. No custom-operator library is registered: loading the file runs no
code of its own. One forward is ``session.run(None, {input: x})``, with ``x`` a NumPy array of
the config's input shape and the graph input's element type, drawn once (seeded); its outputs
are NumPy arrays the runtime allocates per call, as eager PyTorch allocates its outputs.

- ``latency_ms``: as for torch rows (:mod:`carb.measure.cpu`): per-forward wall time of timed
  samples of ``k`` forwards, the CI stopping rule on latency. The thread pool is ONNX
  Runtime's own (not OpenMP), pinned to the worker's CPUs by inheritance.
- ``memory_mb``: as for torch rows, ``VmHWM - baseline``, the baseline read after
  ``onnxruntime`` is imported and before the session exists, the peak reset once the session
  is built (loading, graph optimization and weight pre-packing are the build and are not
  counted, except what stays resident: the session's weights). ONNX Runtime's arena keeps the
  memory it reserved, so the peak is its steady state, as with the ``retain`` allocator.
- energy: RAPL around the samples, as for torch rows.

Provenance of each row (its ``extra``): ``runtime`` (``onnxruntime``), ``onnxruntime_version``,
``providers``, ``session_options``, ``onnx_sha256`` (the file's content, checked against the
config's) and the graph's input and output names.
"""

from __future__ import annotations

import gc
import hashlib
import importlib
import os
import time
from typing import Any, Callable

from ._common import classify, inject_fault, one_line, send_reply
from ._cpu_process import _malloc_trim, _reset_hwm, _rss_kb
from ._cpu_worker import (
    CpuJob,
    _cpu_child,
    _Memory,
    _memory_baseline,
    _ok_reply,
    _peak_memory_kb,
    _set_up_process,
    _time_config,
)

__all__ = ["RUNTIME", "INSTALL", "child_of", "runtime_version"]

#: the runtime these workers run (a config's ``runtime`` attribute)
RUNTIME = "onnxruntime"
#: the one line of a worker where ONNX Runtime is not installed
INSTALL = "measuring ONNX files needs ONNX Runtime: pip install 'carb[onnx]'"
#: ONNX Runtime's input type -> NumPy dtype name (the floating inputs a forward is drawn for)
_INPUT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64"}
#: the seed of the input drawn once per worker
_SEED = 0


def child_of(config: Any) -> Callable[[Any, CpuJob], None]:
    """The worker function of ``config``: :func:`_onnx_child` for an ONNX Runtime config, else the torch one."""
    return _onnx_child if getattr(config, "runtime", None) == RUNTIME else _cpu_child


def runtime_version() -> str | None:
    """The installed ONNX Runtime's version, read from its metadata (``None`` where it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("onnxruntime", "onnxruntime-gpu", "onnxruntime-openvino"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _onnx_child(conn: Any, job: CpuJob) -> None:
    """Measure one ONNX file with ONNX Runtime in this (fresh) process and send a result dict through ``conn``."""
    t_wall = time.perf_counter()
    extra: dict[str, Any] = {"pid": os.getpid(), "threads": job.threads, "runtime": RUNTIME}
    try:
        torch, cpus = _set_up_process(job, extra)
        arch = importlib.import_module(job.arch)  # the paired sentinel's builder, preloaded by the forkserver
        ort = _import_runtime(extra)
        _check_content(job.config, extra)
        gc.collect()
        _malloc_trim()  # the hashing's freed blocks go back to the OS ahead of the baseline
        mem = _memory_baseline(job)
        inject_fault(job.fault)
        run, x = _session(job, ort, mem, extra)
        with torch.inference_mode():  # the paired sentinel's forwards
            timing = _time_config(job, arch, torch, run, x, mem)
        memory_kb = _peak_memory_kb(mem, timing.hwm_warm_kb, extra)
        reply = _ok_reply(job, timing, memory_kb, cpus, t_wall, extra)
    except BaseException as e:  # noqa: BLE001 - every failure becomes a status row
        reply = {"status": classify(e), "message": one_line(e), "extra": extra}
    send_reply(conn, reply)


def _import_runtime(extra: dict[str, Any]) -> Any:
    """``onnxruntime``, imported ahead of the memory baseline; its version recorded."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeError(INSTALL) from None
    extra["onnxruntime_version"] = ort.__version__
    return ort


def _check_content(config: Any, extra: dict[str, Any]) -> None:
    """The file's SHA-256, recorded; a file whose content is not the config's is refused."""
    h = hashlib.sha256()
    with open(config.onnx, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    extra["onnx_sha256"] = h.hexdigest()
    if extra["onnx_sha256"] != config.sha256:
        raise ValueError(f"{config.onnx}: its content changed since the config was made (sha256 differs)")


def _session(job: CpuJob, ort: Any, mem: _Memory, extra: dict[str, Any]) -> tuple[Callable[[Any], Any], Any]:
    """The session on the CPU provider and the input; the peak reset so that it covers the ready session on."""
    import numpy as np

    config = job.config
    t_build = time.perf_counter()
    so = ort.SessionOptions()
    so.intra_op_num_threads = job.threads
    so.inter_op_num_threads = job.threads
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3  # errors only: a warning is not a failure of the row
    sess = ort.InferenceSession(str(config.onnx), sess_options=so, providers=["CPUExecutionProvider"])
    inputs = sess.get_inputs()
    if len(inputs) != 1:
        raise NotImplementedError(f"{config.onnx}: a graph of {len(inputs)} inputs (one input is measured)")
    dtype = _INPUT_TYPES.get(inputs[0].type)
    if dtype is None:
        raise NotImplementedError(f"{config.onnx}: input of type {inputs[0].type} (floating inputs are measured)")
    x = np.random.default_rng(_SEED).standard_normal(config.dims).astype(dtype)
    name = inputs[0].name

    def forward(x: Any) -> Any:
        return sess.run(None, {name: x})

    gc.collect()
    _malloc_trim()
    mem.model_kb = _rss_kb()
    if mem.can_reset:
        _reset_hwm()  # peak from here on: the ready session plus inference
    extra.update(
        build_s=round(time.perf_counter() - t_build, 4),
        providers=sess.get_providers(),
        session_options={
            "intra_op_num_threads": so.intra_op_num_threads,
            "inter_op_num_threads": so.inter_op_num_threads,
            "execution_mode": "sequential",
            "graph_optimization_level": str(so.graph_optimization_level).rpartition(".")[2],
            "enable_cpu_mem_arena": bool(so.enable_cpu_mem_arena),
            "enable_mem_pattern": bool(so.enable_mem_pattern),
        },
        onnx_input=name,
        onnx_input_type=inputs[0].type,
        onnx_outputs=[o.name for o in sess.get_outputs()],
    )
    return forward, x
