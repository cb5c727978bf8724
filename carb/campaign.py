"""Running a characterization campaign: measure configs on a backend into a store.

The campaign process is the store's single writer. It skips what the store already holds
for the platform (so re-running the same command resumes), measures the rest one config
at a time, and commits each result at once. A failing config becomes a row with a status;
the campaign goes on. Ctrl-C stops after the config in flight, keeping everything stored.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Sequence

from carb.measure.base import Backend, Measurement
from carb.space import Config
from carb.store import Store

__all__ = ["CampaignResult", "run_campaign", "platform_label"]


@dataclass
class CampaignResult:
    """What one campaign invocation did.

    Attributes:
        platform: the platform label the rows are stored under (e.g. ``cpu-1t``).
        requested: configs asked for.
        skipped: configs already in the store (resumed past).
        measured: configs measured now.
        by_status: count of configs measured now, per status.
        wall_s: wall-clock seconds of the campaign. Units: s.
        timed_s: seconds spent inside timed inference. Units: s.
        interrupted: True when stopped by Ctrl-C / SIGTERM before the end.
        run_id: id of the run in the store's ``runs`` table.
    """

    platform: str
    requested: int
    skipped: int
    measured: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    timed_s: float = 0.0
    interrupted: bool = False
    run_id: str = ""

    @property
    def overhead(self) -> float:
        """Campaign wall time divided by time inside timed inference (>= 1; lower is better)."""
        return self.wall_s / self.timed_s if self.timed_s > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overhead"] = self.overhead
        return d


def platform_label(backend: Backend) -> str:
    """The default platform label of a backend: ``cpu-<threads>t`` for CPUs (the thread
    count is part of the platform), the device's name slug for GPUs (e.g. ``nvidia-h200``)."""
    prov = backend.provenance()
    if backend.device == "cpu":
        return f"cpu-{prov.get('threads', '?')}t"
    name = str(prov.get("gpu_name") or prov.get("device_name") or backend.device)
    return "-".join(name.lower().replace("nvidia", "nvidia ").split())


def run_campaign(configs: Sequence[Config], backend: Backend, store: Store, *,
                 platform: str | None = None, command: str = "", retry_failed: bool = False,
                 remeasure: bool = False,
                 on_start: Callable[[int, int], None] | None = None,
                 on_config: Callable[[Config], None] | None = None,
                 on_result: Callable[[Config, Measurement], None] | None = None) -> CampaignResult:
    """Measure ``configs`` on ``backend`` into ``store``, resuming past stored ones.

    Args:
        configs: what to measure; duplicates are measured once.
        backend: an open measurement backend.
        store: the campaign store (the single writer).
        platform: label the rows are stored under; default :func:`platform_label`.
        command: the command line, recorded in the run's provenance.
        retry_failed: delete this platform's non-``ok`` rows among ``configs`` first, so
            that they are measured again.
        remeasure: measure every config again into the ``remeasurements`` table (drift
            checks) instead of resuming.
        on_start(todo, skipped): called once before measuring.
        on_config(config): called before each config is measured.
        on_result(config, measurement): called after each config is stored.
    """
    platform = platform or platform_label(backend)
    unique = list(dict.fromkeys(configs))
    if retry_failed and not remeasure:
        store.delete_failed(platform, (c.config_id for c in unique))
    done = set() if remeasure else store.done_ids(platform)
    todo = [c for c in unique if c.config_id not in done]
    result = CampaignResult(platform=platform, requested=len(unique), skipped=len(unique) - len(todo))
    if on_start:
        on_start(len(todo), result.skipped)
    if not todo:
        return result
    protocol = getattr(backend, "protocol", None)
    result.run_id = store.begin_run(platform, backend.device, backend.provenance(),
                                    protocol.to_dict() if protocol is not None else {}, command)
    t0 = time.monotonic()
    try:
        for cfg in todo:
            if on_config:
                on_config(cfg)
            m = backend.measure(cfg)
            store.add(cfg, platform, m, result.run_id, remeasure=remeasure)
            result.measured += 1
            result.by_status[m.status] = result.by_status.get(m.status, 0) + 1
            result.timed_s += m.timed_s
            if on_result:
                on_result(cfg, m)
    except KeyboardInterrupt:
        # Everything measured so far is committed; the config in flight is simply not stored.
        result.interrupted = True
    finally:
        result.wall_s = time.monotonic() - t0
    return result


def read_config_file(path: str) -> list[Config]:
    """Configs from a Parquet, CSV or JSON-lines file with parameter columns."""
    import pandas as pd

    from carb.space import SpaceError, configs_from_frame

    p = str(path)
    try:
        if p.endswith(".parquet"):
            df = pd.read_parquet(p)
        elif p.endswith(".csv"):
            df = pd.read_csv(p)
        elif p.endswith((".jsonl", ".json")):
            df = pd.read_json(p, lines=p.endswith(".jsonl"))
        else:
            raise SpaceError(f"{p}: unknown config file type (expected .parquet, .csv, .jsonl or .json)")
    except (OSError, ValueError) as e:
        if isinstance(e, SpaceError):
            raise
        raise SpaceError(f"{p}: cannot read configs ({str(e).splitlines()[0]})") from None
    if df.empty:
        raise SpaceError(f"{p}: no configs in the file")
    try:
        return configs_from_frame(df)
    except SpaceError as e:
        raise SpaceError(f"{p}: {e}") from None


def unique_configs(configs: Iterable[Config]) -> list[Config]:
    """Configs in first-seen order without duplicates."""
    return list(dict.fromkeys(configs))
