"""The repeat/stop protocol shared by every backend: statistics and the stopping rule.

Everything here is a pure function of its inputs (samples, elapsed time, a
:class:`~carb.measure.base.Protocol`), except :func:`warm_up` and :func:`run_samples`,
which drive caller-supplied callables and take the clock as an argument so that they can
be tested with a synthetic clock.

Confidence interval of the median
---------------------------------
:func:`median_ci` is distribution-free: it uses binomial order statistics. For ``n``
samples sorted as ``x(1) <= ... <= x(n)``, the number of samples below the true median is
``B ~ Binomial(n, 1/2)`` whatever the distribution (continuous), so
``P(x(j) <= median <= x(n-j+1)) >= 1 - 2 * P(B <= j - 1)``. We take the largest rank
``j`` with ``P(B <= j - 1) <= alpha / 2`` (``alpha = 1 - confidence``), computed exactly
with integer arithmetic, which gives coverage of at least ``confidence`` (conservative, as
the binomial is discrete). At 95% this needs ``n >= 6``; with fewer samples the interval
is undefined and the relative half-width is ``nan`` (so sampling goes on).

The relative half-width reported in :attr:`Stats.ci_rel` is
``(x(n-j+1) - x(j)) / 2 / |median|``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np

from .base import Protocol, Stats

__all__ = [
    "median_ci_ranks",
    "median_ci",
    "summarize",
    "check_protocol",
    "stop_reason",
    "iters_per_sample",
    "warm_up",
    "run_samples",
    "SampleRun",
    "STOP_REASONS",
]

#: Why sampling stopped: the CI target was met, or one of the caps was hit.
STOP_REASONS = ("ci", "max_repeats", "max_time")


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks ``(j, n - j + 1)`` of the order statistics bounding the median's CI.

    Distribution-free (binomial order statistics, see the module docstring): the largest
    ``j`` with ``P(Binomial(n, 1/2) <= j - 1) <= (1 - confidence) / 2``. Returns ``None``
    when no such ``j >= 1`` exists (too few samples: ``n < 6`` at 95%).
    """
    if n < 1:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} must be in (0, 1)")
    # exact: compare sum_{i<j} C(n, i) with alpha/2 * 2**n as rationals (no float overflow)
    limit = Fraction(1 - Fraction(confidence).limit_denominator(10**9), 2) * (2**n)
    cum = 0
    j = 0
    while j < n // 2 + 1:
        nxt = cum + math.comb(n, j)  # P(B <= j) * 2**n
        if nxt > limit:
            break
        cum = nxt
        j += 1
    if j < 1:
        return None
    return j, n - j + 1


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free ``confidence`` interval ``(lo, hi)`` of the median of ``samples``.

    Binomial order statistics (see the module docstring). Units: those of the samples.
    ``(nan, nan)`` when there are too few samples (``n < 6`` at 95%).
    """
    x = np.sort(np.asarray(samples, dtype=np.float64))
    ranks = median_ci_ranks(len(x), confidence)
    if ranks is None:
        return math.nan, math.nan
    lo, hi = ranks
    return float(x[lo - 1]), float(x[hi - 1])


def summarize(samples: Sequence[float], confidence: float = 0.95) -> Stats:
    """:class:`Stats` of the samples (units: those of the samples).

    ``p5``/``p95`` use linear interpolation between order statistics (numpy's default);
    ``min`` is the smallest sample;
    ``cov`` is the sample standard deviation (ddof=1) over the mean, ``nan`` for n < 2;
    ``ci_rel`` is the relative half-width of the distribution-free CI of the median
    (:func:`median_ci`), ``nan`` when undefined.

    Raises:
        ValueError: no samples.
    """
    x = np.asarray(samples, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        raise ValueError("summarize: no samples")
    med = float(np.median(x))
    mean = float(np.mean(x))
    p5, p95 = (float(v) for v in np.percentile(x, [5.0, 95.0]))
    cov = float(np.std(x, ddof=1) / mean) if n >= 2 and mean != 0 else math.nan
    lo, hi = median_ci(x, confidence)
    if math.isnan(lo) or med == 0:
        ci_rel = math.nan
    else:
        ci_rel = float((hi - lo) / 2.0 / abs(med))
    return Stats(median=med, mean=mean, p5=p5, p95=p95, cov=cov, n=n, ci_rel=ci_rel, min=float(x.min()))


def check_protocol(p: Protocol) -> Protocol:
    """Return ``p`` if its settings make sense, else raise ``ValueError`` naming the field."""
    if not p.ci_target > 0:
        raise ValueError(f"protocol: ci_target {p.ci_target!r} must be > 0")
    if p.min_repeats < 1:
        raise ValueError(f"protocol: min_repeats {p.min_repeats!r} must be >= 1")
    if p.max_repeats < p.min_repeats:
        raise ValueError(f"protocol: max_repeats {p.max_repeats!r} must be >= min_repeats {p.min_repeats!r}")
    if not p.max_time_s > 0:
        raise ValueError(f"protocol: max_time_s {p.max_time_s!r} must be > 0")
    if p.warmup < 0 or p.warmup_s < 0 or p.min_sample_s < 0:
        raise ValueError("protocol: warmup, warmup_s and min_sample_s must be >= 0")
    if not p.timeout_s > 0:
        raise ValueError(f"protocol: timeout_s {p.timeout_s!r} must be > 0")
    return p


def stop_reason(
    samples: Mapping[str, Sequence[float]], elapsed_s: float, protocol: Protocol, targets: Sequence[str] | None = None
) -> str | None:
    """Why sampling should stop now, or ``None`` to take another sample.

    Stops with ``"ci"`` once every target in ``targets`` (default: all keys of ``samples``)
    has at least ``min_repeats`` samples and a median CI (95%) within
    ``protocol.ci_target``; with ``"max_repeats"`` at ``max_repeats`` samples; with
    ``"max_time"`` once ``elapsed_s`` (seconds of sampling) reaches ``max_time_s``.
    The CI test comes first, so a run that meets it on its last allowed sample says so.
    """
    keys = list(samples) if targets is None else list(targets)
    n = min((len(samples[k]) for k in keys), default=0)
    if keys and n >= protocol.min_repeats:
        ok = True
        for k in keys:
            s = summarize(samples[k])
            if not (s.ci_rel <= protocol.ci_target):  # nan -> not met
                ok = False
                break
        if ok:
            return "ci"
    if n >= protocol.max_repeats:
        return "max_repeats"
    if elapsed_s >= protocol.max_time_s:
        return "max_time"
    return None


def iters_per_sample(per_iter_s: float, min_sample_s: float) -> int:
    """Forward passes per timed sample so that one sample lasts at least ``min_sample_s``.

    ``per_iter_s``: estimated seconds per forward (from the warm-up). Always >= 1.
    """
    if min_sample_s <= 0 or not per_iter_s > 0 or not math.isfinite(per_iter_s):
        return 1
    return max(1, math.ceil(min_sample_s / per_iter_s))


def warm_up(
    step: Callable[[], None], protocol: Protocol, clock: Callable[[], float] = time.perf_counter
) -> tuple[int, float]:
    """Run ``step`` (one forward, synchronised) ``protocol.warmup`` times and ``protocol.warmup_s`` seconds.

    Each at least (and at least once).

    Returns ``(iterations, per_iter_s)`` where ``per_iter_s`` is the mean duration of the
    second half of the warm-up (the first calls pay one-off costs). Units: s.
    """
    durations: list[float] = []
    t_start = clock()
    while True:
        t0 = clock()
        step()
        t1 = clock()
        durations.append(t1 - t0)
        if len(durations) >= max(1, protocol.warmup) and t1 - t_start >= protocol.warmup_s:
            break
    tail = durations[len(durations) // 2 :]
    return len(durations), float(sum(tail) / len(tail))


@dataclass
class SampleRun:
    """What :func:`run_samples` collected.

    Attributes:
        samples: target name -> list of per-forward values (target units).
        stop_reason: one of :data:`STOP_REASONS`.
        elapsed_s: seconds from the first sample's start to the last one's end.
    """

    samples: dict[str, list[float]] = field(default_factory=dict)
    stop_reason: str = ""
    elapsed_s: float = 0.0

    def stats(self) -> dict[str, Stats]:
        """:func:`summarize` of each target."""
        return {k: summarize(v) for k, v in self.samples.items() if v}


def run_samples(
    sample: Callable[[], Mapping[str, float]],
    protocol: Protocol,
    targets: Sequence[str] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> SampleRun:
    """Call ``sample`` (one timed sample, returning target -> value) until :func:`stop_reason` says stop.

    ``targets`` are the keys the CI rule applies to
    (default: every key ``sample`` returns); other keys are collected but do not hold
    sampling up.
    """
    run = SampleRun()
    t_start = clock()
    while True:
        values = sample()
        for k, v in values.items():
            run.samples.setdefault(k, []).append(float(v))
        run.elapsed_s = clock() - t_start
        keys = [k for k in (targets if targets is not None else run.samples) if k in run.samples]
        why = stop_reason({k: run.samples[k] for k in keys}, run.elapsed_s, protocol, keys)
        if why is not None:
            run.stop_reason = why
            return run
