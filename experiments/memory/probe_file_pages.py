"""Which pages a fresh process's first forward adds: anonymous (tensors, heap) or file-backed (library code).

    taskset -c 1 python experiments/memory/probe_file_pages.py

One fresh process (run this file): import torch, glibc's allocator set as CARB's worker's ``retain``, a
small 1-D convolutional network built, then five forwards of one 16,000-sample input under
``torch.inference_mode``. It prints ``VmRSS``, ``VmHWM`` and ``/proc/self/smaps_rollup``'s anonymous
and file-backed resident pages (MB = 2**20 bytes) after the imports, once the network is built and
after the forwards, and the peak over the post-import baseline in MB (1e6 bytes), the harness's
definition (``benchmarks/bench_deployed.py``). Rerun it at two moments of one VM to see which part
of a fresh-process peak moves between them.
"""

from __future__ import annotations

import ctypes
import re

import torch

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3


def state() -> dict[str, float]:
    """This process's resident and peak memory, and its anonymous and file-backed resident pages (MiB)."""
    status = open("/proc/self/status").read()
    rollup = open("/proc/self/smaps_rollup").read()

    def kb(text: str, key: str) -> float:
        return int(re.search(key + r":\s+(\d+)", text).group(1)) / 1024

    return {
        "rss": kb(status, "VmRSS"),
        "hwm": kb(status, "VmHWM"),
        "anon": kb(rollup, "Anonymous"),
        "file": kb(rollup, "Rss") - kb(rollup, "Anonymous"),
    }


def main() -> None:
    torch.set_num_threads(1)
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
    libc.mallopt(M_MMAP_THRESHOLD, 1 << 30)
    imported = state()
    net = torch.nn.Sequential(torch.nn.Conv1d(1, 32, 80, 4), torch.nn.ReLU(), torch.nn.Conv1d(32, 32, 3)).eval()
    x = torch.randn(1, 1, 16000)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak restarts once the network is built
    built = state()
    with torch.inference_mode():
        for _ in range(5):
            net(x)
    ran = state()
    for name, s in (("after import", imported), ("built", built), ("after forwards", ran)):
        print(name, {k: round(v, 1) for k, v in s.items()})
    print(
        f"forwards added: file {ran['file'] - built['file']:.1f} MiB, anonymous {ran['anon'] - built['anon']:.1f} MiB"
    )
    print(f"peak over the post-import baseline: {(ran['hwm'] - imported['rss']) * 1.048576:.1f} MB")


if __name__ == "__main__":
    main()
