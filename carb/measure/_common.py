"""Helpers shared by the backends: failure classification, one-line messages, host facts, the test-only fault hook.

Private: the public surface is :mod:`carb.measure`.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

#: Test-only faults a backend's ``_fault`` option can inject into its worker.
FAULTS = ("raise", "oom", "exit", "kill", "segv", "sleep", "unsupported")


def one_line(exc: BaseException, limit: int = 300) -> str:
    """``Type: message`` on one line, at most ``limit`` characters."""
    msg = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify(exc: BaseException) -> str:
    """Status for an exception raised while measuring: ``oom``, ``unsupported`` or ``error``."""
    if isinstance(exc, MemoryError):
        return "oom"
    try:  # torch.OutOfMemoryError (2.5+) is the base of torch.cuda.OutOfMemoryError
        import torch

        oom_types = tuple(
            t for t in (getattr(torch, "OutOfMemoryError", None), getattr(torch.cuda, "OutOfMemoryError", None)) if t
        )
        if oom_types and isinstance(exc, oom_types):
            return "oom"
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    text = str(exc).lower()
    # CPU allocator failures come as plain RuntimeErrors ("DefaultCPUAllocator: can't allocate memory")
    if isinstance(exc, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text):
        return "oom"
    if isinstance(exc, NotImplementedError) or "not implemented for" in text or "unsupported dtype" in text:
        return "unsupported"
    return "error"


def unguarded_main_script() -> str | None:
    """Why workers cannot start from this program, where its main script would call carb again in each.

    A worker process (``forkserver`` or ``spawn``) imports the program's main script anew before
    it runs a job. A script without an ``if __name__ == "__main__":`` guard runs its top-level
    code there, which called carb in the first place: each worker would start workers of its
    own, and multiprocessing ends it with a page-long error. Read from the script's source
    (no ``__main__`` in it); ``None`` for a guarded script, an interactive session or a
    program run as a module.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or getattr(main, "__spec__", None) is not None or not str(path).endswith(".py"):
        return None
    try:
        source = Path(path).read_text(errors="replace")
    except OSError:
        return None
    if "__main__" in source:
        return None
    return (
        f"{path} calls carb from its top level, and each measuring worker imports it again: "
        'put those calls under `if __name__ == "__main__":`'
    )


def exit_message(exitcode: int | None) -> str:
    """Why a worker process ended without reporting, from its exit code."""
    if exitcode is None:
        return "worker vanished without an exit code"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (the kernel OOM killer?)" if -exitcode == signal.SIGKILL else ""
        return f"worker died by {name}{hint} before reporting"
    return f"worker exited with code {exitcode} before reporting"


def inject_fault(fault: str | None) -> None:
    """Test-only: make the worker fail the way ``fault`` names (see :data:`FAULTS`)."""
    if not fault:
        return
    if fault == "raise":
        raise RuntimeError("injected fault (test-only)")
    if fault == "oom":
        raise MemoryError("injected out-of-memory (test-only)")
    if fault == "unsupported":
        raise NotImplementedError("injected: precision not implemented for this device (test-only)")
    if fault == "exit":
        os._exit(3)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "sleep":
        time.sleep(3600)
    raise ValueError(f"unknown test fault {fault!r} (expected one of {', '.join(FAULTS)})")


