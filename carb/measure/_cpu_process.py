"""Facts about a CPU worker process and its machine: memory, frequency, allocator, load.

Private to the CPU backend (:mod:`carb.measure.cpu`): its worker reads them around a
measurement, its parent records them in provenance. Linux ``/proc`` and ``/sys`` files
where they exist; ``None`` (or a documented fallback) where they do not.
"""

from __future__ import annotations

import errno
import os
import resource
from typing import Any, Sequence

from ._common import read_text

__all__ = ["ALLOCATORS", "THP_PATH", "thp_mode"]


def _status_kb(*keys: str) -> dict[str, int]:
    """Fields of /proc/self/status in kB (missing ones omitted)."""
    out: dict[str, int] = {}
    text = read_text("/proc/self/status") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in keys:
            out[key] = int(value.split()[0])
    return out


def _reset_hwm() -> bool:
    """Reset this process's VmHWM to its current RSS (Linux >= 4.0). True on success."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _rss_kb() -> int:
    """Current resident set. Units: kB."""
    kb = _status_kb("VmRSS").get("VmRSS")
    if kb is not None:
        return kb
    statm = read_text("/proc/self/statm")
    if statm:
        return int(statm.split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux; best we have


#: where Linux says how transparent huge pages are used
THP_PATH = "/sys/kernel/mm/transparent_hugepage/enabled"


def thp_mode(path: str = THP_PATH) -> str | None:
    """The kernel's transparent-huge-page mode: ``always``, ``madvise`` or ``never``.

    The bracketed word of ``path``, or ``None`` where it cannot be read. Recorded because a
    process's resident-set peaks depend on it (a huge page makes 2 MB resident at once).
    """
    text = read_text(path)
    if not text:
        return None
    words = [w[1:-1] for w in text.split() if w.startswith("[") and w.endswith("]")]
    return words[0] if words else None


def _cpu_freq_mhz(cpus: Sequence[int]) -> tuple[float | None, str | None]:
    """Mean current frequency of ``cpus`` and its source (cpufreq sysfs or /proc/cpuinfo).

    Units: MHz. ``(None, None)`` when neither is readable.
    """
    vals = []
    for c in cpus:
        v = read_text(f"/sys/devices/system/cpu/cpu{c}/cpufreq/scaling_cur_freq")
        if v and v.isdigit():
            vals.append(int(v) / 1000.0)
    if vals:
        return sum(vals) / len(vals), "cpufreq"
    text = read_text("/proc/cpuinfo") or ""
    mhz = {}
    cpu = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "processor":
            cpu = int(value)
        elif key == "cpu MHz" and cpu is not None:
            mhz[cpu] = float(value)
    vals = [mhz[c] for c in cpus if c in mhz]
    if vals:
        return sum(vals) / len(vals), "/proc/cpuinfo"
    return None, None


def _libc() -> Any:
    """This process's C library through ctypes (glibc's ``malloc_trim``, ``mallopt``); ``None`` where unloadable."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6")
    except OSError:
        return None


