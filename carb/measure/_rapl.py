"""RAPL energy zones of this machine, found through Zeus and read directly (:mod:`carb.measure.cpu`).

Zeus (``zeus.device.cpu``) finds the zones, their names, ranges and permission errors; the
``energy_uj`` reads are ours (see the CPU backend's docstring for why), with one wrap-around
handled arithmetically (:func:`rapl_delta_uj`).
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from typing import Sequence

from ._common import one_line

__all__ = ["Rapl", "rapl_delta_uj"]


def rapl_delta_uj(before: int, after: int, max_range_uj: int) -> int:
    """Energy between two RAPL ``energy_uj`` readings, handling one wrap-around.

    The counter counts up to ``max_energy_range_uj`` and restarts at 0. Units: uJ.
    """
    if after >= before:
        return after - before
    return after + (max_range_uj - before)


@dataclass
class Rapl:
    """The RAPL energy zones of this machine (absent hardware is an object too).

    Attributes:
        domains: sysfs directories of the package zones, one per socket (Zeus's
            ``RAPLCPU``; a ``psys`` platform zone is left out: it contains the packages).
        max_range_uj: each package zone's ``max_energy_range_uj``. Units: uJ.
        dram: each package's ``dram`` sub-zone directory, or ``None`` where it has none.
        dram_max_range_uj: the DRAM zones' ranges (``None`` where absent). Units: uJ.
        reason: why energy is unavailable (``None`` when readable).
    """

    domains: tuple[str, ...] = ()
    max_range_uj: tuple[int, ...] = ()
    dram: tuple[str | None, ...] = ()
    dram_max_range_uj: tuple[int | None, ...] = ()
    reason: str | None = None

    @property
    def available(self) -> bool:
        """Whether energy is readable (a package zone and no reason against)."""
        return bool(self.domains) and self.reason is None

    @property
    def has_dram(self) -> bool:
        """Whether any package has a DRAM zone."""
        return any(d is not None for d in self.dram)

    @classmethod
    def discover(cls, root: str | None = None) -> "Rapl":
        """Find the readable zones through Zeus.

        Args:
            root: a powercap ``intel-rapl`` directory to read instead of the machine's
                (tests use a fake tree); ``None``: ``zeus.device.cpu.get_cpus()``.
        """
        try:
            from zeus.device.cpu.common import ZeusCPUInitError, ZeusCPUNoPermissionError
            from zeus.device.cpu.rapl import RAPLCPU
        except ImportError as e:  # pragma: no cover - zeus is a dependency
            return cls(reason=f"zeus not importable ({one_line(e)})")
        try:
            if root is None:
                from zeus.device.cpu import get_cpus

                cpus = list(get_cpus().cpus)
            else:
                if not os.path.isdir(root):
                    return cls(reason=f"no {root} (RAPL powercap driver absent)")
                zones = glob.glob(os.path.join(root, "intel-rapl:*"))
                idx = sorted(
                    int(os.path.basename(d).split(":")[1]) for d in zones if os.path.basename(d).count(":") == 1
                )
                cpus = [RAPLCPU(i, root) for i in idx]
        except ZeusCPUNoPermissionError:
            return cls(reason="RAPL energy_uj not readable (root only since Linux 5.10)")
        except ZeusCPUInitError:
            return cls(
                reason="no RAPL powercap zones (/sys/class/powercap/intel-rapl absent: "
                "a VM, a non-Linux host, or the driver is not loaded)"
            )
        except Exception as e:  # noqa: BLE001 - a malformed zone: unreadable, never fatal
            return cls(reason=f"RAPL zones unreadable ({one_line(e)})")
        pkgs = [
            c for c in cpus if getattr(c, "rapl_file", None) is not None and not c.rapl_file.name.startswith("psys")
        ]
        if not pkgs:
            why = (
                "RAPL through the zeusd daemon is not supported by carb's per-sample reads"
                if cpus
                else "no RAPL package zone"
            )
            return cls(reason=why)
        return cls(
            domains=tuple(c.rapl_file.path for c in pkgs),
            max_range_uj=tuple(int(c.rapl_file.max_energy_range_uj) for c in pkgs),
            dram=tuple(c.dram.path if c.dram is not None else None for c in pkgs),
            dram_max_range_uj=tuple(int(c.dram.max_energy_range_uj) if c.dram is not None else None for c in pkgs),
        )

    def _zones(self) -> list[tuple[str, int]]:
        zones = list(zip(self.domains, self.max_range_uj))
        zones += [(d, int(m)) for d, m in zip(self.dram, self.dram_max_range_uj) if d is not None and m is not None]
        return zones

    def read_uj(self) -> list[int]:
        """Current counter of each package zone, then of each DRAM zone. Units: uJ."""
        out = []
        for z, _ in self._zones():
            with open(os.path.join(z, "energy_uj")) as f:
                out.append(int(f.read()))
        return out

    def delta_j(self, before: Sequence[int], after: Sequence[int]) -> tuple[float, float | None]:
        """Energy between two :meth:`read_uj` readings: ``(package_j, dram_j)``, summed over sockets.

        ``dram_j`` is ``None`` without DRAM zones. Units: J.
        """
        ranges = [m for _, m in self._zones()]
        d = [rapl_delta_uj(b, a, m) / 1e6 for b, a, m in zip(before, after, ranges)]
        n = len(self.domains)
        return sum(d[:n]), (sum(d[n:]) if len(d) > n else None)