def read_text(path: str) -> str | None:
    """Contents of a small (sysfs/procfs) file, stripped, or ``None`` if unreadable."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_model() -> str | None:
    """CPU model name from /proc/cpuinfo (first ``model name``), or ``platform.processor()``."""
    text = read_text("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "cpu model"):
                return value.strip()
    return platform.processor() or None


#: CPU flags (``/proc/cpuinfo``) that decide how fast reduced precisions run: without one of
#: a precision's flags, oneDNN falls back to slow kernels (on an AVX2-only AMD EPYC, a bf16
#: 3x3 conv took 105 ms against 3.8 ms in fp32; on the AVX512-BF16 machine of the shipped
#: cpu-1t, bf16 ran at a median 0.84x fp32).
ISA_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "avx_ne_convert",
    "avx_vnni",
    "avx512_vnni",
    # Arm (the ``Features`` line): BF16 and half-precision arithmetic, SVE
    "bf16",
    "asimdhp",
    "fphp",
    "sve",
    "sve2",
    "i8mm",
)
#: precision -> the flags of which one makes it native on a CPU (x86 or Arm)
NATIVE_FLAGS = {
    "bf16": ("avx512_bf16", "amx_bf16", "avx_ne_convert", "bf16"),
    "fp16": ("avx512_fp16", "amx_fp16", "asimdhp"),
}


def cpu_isa() -> dict[str, Any]:
    """This CPU's instruction-set facts.

    ``flags`` (those of :data:`ISA_FLAGS` it has, from
    /proc/cpuinfo; ``None`` where unreadable), ``torch_capability`` (the kernels torch
    dispatches to: ``AVX2``, ``AVX512``, ...) and ``native`` (per reduced precision, whether
    the CPU runs it natively, :data:`NATIVE_FLAGS`; ``None`` without flags).
    """
    flags: list[str] | None = None
    text = read_text("/proc/cpuinfo")
    if text:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):  # x86, Arm
                have = set(value.split())
                flags = [f for f in ISA_FLAGS if f in have]
                break
    try:
        import torch

        capability: str | None = str(torch.backends.cpu.get_cpu_capability())
    except (ImportError, AttributeError):  # pragma: no cover
        capability = None
    native = None if flags is None else {p: any(f in flags for f in fs) for p, fs in NATIVE_FLAGS.items()}
    return {"flags": flags, "torch_capability": capability, "native": native}


def foreign_precisions(device: str, precisions: Any, isa: dict[str, Any] | None = None) -> list[str]:
    """Reduced precisions among ``precisions`` that this machine's CPU has no native kernels for.

    ``isa`` defaults to :func:`cpu_isa` (e.g. bf16 without AVX512_BF16 or AMX). Empty on a
    GPU, and where the CPU's flags cannot be read.
    """
    if not device.startswith("cpu"):
        return []
    native = (isa if isa is not None else cpu_isa())["native"]
    return [] if native is None else [p for p in precisions if native.get(p) is False]


def host_facts() -> dict[str, Any]:
    """Hostname, platform, Python, torch and carb versions."""
    from carb._version import __version__ as carb_version

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # pragma: no cover
        torch_version = None
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch_version,
        "carb": carb_version,
        "cpu_model": cpu_model(),
        "cpu_isa": cpu_isa(),
        "logical_cpus": os.cpu_count(),
    }


def send_reply(conn: Any, message: dict[str, Any]) -> None:
    """A worker's one reply, sent, and its end of the pipe closed.

    A parent that stopped waiting for this visit (it timed out, or lost sight of the worker when the
    forkserver it was forked from died) has closed its end: the reply has no reader, and the worker ends
    quietly instead of printing a traceback over the user's terminal.
    """
    try:
        conn.send(message)
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    finally:
        conn.close()


def wait_reply(proc: Any, conn: Any, deadline: float) -> tuple[Any, tuple[str, str] | None]:
    """A worker's next message before ``deadline`` (``time.perf_counter`` seconds).

    Returns ``(message, None)``, or ``(None, (status, message))`` for a timeout (the
    worker is killed and reaped) or a crash (the worker ended without replying). A worker
    that replied is left running: persistent workers (CUDA) serve more configs.
    """
    while True:
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            proc.kill()
            proc.join(5)
            return None, ("timeout", "timeout")
        if conn.poll(min(remaining, 0.25)):
            try:
                return conn.recv(), None
            except (EOFError, OSError):
                proc.join(5)
                return None, ("crash", exit_message(proc.exitcode))
        if not proc.is_alive():
            if conn.poll(0):  # it may have reported just before ending
                continue
            proc.join(5)
            return None, ("crash", exit_message(proc.exitcode))


def input_dims(config: Any) -> tuple[int, ...]:
    """The shape of the input a worker feeds a config's network.

    That is its ``input_shape`` where it has one, else ``(batch, 3, input_size, input_size)``.
    """
    shape = getattr(config, "input_shape", None)
    if isinstance(shape, str):
        return tuple(int(d) for d in shape.split("x"))
    if shape is not None:
        return tuple(int(d) for d in shape)
    return (config.batch, 3, config.input_size, config.input_size)


def builder_of(config: Any) -> Any:
    """The ``build`` function a worker uses for a config of another family than the ResNets.

    ``None`` for ResNets (the worker's ``arch.build``); see :mod:`carb.families`. Passed to
    the worker with the job (pickled by reference), so that a family registered at run time,
    not only through an entry point, also builds in a fresh worker process.
    """
    from carb.families.space import Config

    if isinstance(config, Config):
        return None
    own = getattr(config, "builder", None)  # a config that carries its own network (carb.measure.cost.ModuleConfig)
    if own is not None:
        return own
    from carb import families

    return families.of(config).build
