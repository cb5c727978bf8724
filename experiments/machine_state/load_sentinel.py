"""The speed sentinel read under k busy processes (k = 0..3) on this machine: how far load moves it.

Writes one JSON line per level to stdout: the load average before, the readings (ms), their CIs, the time taken.
Run: python experiments/machine_state/load_sentinel.py
"""

import json
import multiprocessing as mp
import os
import time

from carb.campaign.state import read_sentinel


def spin(stop):
    while not stop.is_set():
        sum(range(10000))


if __name__ == "__main__":
    for k in (0, 1, 2, 3):
        stop = mp.Event()
        procs = [mp.Process(target=spin, args=(stop,), daemon=True) for _ in range(k)]
        for p in procs:
            p.start()
        time.sleep(2.0)
        t0 = time.perf_counter()
        load = os.getloadavg()[0]
        r = read_sentinel("cpu", 1, n=5)
        stop.set()
        for p in procs:
            p.join()
        print(
            json.dumps(
                {
                    "busy": k,
                    "load_before": load,
                    "ms": [round(x, 4) for x, _ in r],
                    "ci": [round(c, 4) for _, c in r],
                    "s": round(time.perf_counter() - t0, 2),
                }
            ),
            flush=True,
        )
        time.sleep(3.0)
