"""The demo's inputs checked before the source model is trained: the device, its threads, the source dataset."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._settings import DemoSettings

__all__ = ["check_demo"]


def check_demo(
    device: str = "cpu",
    threads: int | None = None,
    source: str | None = None,
    precisions: Sequence[str] | None = None,
    space: str = DemoSettings.space,
) -> None:
    """Refuse, before any work, a device this machine cannot measure on, its threads, or a source it cannot learn.

    Args:
        device: ``cpu``, ``cuda`` or ``cuda:<index>``.
        threads: CPU threads (``None``: the default).
        source: the dataset the source model is trained on (``None``: the shipped ``cpu-1t``).
        precisions: the precisions of ``space`` to screen (``None``: the default).
        space: the space the demo screens.

    Raises:
        ValueError: threads off the CPU, an unknown or absent device, a precision the space lacks, a source that
            is unreadable, has no measured latency or holds rows of another family than the cpu space's.
    """
    if device != "cpu" and threads is not None:
        raise ValueError("threads applies to device=cpu only")
    d = device.strip().lower()
    m = re.fullmatch(r"cuda(?::(\d+))?", d)
    if d != "cpu" and m is None:
        raise ValueError(f"device {device!r}: unknown device (expected cpu, cuda or cuda:<index>)")
    if m is not None:
        import torch

        if int(m.group(1) or 0) >= torch.cuda.device_count():
            raise ValueError(f"device {device}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    if precisions:
        from carb.families.space import SpaceError
        from carb.transfer.here import space_frame

        try:
            space_frame(space, precisions)
        except SpaceError as e:  # "precision bf16: not in space cpu (...)"
            raise ValueError(str(e)) from None
    if source is not None:
        _check_source(source)


def _check_source(source: str) -> None:
    """Refuse a source dataset the demo's source model cannot learn."""
    from carb import datasets
    from carb.families.resnet import FAMILIES

    try:
        src = datasets.load(source, features=False)
    except ValueError as e:
        raise ValueError(f"source {source}: {e}") from None
    if "depth" not in src.columns or "latency_ms" not in src.columns or not src["latency_ms"].notna().any():
        raise ValueError(f"source {source}: not a dataset of the cpu space's configs with measured latency")
    others = sorted(set(map(str, src["family"].dropna())) - set(FAMILIES)) if "family" in src.columns else []
    if others:  # the source model learns the cpu space's ResNets: a net row would end its fit in a traceback
        raise ValueError(
            f"source {source}: rows of family {', '.join(others)}; the demo's source model learns the cpu "
            f"space's configs (families {', '.join(FAMILIES)}) only"
        )
