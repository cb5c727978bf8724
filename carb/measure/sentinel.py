"""The speed sentinel: a small fixed workload timed at regular moments of every campaign.

A shared machine changes speed by tens of percent over minutes (through the host's shared
caches and memory, not descheduling). A campaign cannot stop that, but it can
watch it: between visits it measures the sentinel, a fixed config of the space, with the
same backend, worker, threads and pinning as every config (it *is* measured like a config,
so it feels what they feel). Each reading goes to the store's ``speed_index`` table; each
measured row records the sentinel around its measurement time (``sentinel_ms``: the
median of the readings within ``window_s / 2`` of each visit) and its latency at the
platform's median speed
(``latency_ms_norm = latency_ms * median reading / sentinel_ms``).

Which workload tracks the speed of real configs: :data:`CPU_SENTINEL`
(``experiments/sentinel/choose_sentinel.py`` compares candidates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from carb.families.space import Config

from .base import ConfigLike, Measurement, Protocol

__all__ = [
    "Sentinel",
    "Pairing",
    "Reading",
    "paired_sentinel_ms",
    "CPU_SENTINEL",
    "SENTINEL_PROTOCOL",
    "effective_sentinel_ms",
]

#: a short burst per reading: samples of >= 10 ms of forwards (a per-forward median of a
#: sub-millisecond net is blind to the time slices other processes take of the core, which
#: slow every real config), until the median's 95% CI is within 1%
#: or for 0.25 s (about 25 samples on an idle core; fewer than 6 on a heavily shared one,
#: whose reading then has no CI and is not used), after a 0.02 s warm-up
SENTINEL_PROTOCOL = Protocol(
    ci_target=0.01,
    min_repeats=6,
    max_repeats=400,
    max_time_s=0.25,
    warmup=2,
    warmup_s=0.02,
    min_sample_s=0.01,
    timeout_s=60.0,
)


@dataclass(frozen=True)
class Reading:
    """One reading of the sentinel.

    Attributes:
        sentinel_ms: geometric mean of the sentinel configs' median latencies. Units: ms.
        ci_rel: the largest relative 95% CI half-width of those medians (unitless).
        wall_s: wall-clock cost of the reading (workers, build, warm-up). Units: s.
        detail: per-config medians (ms) and the sentinel's name.
    """

    sentinel_ms: float
    ci_rel: float
    wall_s: float
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Pairing:
    """The sentinel timed in alternation with a config inside its visit.

    After every ``every_s`` seconds of the config's samples, one sentinel sample of at least
    ``sample_s`` seconds of forwards. The visit records each block's ratio (median config
    sample over the sentinel's per-forward time), whose median is the config's latency in
    sentinel units: the machine's speed at that moment cancels out of it.

    The visit runs in two phases: the config alone for ``1 - share`` of its sampling time,
    which gives the raw latency, energy and peak memory exactly as an unpaired visit does
    (the peak is read before the sentinel exists); then the blocks for the rest (sentinel
    samples take about a third of that phase), which give only the ratios.

    Attributes:
        config: the sentinel's config.
        every_s: seconds of config samples per block. Units: s.
        sample_s: minimum length of a sentinel sample. Units: s.
        share: share of the visit's sampling time (``max_time_s``) given to the paired phase.
    """

    config: ConfigLike
    every_s: float = 0.02
    sample_s: float = 0.01
    share: float = 0.5


@dataclass(frozen=True)
class Sentinel:
    """A fixed workload whose speed stands for the machine's.

    Attributes:
        configs: the configs measured at each reading (usually one); a reading is the
            geometric mean of their median latencies.
        protocol: the protocol of a sentinel visit (short: see :data:`SENTINEL_PROTOCOL`).
        every_s: seconds of campaign between readings (one more at the start and one at
            the end). Units: s.
        window_s: a visit's sentinel is the median of the readings within ``window_s / 2``
            of it (the nearest one when none is): a single reading is noisy (a few % to
            tens of % on a loaded machine), a campaign's level is not; ``0`` interpolates
            the readings linearly instead. Units: s.
        max_ci_rel: a reading whose median's relative 95% CI is wider than this (or
            undefined) is stored but used for nothing: a sentinel noisier than the drift it
            would correct only adds noise (readings on a loaded 2-core machine reach ±25%).
        name: what the readings are called in the store.
        pair: also time the sentinel *inside* every config's visit, in alternation with
            the config's samples (:class:`Pairing`): each visit then carries its own
            sentinel, taken at the same moments as its samples: readings between visits
            do not follow the configs' speed on a shared machine, paired ones do.
        pair_every_s: seconds of config samples between two paired sentinel samples. Units: s.
        pair_sample_s: length of one paired sentinel sample. Units: s.
        pair_share: share of each visit's sampling time in the paired phase (:class:`Pairing`).
    """

    configs: tuple[ConfigLike, ...]
    protocol: Protocol = SENTINEL_PROTOCOL
    every_s: float = 60.0
    window_s: float = 180.0
    max_ci_rel: float = 0.05
    name: str = "cpu-sentinel"
    pair: bool = True
    pair_every_s: float = 0.02
    pair_sample_s: float = 0.01
    pair_share: float = 0.5

    def pairing(self) -> "Pairing | None":
        """How a backend times this sentinel in alternation with every config.

        ``None`` when ``pair`` is off or the sentinel has several configs.
        """
        if not self.pair or len(self.configs) != 1:
            return None
        return Pairing(self.configs[0], every_s=self.pair_every_s, sample_s=self.pair_sample_s, share=self.pair_share)

    def reading(self, measurements: Sequence[Measurement]) -> Reading | None:
        """The reading from one measurement per config (``None`` if any failed)."""
        if len(measurements) != len(self.configs) or any(
            m.status != "ok" or m.latency_ms is None for m in measurements
        ):
            return None
        med = [m.latency_ms.median for m in measurements]  # type: ignore[union-attr]
        ci = [m.latency_ms.ci_rel for m in measurements]  # type: ignore[union-attr]
        ci_ok = [c for c in ci if c is not None and math.isfinite(c)]
        return Reading(
            sentinel_ms=float(np.exp(np.mean(np.log(med)))),
            ci_rel=max(ci_ok) if ci_ok else math.nan,
            wall_s=float(sum(m.wall_s for m in measurements)),
            detail={"sentinel": self.name, "median_ms": {c.label(): v for c, v in zip(self.configs, med)}},
        )


#: The CPU sentinel: the small CIFAR ResNet-8 (width 0.5, 32 px, batch 1, fp32; ~0.6 ms a forward) timed in
#: samples of >= 10 ms; of four cpu-space candidates it follows real configs' speed best, at the lowest cost.
CPU_SENTINEL = Sentinel(
    configs=(
        Config(
            family="cifar",
            block="basic",
            depth=8,
            width=0.5,
            early_downsample=False,
            input_size=32,
            batch=1,
            precision="fp32",
            classes=10,
        ),
    )
)


def paired_sentinel_ms(extras: Sequence[dict[str, Any]]) -> float | None:
    """The sentinel of a config from its visits' paired samples (``extra`` of each visit, :class:`Pairing`).

    It is ``median(all latency samples) / median(all block ratios)``, so that
    ``latency_ms * ref / value`` is the median ratio at the reference speed ``ref``. ``None``
    unless every visit has paired samples. Units: ms.
    """
    x: list[float] = []
    r: list[float] = []
    for e in extras:
        ratios, samples = e.get("pair_ratio"), e.get("latency_samples_ms")
        if not ratios or not samples:
            return None
        x.extend(float(v) for v in samples)
        r.extend(float(v) for v in ratios)
    med_r = float(np.median(r))
    return float(np.median(x)) / med_r if med_r > 0 else None


def effective_sentinel_ms(samples: Sequence[Sequence[float]], sentinel_ms: Sequence[float]) -> float:
    """The one sentinel value of a config measured in several visits.

    Visit ``i`` has latency samples ``samples[i]`` (ms) taken while the sentinel read ``sentinel_ms[i]``.

    Defined so that ``median(all samples) * ref / value`` equals the median of every
    sample normalized by its own visit's sentinel (``x * ref / s_i``): each sample is
    corrected for the speed of its moment, and the pooled row keeps one number. Units: ms.
    """
    x = np.concatenate([np.asarray(v, float) for v in samples])
    u = np.concatenate([np.asarray(v, float) / s for v, s in zip(samples, sentinel_ms)])
    return float(np.median(x) / np.median(u))
