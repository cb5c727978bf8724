"""Where measurements were taken, and whether a machine is of the same kind.

A model's figures hold for the kind of machine its measurements came from: the same CPU
model and instruction set (AVX2 against AVX-512 kernels, native bf16 or not), or the same
GPU and driver. A :class:`Fingerprint` records that kind; :func:`here` reads it for this
machine, :func:`from_provenance` from a campaign's provenance
(:meth:`carb.measure.CpuBackend.provenance`, :meth:`carb.measure.CudaBackend.provenance`),
and :func:`compare` says whether a prediction asked here stands on the model's own ground.

A fact that cannot be read (a container hiding ``/proc/cpuinfo``, an unknown GPU) is
recorded as unknown, and an unknown never matches: :func:`compare` reports it as a
difference, so a model is trusted as in-domain only where both sides are known and equal.
Reading a fingerprint runs no code from it: it is plain JSON values.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

__all__ = ["Fingerprint", "Comparison", "here", "from_provenance", "compare"]

#: The facts that make two machines one kind for speed (the rest is recorded, not compared).
KIND_FIELDS = ("device", "name", "isa", "kernels", "native")


@dataclass(frozen=True)
class Fingerprint:
    """The kind of machine a model's measurements were taken on, or a prediction is asked on.

    Attributes:
        device: ``cpu`` or ``cuda`` (``None``: unknown).
        name: the CPU model (``/proc/cpuinfo``) or the GPU's name.
        isa: the CPU's speed-deciding instruction-set flags
            (:data:`carb.measure._common.ISA_FLAGS` it has), sorted; ``None``: unreadable.
        kernels: the kernels torch dispatches to on this CPU (``AVX2``, ``AVX512``, ...) or
            the GPU's compute capability.
        native: the reduced precisions the device runs natively (``bf16``, ``fp16``), sorted.
        threads: intra-op threads of the measurements (recorded, not compared: a thread
            count is a setting of the deployment, not of the machine).
        torch: torch's version.
        allocator: the workers' C allocator (``retain`` or ``default``).
        driver: the GPU driver's version (GPUs only).
        source: where the facts were read (``this machine``, a store's provenance, a card).

    """

    device: str | None = None
    name: str | None = None
    isa: tuple[str, ...] | None = None
    kernels: str | None = None
    native: tuple[str, ...] | None = None
    threads: int | None = None
    torch: str | None = None
    allocator: str | None = None
    driver: str | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fingerprint as JSON values (tuples as lists)."""
        d = asdict(self)
        for k in ("isa", "native"):
            d[k] = None if d[k] is None else list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: Any) -> "Fingerprint":
        """A fingerprint from :meth:`to_dict`'s values; a value of the wrong type reads as unknown."""
        if not isinstance(d, Mapping):
            return cls(source="unreadable")

        def text(k: str) -> str | None:
            v = d.get(k)
            return v if isinstance(v, str) and v else None

        def names(k: str) -> tuple[str, ...] | None:
            v = d.get(k)
            if isinstance(v, (list, tuple)) and all(isinstance(x, str) for x in v):
                return tuple(sorted(v))
            return None

        threads = d.get("threads")
        return cls(
            device=text("device"),
            name=text("name"),
            isa=names("isa"),
            kernels=text("kernels"),
            native=names("native"),
            threads=threads if isinstance(threads, int) and not isinstance(threads, bool) else None,
            torch=text("torch"),
            allocator=text("allocator"),
            driver=text("driver"),
            source=d.get("source") if isinstance(d.get("source"), str) else "",
        )

    @property
    def known(self) -> bool:
        """Whether every fact that decides the kind was read."""
        if self.device is None or self.name is None or self.kernels is None or self.native is None:
            return False
        return self.isa is not None or self.device != "cpu"

    def key(self) -> str:
        """A short digest of the kind-deciding facts (:data:`KIND_FIELDS`): equal for machines of one kind."""
        facts = {k: v for k, v in self.to_dict().items() if k in KIND_FIELDS}
        return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]

    def describe(self) -> str:
        """The machine by what it is, in a few words (e.g. ``AMD EPYC, AVX2 kernels, no native bf16/fp16``)."""
        if self.device is None and self.name is None:
            return "an unknown machine"
        parts = [self.name or f"an unknown {self.device or 'device'}"]
        if self.device == "cpu":
            parts.append(f"{self.kernels} kernels" if self.kernels else "kernels unknown")
        elif self.kernels:
            parts.append(f"compute capability {self.kernels}")
        if self.native is None:
            parts.append("native precisions unknown")
        else:
            parts.append(f"native {'/'.join(self.native)}" if self.native else "no native bf16/fp16")
        if self.driver:
            parts.append(f"driver {self.driver}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Comparison:
    """How a machine compares with a model's: the kind-deciding facts that differ or are unknown.

    Attributes:
        differences: one phrase per differing or unknown fact (empty: same kind).
        model: the model's fingerprint (``None``: the model records none).
        machine: the machine's.
        facts: the fact (:data:`KIND_FIELDS`) each phrase of ``differences`` is about (``""``: none).

    """

    differences: tuple[str, ...]
    model: Fingerprint | None
    machine: Fingerprint
    facts: tuple[str, ...] = ()

    @property
    def same_kind(self) -> bool:
        """Whether the machine is of the model's kind (every fact known and equal)."""
        return not self.differences

    def line(self, fix: str) -> str | None:
        """One line for the top of an answer on another kind of machine (``None`` on the same kind).

        The two machines are named by what they are (:meth:`Fingerprint.describe`: model, kernels, native
        precisions); the parenthesis adds only the differences those names do not show: unknown facts, the device,
        and the CPU flags where the kernels are the same (where they differ, the kernels say it).

        Args:
            fix: the one command that fits the model to this machine.

        """
        if self.same_kind:
            return None
        m, this = self.model, self.machine
        where = m.describe() if m is not None else "a machine it does not record"

        def named(f: str) -> bool:  # both sides known, and the two names already show the difference
            if m is None or f not in KIND_FIELDS or getattr(m, f) is None or getattr(this, f) is None:
                return False
            kernels_differ = None not in (m.kernels, this.kernels) and m.kernels != this.kernels
            return f in ("name", "kernels", "native") or (f == "isa" and kernels_differ)

        facts = self.facts or ("",) * len(self.differences)
        rest = [d for f, d in zip(facts, self.differences) if not named(f)]
        detail = f" ({'; '.join(rest)})" if rest else ""
        return (
            f"another kind of machine: the model was measured on {where}; this is {this.describe()}{detail}. "
            f"To fit it here: {fix}"
        )


def compare(model: Fingerprint | None, machine: Fingerprint) -> Comparison:
    """Compare a machine with a model's fingerprint, fact by kind-deciding fact.

    Args:
        model: where the model's measurements were taken (``None``: not recorded).
        machine: where the prediction is asked (:func:`here`).

    Returns:
        The :class:`Comparison`; an unknown fact on either side is a difference.

    """
    if model is None:
        return Comparison(("the model records no machine",), None, machine, ("",))
    out, facts = [], []
    labels = {"device": "device", "name": "model", "isa": "CPU flags", "kernels": "kernels", "native": "native"}
    for k in KIND_FIELDS:
        a, b = getattr(model, k), getattr(machine, k)
        if k == "isa" and model.device != "cpu" and machine.device != "cpu":
            continue
        if a is None or b is None:
            out.append(f"{labels[k]} unknown {'there' if a is None else 'here'}")
        elif a != b:
            show = (lambda v: ", ".join(v) or "none") if isinstance(a, tuple) else str
            out.append(f"{labels[k]} {show(a)} there, {show(b)} here")
        else:
            continue
        facts.append(k)
    return Comparison(tuple(out), model, machine, tuple(facts))


def here(device: str = "cpu") -> Fingerprint:
    """This machine's fingerprint (reads ``/proc/cpuinfo`` and torch; runs no kernel).

    Args:
        device: ``cpu`` or ``cuda`` (the first GPU; unknown facts where torch sees none).

    """
    from carb.measure._common import cpu_isa, cpu_model

    try:
        import torch

        version: str | None = str(torch.__version__)
    except ImportError:  # pragma: no cover - torch is a dependency
        torch, version = None, None
    if device.startswith("cuda"):
        if torch is None or not torch.cuda.is_available():
            return Fingerprint(device="cuda", torch=version, source="this machine (no GPU visible)")
        major, minor = torch.cuda.get_device_capability(0)
        native = ("bf16", "fp16") if major >= 8 else ("fp16",) if major >= 6 else ()
        return Fingerprint(
            device="cuda",
            name=torch.cuda.get_device_name(0),
            kernels=f"{major}.{minor}",
            native=native,
            torch=version,
            source="this machine",
        )
    isa = cpu_isa()
    flags, nat = isa.get("flags"), isa.get("native")
    return Fingerprint(
        device="cpu",
        name=cpu_model(),
        isa=None if flags is None else tuple(sorted(flags)),
        kernels=isa.get("torch_capability"),
        native=None if nat is None else tuple(sorted(p for p, ok in nat.items() if ok)),
        torch=version,
        source="this machine",
    )


def from_provenance(prov: Mapping[str, Any], source: str = "the campaign's provenance") -> Fingerprint:
    """The fingerprint of a campaign from its provenance facts (what the backends record).

    Args:
        prov: :meth:`carb.measure.CpuBackend.provenance` or
            :meth:`carb.measure.CudaBackend.provenance` (as stored with a campaign).
        source: where the facts come from, recorded with them.

    Returns:
        The fingerprint; a fact the provenance lacks is unknown.

    """
    dev = str(prov.get("device") or "")
    if dev.startswith("cuda"):
        cap = prov.get("compute_capability")
        kernels = ".".join(map(str, cap)) if isinstance(cap, (list, tuple)) else (str(cap) if cap else None)
        return Fingerprint.from_dict(
            {
                "device": "cuda",
                "name": prov.get("gpu_name") or prov.get("device_name"),
                "kernels": kernels,
                "torch": prov.get("torch"),
                "driver": prov.get("driver") or prov.get("driver_version"),
                "source": source,
            }
        )
    isa = prov.get("cpu_isa") if isinstance(prov.get("cpu_isa"), Mapping) else {}
    nat = isa.get("native")
    return Fingerprint.from_dict(
        {
            "device": "cpu" if dev.startswith("cpu") or prov.get("cpu_model") else None,
            "name": prov.get("cpu_model"),
            "isa": isa.get("flags"),
            "kernels": isa.get("torch_capability"),
            "native": sorted(p for p, ok in nat.items() if ok) if isinstance(nat, Mapping) else None,
            "threads": prov.get("threads"),
            "torch": prov.get("torch"),
            "allocator": prov.get("allocator"),
            "source": source,
        }
    )