def _malloc_trim() -> bool:
    """Return freed heap memory to the OS (glibc ``malloc_trim``); False where unavailable."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None and hasattr(libc, "malloc_trim") else False


#: How a CPU worker's C allocator (glibc malloc) keeps freed memory. ``default``: glibc's
#: own rules: blocks over a dynamic threshold (128 KiB, rising with what was freed) are
#: mapped and unmapped per call and the heap top is trimmed, so a forward can touch fresh
#: pages every time, and each page fault costs (up to x1.7 a zoo network's fault-free latency).
#: How many faults a forward takes depends on what the process allocated earlier, so one
#: layer timed alone and the same layer inside a network pay differently. ``retain``:
#: freed memory stays with the process (``mallopt``: no trimming, no mapping below 1 GiB),
#: the steady state of a long-running server (and of caching allocators such as jemalloc
#: or tcmalloc): no page fault after the first forward, whatever ran earlier.
ALLOCATORS = ("default", "retain")
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc malloc.h
_RETAIN_BYTES = 1 << 30


def _retain_freed_memory() -> bool:
    """Make this process keep freed memory (glibc ``mallopt``, see :data:`ALLOCATORS`); False where it cannot."""
    libc = _libc()
    if libc is None or not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_TRIM_THRESHOLD, _RETAIN_BYTES)) and bool(libc.mallopt(_M_MMAP_THRESHOLD, _RETAIN_BYTES))


def _glibc() -> bool:
    """Whether this Python runs on glibc (where ``mallopt`` tunes malloc)."""
    import platform

    return platform.libc_ver()[0] == "glibc"


def _minor_faults() -> int:
    """Minor page faults of this process so far (``getrusage``)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _loadavg() -> list[float] | None:
    """The system's 1, 5 and 15 minute load averages; ``None`` where unreadable."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


#: ``madvise`` advice that maps a range's pages into the page tables without writing them (Linux >= 5.14)
_MADV_POPULATE_READ = 22
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: pagemap entries read at a time (8 bytes each): bounded, so the reading adds no heap the baseline keeps
_PAGEMAP_CHUNK = 1 << 15


def _file_mappings(pid: int) -> list[tuple[int, int]]:
    """``(start, end)`` of the readable file-backed mappings of process ``pid`` (``/proc/<pid>/maps``)."""
    out = []
    for line in (read_text(f"/proc/{pid}/maps") or "").splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[1].startswith("r"):
            continue
        path = parts[5].strip()
        if not path.startswith("/") or path.startswith("/dev/") or path.endswith("(deleted)"):
            continue
        lo, _, hi = parts[0].partition("-")
        out.append((int(lo, 16), int(hi, 16)))
    return out


def _resident_runs(pid: int, keep: set[tuple[int, int]]) -> list[tuple[int, int]]:
    """Runs ``(address, bytes)`` of the pages process ``pid`` has mapped in its file-backed mappings.

    Only mappings in ``keep`` (the same ``(start, end)`` in this process) are read, so that
    every run lies in a mapping of this process. Read from ``/proc/<pid>/pagemap`` (bit 63
    of an entry: present). Empty where unreadable.
    """
    import numpy as np

    runs: list[tuple[int, int]] = []
    try:
        fd = os.open(f"/proc/{pid}/pagemap", os.O_RDONLY)
    except OSError:
        return runs
    try:
        for lo, hi in _file_mappings(pid):
            if (lo, hi) not in keep:
                continue
            for first in range(lo // _PAGE, hi // _PAGE, _PAGEMAP_CHUNK):
                n = min(_PAGEMAP_CHUNK, hi // _PAGE - first)
                raw = os.pread(fd, 8 * n, 8 * first)
                present = (np.frombuffer(raw, dtype="<u8") >> np.uint64(63)).astype(bool)
                if not present.any():
                    continue
                edges = np.flatnonzero(np.diff(np.concatenate(([0], present.view(np.int8), [0]))))
                for a, b in zip(edges[::2], edges[1::2]):
                    runs.append(((first + int(a)) * _PAGE, int(b - a) * _PAGE))
    except OSError:
        return []
    finally:
        os.close(fd)
    return runs


def prefault_parent_pages() -> int | None:
    """Map into this forked process the file-backed pages its parent has mapped; return their kB.

    A child forked from the preloaded forkserver starts without page-table entries for
    the shared libraries' pages (Linux copies none for file mappings at ``fork``): each
    page of torch's code it touches while building and running a network would count in
    its resident set, several MB a network more than the same network adds to a fresh
    process that imported torch. Mapping the parent's pages first puts them in the memory
    baseline, so a worker's peak memory is what the network adds to such a process.
    ``None`` where the parent's page map cannot be read or the pages cannot be mapped
    (then the measured memory includes those pages: an upper bound).
    """
    import ctypes

    own = set(_file_mappings(os.getpid()))
    runs = _resident_runs(os.getppid(), keep=own)
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
    except OSError:
        return None
    if not runs:
        return None
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    total = 0
    for addr, size in runs:
        if madvise(addr, size, _MADV_POPULATE_READ) != 0:
            if ctypes.get_errno() != errno.EINVAL:
                return None
            for a in range(addr, addr + size, _PAGE):  # a kernel before 5.14: read one byte a page
                ctypes.string_at(a, 1)
        total += size
    return total // 1024
