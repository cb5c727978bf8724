"""carb.measure.sentinel: the effective sentinel of pooled samples, the pairing switch and the
paired sentinel's formula (synthetic samples), and the CPU backend timing a paired sentinel
inside a visit (a real worker on this CPU)."""

import numpy as np
import pytest

from carb.families.space import Config
from carb.measure.base import Protocol
from carb.measure.sentinel import CPU_SENTINEL, effective_sentinel_ms
from tests._helpers import SENT


def test_effective_sentinel_matches_per_sample_normalization():
    samples = [[10.0, 10.2, 9.9], [12.0, 12.5, 11.8, 12.1]]
    sent = [2.0, 2.4]
    eff = effective_sentinel_ms(samples, sent)
    per_sample = np.median(np.concatenate([np.array(v) / s for v, s in zip(samples, sent)]))
    assert np.median(np.concatenate(samples)) / eff == pytest.approx(per_sample)
    assert effective_sentinel_ms([[5.0, 5.0]], [1.7]) == pytest.approx(1.7)


def test_pairing_switch_and_paired_sentinel_formula():
    from carb.measure.sentinel import Pairing, paired_sentinel_ms

    assert CPU_SENTINEL.pairing() == Pairing(
        CPU_SENTINEL.configs[0], CPU_SENTINEL.pair_every_s, CPU_SENTINEL.pair_sample_s, CPU_SENTINEL.pair_share
    )
    from dataclasses import replace as dc_replace

    assert dc_replace(CPU_SENTINEL, pair=False).pairing() is None
    assert dc_replace(CPU_SENTINEL, configs=(SENT, SENT)).pairing() is None
    visits = [
        {"latency_samples_ms": [2.0, 4.0, 6.0], "pair_ratio": [2.0, 4.0]},
        {"latency_samples_ms": [8.0], "pair_ratio": [3.0]},
    ]
    assert paired_sentinel_ms(visits) == 5.0 / 3.0  # median(2,4,6,8) / median(2,4,3)
    assert paired_sentinel_ms([visits[0], {"latency_samples_ms": [1.0]}]) is None  # one visit unpaired


def test_cpu_backend_times_the_paired_sentinel_inside_a_visit(tmp_path):
    """Real worker on this CPU: the visit carries its paired sentinel blocks; a visit of the
    sentinel's own config is not paired with itself."""
    from carb.measure.cpu import CpuBackend
    from carb.measure.sentinel import Pairing

    cfg = Config(
        family="cifar",
        block="basic",
        depth=8,
        width=0.25,
        early_downsample=False,
        input_size=32,
        batch=2,
        precision="fp32",
        classes=10,
    )
    with CpuBackend(threads=1, protocol=Protocol(max_time_s=0.3, ci_target=1e-6)) as b:
        b.paired_sentinel = Pairing(CPU_SENTINEL.configs[0])
        m = b.measure(cfg)
        own = b.measure(CPU_SENTINEL.configs[0])
        b.paired_sentinel = None
        alone = b.measure(cfg)
    assert m.status == "ok", m.message
    assert len(m.extra["pair_ratio"]) >= 2 and len(m.extra["pair_ratio"]) == len(m.extra["pair_sentinel_ms"])
    assert all(r > 0 for r in m.extra["pair_ratio"]) and 0 < m.extra["pair_share"] < 1
    assert m.memory_mb is not None and m.memory_mb > 0
    assert own.status == "ok" and "pair_ratio" not in own.extra
    # memory means what it means unpaired: read before the sentinel exists (built first, its
    # runtime buffers made the config read ~17 MB less; run during the peak, ~1-2 MB more)
    assert alone.status == "ok" and abs(m.memory_mb - alone.memory_mb) < 0.1 * alone.memory_mb
    assert "pair_ratio" not in alone.extra
