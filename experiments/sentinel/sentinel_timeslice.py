"""Does a sentinel see the time slices other processes take of its core? (issue 16)

In this process (pinned with ``taskset``, 1 thread), the sentinel net (CIFAR ResNet-8, width
0.5, 32 px, batch 1, fp32) is timed with one forward a sample and with samples of >= 5, 20
and 100 ms, and a real config (ResNet-20, width 1, batch 8) one forward a sample; each for
1.5 s, median and mean per forward (ms). Run it alone, then with a busy loop on the same
core, and compare:

    taskset -c 1 python benchmarks/sentinel_timeslice.py
    taskset -c 1 python -c "while True: pass" &  taskset -c 1 python benchmarks/sentinel_timeslice.py; kill %1
"""

from __future__ import annotations

import time

import numpy as np


def timeit(config, sample_s: float, seconds: float = 1.5) -> tuple[float, float]:
    import torch

    from carb.families import arch

    model = arch.build(config).eval()
    x = torch.randn(config.batch, 3, config.input_size, config.input_size)
    with torch.inference_mode():
        for _ in range(5):
            model(x)
        t0, k = time.perf_counter(), 0
        while time.perf_counter() - t0 < 0.1:
            model(x)
            k += 1
        n = max(1, int(sample_s / ((time.perf_counter() - t0) / k)))
        out = []
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            a = time.perf_counter_ns()
            for _ in range(n):
                model(x)
            out.append((time.perf_counter_ns() - a) / 1e6 / n)
    return float(np.median(out)), float(np.mean(out))


def main() -> None:
    import torch

    from carb.families.space import Config

    torch.set_num_threads(1)
    small = Config(
        family="cifar",
        block="basic",
        depth=8,
        width=0.5,
        early_downsample=False,
        input_size=32,
        batch=1,
        precision="fp32",
        classes=10,
    )
    real = Config(
        family="cifar",
        block="basic",
        depth=20,
        width=1.0,
        early_downsample=False,
        input_size=32,
        batch=8,
        precision="fp32",
        classes=10,
    )
    for name, c, s in (
        ("sentinel, 1 forward a sample", small, 0.0),
        ("sentinel, >= 5 ms samples", small, 0.005),
        ("sentinel, >= 20 ms samples", small, 0.02),
        ("sentinel, >= 100 ms samples", small, 0.1),
        ("ResNet-20 w1 b8, 1 forward a sample", real, 0.0),
    ):
        med, mean = timeit(c, s)
        print(f"{name:<38} median {med:8.3f} ms   mean {mean:8.3f} ms")


if __name__ == "__main__":
    main()
