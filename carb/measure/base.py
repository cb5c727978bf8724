"""The measurement interface shared by every backend.

A backend measures one config of any registered family (:class:`ConfigLike`) at a time and
returns a :class:`Measurement`; it never raises for a config-level failure (OOM, exception, timeout,
worker crash): those come back as a Measurement with a non-``ok`` status and a message, so
that a campaign goes on. Adding a vendor (AMD, Apple) is one new module implementing
:class:`Backend`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any
from typing import Protocol as TypingProtocol

__all__ = ["Stats", "Protocol", "Measurement", "Backend", "ConfigLike", "STATUSES"]

#: Row statuses. ``ok`` rows carry targets; the others carry a message.
STATUSES = ("ok", "oom", "error", "timeout", "crash", "unsupported")


class ConfigLike(TypingProtocol):
    """A config of any registered family (:mod:`carb.families`): what a backend reads of it.

    ResNet, FBNet, NAS-Bench-201, layer, zoo and user-network configs all qualify; the
    worker builds the network through the family's ``build`` (:func:`carb.families.of`).
    """

    @property
    def config_id(self) -> str:
        """The config's stable id (the store's key)."""

    @property
    def batch(self) -> int:
        """Images per forward pass."""

    @property
    def input_size(self) -> int:
        """Input height = width. Units: px."""

    @property
    def precision(self) -> str:
        """``fp32``, ``fp16`` or ``bf16``."""

    def label(self) -> str:
        """A short human-readable name of the config."""


@dataclass(frozen=True)
class Stats:
    """Summary of repeated samples of one target (all in the target's unit).

    Attributes:
        median, mean, p5, p95: of the samples.
        cov: coefficient of variation, std / mean (unitless).
        n: number of samples.
        ci_rel: half-width of the 95% confidence interval of the median, divided by the
            median (unitless); ``nan`` when n is too small to say.
        min: the fastest (smallest) sample: the least disturbed by other work on the
            machine, since contention only ever adds time. A slow-down of the whole machine
            that lasts minutes moves it too; the speed sentinel corrects that. ``nan`` where
            unknown (stores and datasets that do not keep it).
    """

    median: float
    mean: float
    p5: float
    p95: float
    cov: float
    n: int
    ci_rel: float
    min: float = math.nan


@dataclass(frozen=True)
class Protocol:
    """The repeat/stop protocol, one for every backend.

    Warm up for ``warmup`` iterations and at least ``warmup_s`` seconds, then take timed
    samples until the 95% CI of the median is within ``ci_target`` (relative) with at least
    ``min_repeats`` samples, or until ``max_repeats`` samples or ``max_time_s`` seconds of
    sampling. A config whose whole measurement exceeds ``timeout_s`` is stopped and
    recorded with status ``timeout``.

    Attributes:
        ci_target: relative half-width of the median's 95% CI to stop at (0.02 = 2%).
        min_repeats / max_repeats: bounds on the number of timed samples.
        max_time_s: cap on the sampling time of one config, seconds.
        warmup: warm-up iterations (not timed).
        warmup_s: minimum warm-up time, seconds.
        min_sample_s: a timed sample repeats the forward pass until it lasts this long
            (seconds), so that clock resolution and per-call overheads stay negligible;
            the sample is then the per-forward mean.
        timeout_s: wall-clock limit for one config, seconds (model build included).
    """

    ci_target: float = 0.02
    min_repeats: int = 5
    max_repeats: int = 200
    max_time_s: float = 10.0
    warmup: int = 2
    warmup_s: float = 0.1
    min_sample_s: float = 0.0
    timeout_s: float = 300.0

    def to_dict(self) -> dict[str, Any]:
        """The protocol as a JSON-ready dict."""
        return asdict(self)

    @classmethod
    def default_for(cls, device: str) -> "Protocol":
        """Defaults: 2% CI target on CPUs, 1% on GPUs (plus a window long enough for NVML)."""
        if device.startswith("cuda"):
            return cls(ci_target=0.01, min_sample_s=0.0)
        return cls(ci_target=0.02)


@dataclass
class Measurement:
    """The result of measuring one config on one device.

    Attributes:
        status: one of :data:`STATUSES`.
        message: why the status is not ``ok`` (empty when ok).
        latency_ms: per-forward latency of the whole batch. Units: ms.
        energy_j: net energy per forward of the whole batch (gross minus idle power x time).
            Units: J. ``None`` when the device has no readable energy sensor.
        energy_gross_j: gross energy per forward. Units: J.
        memory_mb: peak memory of inference (definition per backend, see its docstring).
            Units: MB (10**6 bytes).
        energy_missing_reason: why energy is ``None`` (e.g. "RAPL not readable").
        timed_s: seconds spent inside timed inference (for overhead accounting).
        wall_s: wall-clock seconds for the whole config, build and warm-up included.
        extra: per-config telemetry: clocks (MHz), temperature (C), power (W),
            throttle reasons, threads, ... (JSON-serialisable).
    """

    status: str
    message: str = ""
    latency_ms: Stats | None = None
    energy_j: Stats | None = None
    energy_gross_j: Stats | None = None
    memory_mb: float | None = None
    energy_missing_reason: str | None = None
    timed_s: float = 0.0
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The measurement as a dict (its stats as dicts)."""
        return asdict(self)


class Backend(ABC):
    """A device that measures configs.

    Use as a context manager; :meth:`close` must restore whatever the backend changed on the
    device (e.g. locked clocks).
    """

    #: device string, e.g. ``cpu`` or ``cuda:0``
    device: str

    @abstractmethod
    def provenance(self) -> dict[str, Any]:
        """Facts about the device and software for the store (JSON-serialisable).

        Device name, CPU/GPU model, driver, CUDA, torch and carb versions, clocks, threads,
        power limits, energy sensor availability.
        """

    @abstractmethod
    def measure(self, config: ConfigLike, protocol: Protocol | None = None) -> Measurement:
        """Measure one config of any registered family.

        Args:
            config: the config to measure (:class:`ConfigLike`).
            protocol: overrides the backend's repeat/stop protocol for this call.

        Returns:
            The measurement; config-level failures (OOM, exception, timeout, crash) come
            back as a non-``ok`` status, never raised.
        """

    def close(self) -> None:
        """Release the device and restore any setting the backend changed."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
