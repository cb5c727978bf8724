"""Where a campaign's measurements run: this process's backend or the slots of a cluster.

The campaign process stays the store's single writer: an :class:`Executor` only turns a
stream of :class:`Job` into a stream of ``(job, measurement)`` pairs, in completion order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterator

from carb.measure.base import Backend, ConfigLike, Measurement, Protocol

__all__ = ["Executor", "Job", "LocalExecutor", "platform_label"]


def platform_label(backend: Backend) -> str:
    """The default platform label of a backend.

    ``cpu-<threads>t`` for CPUs (the thread count is part of the platform), the device's
    name slug for GPUs (e.g. ``nvidia-h200``).
    """
    return _label(backend.device, backend.provenance())


def _label(device: str, prov: dict[str, Any]) -> str:
    if device == "cpu":
        return f"cpu-{prov.get('threads', '?')}t"
    name = str(prov.get("gpu_name") or prov.get("device_name") or device)
    return "-".join(name.lower().replace("nvidia", "nvidia ").split())


@dataclass(frozen=True)
class Job:
    """One visit of one config.

    Attributes:
        config: the config to measure, of any registered family.
        round_: its round (0 when rounds are not pooled; ``-1`` for a sentinel reading).
        protocol: the visit's protocol (``None``: the backend's own).
        kind: ``visit``, or ``sentinel`` for a speed sentinel reading (measured like a
            config, never stored as one).
    """

    config: ConfigLike
    round_: int = 0
    protocol: Protocol | None = None
    kind: str = "visit"


class Executor(ABC):
    """Where a campaign's measurements run.

    This process's backend (:class:`LocalExecutor`) or the worker slots of a cluster
    (:class:`carb.campaign.ray_executor.RayExecutor`).
    """

    device: str
    protocol: Protocol | None

    @abstractmethod
    def provenance(self) -> dict[str, Any]:
        """What the run's ``runs`` row records about the machine(s) measuring."""

    def platform(self) -> str:
        """The default platform label of the rows (see :func:`platform_label`)."""
        return _label(self.device, self.provenance())

    @abstractmethod
    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Measure ``jobs`` and yield each with its measurement as it completes.

        Jobs are pulled lazily, so later jobs may depend on earlier results.
        """

    def close(self) -> None:
        """Release what the executor holds (workers, clusters)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Measure one job at a time on a backend of this process (the default)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.device = backend.device
        self.protocol = getattr(backend, "protocol", None)

    def provenance(self) -> dict[str, Any]:
        """The backend's provenance."""
        return self.backend.provenance()

    def run(self, jobs: Iterator[Job]) -> Iterator[tuple[Job, Measurement]]:
        """Measure each job on the backend, one at a time, as it is pulled."""
        for job in jobs:
            m = (
                self.backend.measure(job.config)
                if job.protocol is None
                else self.backend.measure(job.config, protocol=job.protocol)
            )
            yield job, m
