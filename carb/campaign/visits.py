"""A campaign's visits in the store: pooled into a config's row, retaken when timed in another machine state.

With ``rounds=R`` a campaign visits each config R times; every visit is stored in the
store's ``rounds`` table and the config's row pools them (:func:`pool_rounds`). With
retakes, a visit whose paired speed sentinel lies beyond the state factor of the
campaign's state (:func:`carb.campaign.rounds.machine_state` of the first visits) is
measured again, stored as a further round index, and the config pooled anew from the
visit of each round nearest the state (:func:`retake_summary` says what that did).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from carb._safeio import DocumentError, loads_json
from carb.campaign.rounds import STATE_FACTOR, machine_state
from carb.campaign.store import ENERGY_DOMAIN_COLUMNS, Store
from carb.measure.base import ConfigLike, Measurement, Stats
from carb.measure.protocol import summarize
from carb.measure.sentinel import effective_sentinel_ms, paired_sentinel_ms

__all__ = ["pool_rounds", "retake_summary"]

#: one stored visit: ``(round index, status, sentinel_ms)`` (sentinel NaN where unknown)
Visit = tuple[int, str, float]


def pool_rounds(visits: Sequence[Measurement]) -> Measurement:
    """Pool the visits of one config into one measurement.

    Latency: :func:`~carb.measure.protocol.summarize` over the raw samples of every visit
    (``extra["latency_samples_ms"]``). Energy: median of the visits' medians (mean of
    means, min p5, max p95, min of the minima, mean CoV, summed n; no CI). Memory: median of
    the visits' peaks. Per-domain energy (``extra["energy_pkg_j"]``, ``["energy_dram_j"]``):
    median of the visits' values; ``None`` when any visit lacks it.

    Args:
        visits: the config's visits, in round order.

    Returns:
        The pooled measurement; a failed visit makes it failed with that visit's status
        and message.

    Raises:
        ValueError: no visits, or an ``ok`` visit without raw latency samples.
    """
    if not visits:
        raise ValueError("pool_rounds: no visits")
    failed = [(i, v) for i, v in enumerate(visits) if v.status != "ok"]
    wall = sum(v.wall_s for v in visits)
    timed = sum(v.timed_s for v in visits)
    if failed:
        i, v = failed[0]
        return Measurement(
            status=v.status,
            message=f"round {i + 1}: {v.message}",
            wall_s=wall,
            timed_s=timed,
            energy_missing_reason=v.energy_missing_reason,
            extra={**v.extra, "rounds": len(visits), "round_statuses": [x.status for x in visits]},
        )
    samples: list[float] = []
    for v in visits:
        s = v.extra.get("latency_samples_ms")
        if not s:
            raise ValueError("pool_rounds: a visit has no raw latency samples to pool")
        samples.extend(float(x) for x in s)
    memory = [v.memory_mb for v in visits if v.memory_mb is not None]
    extra = {
        **visits[0].extra,
        "rounds": len(visits),
        "latency_samples_ms": samples,
        "round_latency_ms": [v.latency_ms.median if v.latency_ms else None for v in visits],
        "round_memory_mb": [v.memory_mb for v in visits],
    }
    for key in (c for c, _ in ENERGY_DOMAIN_COLUMNS):
        # per-domain energy (RAPL package/DRAM) pooled like energy_j, the median over
        # visits, not the first visit's value carried over by the copy above
        vals = [v.extra.get(key) for v in visits]
        if any(x is not None for x in vals):
            nums = [float(x) for x in vals if isinstance(x, (int, float)) and math.isfinite(x)]
            extra[key] = float(np.median(nums)) if len(nums) == len(vals) else None
    paired = paired_sentinel_ms([v.extra for v in visits])
    if paired is not None:
        # every visit timed with the paired sentinel: the pooled row keeps all its blocks
        extra.update(
            pair_ratio=[r for v in visits for r in v.extra["pair_ratio"]],
            pair_sentinel_ms=[r for v in visits for r in v.extra.get("pair_sentinel_ms", [])],
        )
    if any("sentinel_ms" in v.extra for v in visits):
        # drift: every sample at the sentinel of its own visit (carb.measure.sentinel)
        sent = [v.extra.get("sentinel_ms") for v in visits]
        extra.update(
            round_sentinel_ms=sent,
            round_visit_t=[v.extra.get("visit_t") for v in visits],
            sentinel_ms=(
                paired
                if paired is not None
                else effective_sentinel_ms([v.extra["latency_samples_ms"] for v in visits], sent)
                if all(isinstance(x, (int, float)) and x > 0 for x in sent)
                else None
            ),
        )
        extra.pop("visit_t", None)
    return Measurement(
        status="ok",
        latency_ms=summarize(samples),
        energy_j=_pool_stats([v.energy_j for v in visits]),
        energy_gross_j=_pool_stats([v.energy_gross_j for v in visits]),
        memory_mb=float(np.median(memory)) if memory else None,
        energy_missing_reason=visits[0].energy_missing_reason,
        timed_s=timed,
        wall_s=wall,
        extra=extra,
    )


def _pool_stats(stats: Sequence[Stats | None]) -> Stats | None:
    if not stats or any(s is None for s in stats):
        return None
    return Stats(
        median=float(np.median([s.median for s in stats])),
        mean=float(np.mean([s.mean for s in stats])),
        p5=min(s.p5 for s in stats),
        p95=max(s.p95 for s in stats),
        cov=float(np.mean([s.cov for s in stats])),
        n=int(sum(s.n for s in stats)),
        ci_rel=math.nan,
        min=float(np.min([s.min for s in stats])),
    )


def _visits(store: Store, platform: str, configs: Sequence[ConfigLike] | None) -> dict[str, list[Visit]]:
    """Every stored visit of these configs (``None``: of every config of ``platform``).

    ``{config_id: [(round index, status, sentinel_ms)]}`` (sentinel NaN where unknown), by round index.
    """
    out: dict[str, list[Visit]] = {}
    cols = "config_id, round, status, sentinel_ms"
    rows = (
        store.con.execute(f"SELECT {cols} FROM rounds WHERE platform = ?", [platform])
        if configs is None
        else store._rounds(cols, platform, (c.config_id for c in configs))
    ).fetchall()
    for cid, idx, st, s in sorted(rows, key=lambda r: (r[0], r[1])):
        out.setdefault(cid, []).append((int(idx), st, float(s) if s is not None and s == s else math.nan))
    return out


def _campaign_state(visits: dict[str, list[Visit]], rounds: int, factor: float) -> float | None:
    """The machine's state (sentinel, ms) of a campaign.

    :func:`carb.campaign.rounds.machine_state` of the first visits (round index < ``rounds``):
    fixed once they are stored, so a resumed run judges by the same state.
    """
    s = [x for v in visits.values() for idx, st, x in v if idx < rounds and st == "ok" and x > 0]
    return machine_state(s, factor) if s else None


def _choose(chain: list[Visit], ref: float) -> tuple[int, float] | None:
    """The visit of one round to pool: ``(round index, sentinel_ms)``.

    Of its first visit and its retakes (``chain``), the ``ok`` one whose sentinel is nearest
    ``ref`` in log (the earliest on ties; without any sentinel the first visit); ``None``
    when none is ``ok``.
    """
    ok = [(idx, x) for idx, st, x in chain if st == "ok"]
    if not ok:
        return None
    known = [(abs(math.log(x / ref)), idx, x) for idx, x in ok if x > 0]
    if not known:
        return ok[0]
    _, idx, x = min(known)
    return idx, x


def _in_state(sentinel_ms: float, ref: float, factor: float) -> bool:
    """Whether a visit's sentinel (ms) lies within ``factor`` of the state ``ref`` (ms)."""
    return sentinel_ms > 0 and abs(math.log(sentinel_ms / ref)) <= math.log(factor)


def _picks(chains: dict[int, list[Visit]], ref: float) -> list[int]:
    """The round indices to pool: :func:`_choose`'s visit of each round, in round order."""
    return [p[0] for _, ch in sorted(chains.items()) if (p := _choose(ch, ref)) is not None]


def _chains(v: list[Visit], rounds: int) -> dict[int, list[Visit]] | None:
    """A config's visits by the round they stand for (``idx % rounds``).

    ``None`` unless every first visit is stored and ``ok`` (a failed config is not retaken).
    """
    first = {idx: st for idx, st, _ in v if idx < rounds}
    if len(first) < rounds or any(st != "ok" for st in first.values()):
        return None
    chains: dict[int, list[Visit]] = {}
    for x in v:
        chains.setdefault(x[0] % rounds, []).append(x)
    return chains


def _retake_plan(
    store: Store,
    platform: str,
    configs: Sequence[ConfigLike],
    rounds: int,
    tries: int,
    factor: float,
    ref: float | None = None,
) -> list[tuple[ConfigLike, int]]:
    """The retakes due now, as ``(config, round index)``.

    One for every round whose chosen visit lies beyond ``factor`` of the campaign's state
    (``ref``, ms; default: that of ``configs``) and has had fewer than ``tries`` retakes; the
    k-th retake of round r is stored as round index ``(k + 1) * rounds + r``.
    """
    visits = _visits(store, platform, configs)
    ref = ref if ref is not None else _campaign_state(visits, rounds, factor)
    if ref is None:
        return []
    due = []
    for cfg in configs:
        chains = _chains(visits.get(cfg.config_id, []), rounds)
        for r, chain in sorted((chains or {}).items()):
            pick = _choose(chain, ref)
            if pick is None or not pick[1] > 0 or _in_state(pick[1], ref, factor):
                continue
            if len(chain) - 1 < tries:
                due.append((cfg, max(idx for idx, _, _ in chain) + rounds))
    return due


def _retakes_due(
    store: Store, platform: str, configs: Sequence[ConfigLike], rounds: int, tries: int, factor: float
) -> bool:
    """Whether a resumed run has retakes to make or configs to pool anew.

    A config to pool anew is one whose retake was stored but not pooled (a kill came between).
    """
    return bool(_retake_plan(store, platform, configs, rounds, tries, factor)) or bool(
        _stale(store, platform, configs, rounds, factor)
    )


def _stale(
    store: Store, platform: str, configs: Sequence[ConfigLike], rounds: int, factor: float, ref: float | None = None
) -> list[ConfigLike]:
    """Configs with retakes whose stored row does not pool the visits :func:`_choose` picks.

    A row whose memory was not taken from the first visits alone is stale too.
    """
    visits = _visits(store, platform, configs)
    retaken = [c for c in configs if any(idx >= rounds for idx, _, _ in visits.get(c.config_id, []))]
    ref = ref if ref is not None else _campaign_state(visits, rounds, factor)
    if not retaken or ref is None:
        return []
    rows = store.measurements(platform)
    # a row without "memory_visits" took its memory from the retakes too: stale
    pooled = {}
    for cid, e in zip(rows["config_id"], rows["extra"]):
        try:  # telemetry too large or nested too deeply reads as none
            x = loads_json(e, "an extra cell") if isinstance(e, str) else {}
        except DocumentError:
            x = {}
        x = x if isinstance(x, dict) else {}
        pooled[cid] = x.get("pooled_visits") if "memory_visits" in x else None
    out = []
    for c in retaken:
        chains = _chains(visits[c.config_id], rounds)
        if chains is None:
            continue
        if pooled.get(c.config_id) != _picks(chains, ref):
            out.append(c)
    return out


def _repool(store: Store, cfg: ConfigLike, platform: str, rounds: int, run_id: str, ref: float) -> None:
    """Pool ``cfg`` anew from the visit of each round nearest the campaign's state ``ref`` (sentinel, ms).

    Its row is replaced in one transaction; its visits all stay in ``rounds``.
    """
    visits = _visits(store, platform, [cfg])
    chains = _chains(visits.get(cfg.config_id, []), rounds)
    if chains is None:
        return
    pick = _picks(chains, ref)
    stored = {
        idx: store.measurement_from_row(row) for (_, idx), row in store.rounds_of(platform, [cfg.config_id]).items()
    }
    m = pool_rounds([stored[idx] for idx in pick])
    # memory stays the first visits' median: the speed states leave peak memory alone, while a
    # retake runs minutes later, when 2-thread peaks may have drifted
    mem = [v for r in range(rounds) if (v := stored[r].memory_mb) is not None]
    m = replace(
        m,
        memory_mb=float(np.median(mem)) if mem else m.memory_mb,
        extra={
            **m.extra,
            "pooled_visits": pick,
            "memory_visits": list(range(rounds)),
            "round_memory_mb": mem or m.extra.get("round_memory_mb"),
            "retakes": sum(idx >= rounds for idx, _, _ in visits[cfg.config_id]),
        },
    )
    store.replace(cfg, platform, m, run_id)


def retake_summary(
    store: Store, platform: str, configs: Sequence[ConfigLike] | None, rounds: int, factor: float = STATE_FACTOR
) -> dict[str, Any]:
    """What the retakes of a campaign did, read from the store (so a resumed run reports the whole campaign).

    Args:
        store: the campaign store.
        platform: the platform the rows are stored under.
        configs: the campaign's configs; ``None``: every config of ``platform``.
        rounds: the campaign's rounds per config.
        factor: see :data:`carb.campaign.rounds.STATE_FACTOR`.

    Returns:
        ``ref_ms`` the campaign's state (sentinel, ms), ``factor``, ``n`` first visits with a
        sentinel, ``off`` of them timed in another state, ``off_sentinel_ms`` their median
        sentinel, ``visits`` retakes stored, ``back`` off visits whose round now pools a visit
        in the state, ``left`` those still out of it (the keys of
        :func:`carb.campaign.rounds.retake_off_state`, read by
        :func:`carb.campaign.rounds.state_line`); ``{"note": "no speed index"}`` without sentinels.
    """
    visits = _visits(store, platform, configs)
    ref = _campaign_state(visits, rounds, factor)
    if ref is None:
        return {"note": "no speed index"}
    n = off = back = retaken = 0
    off_s: list[float] = []
    for v in visits.values():
        retaken += sum(idx >= rounds for idx, _, _ in v)
        chains = _chains(v, rounds)
        for r, chain in sorted((chains or {}).items()):
            s0 = next(x for idx, _, x in chain if idx == r)
            if not s0 > 0:
                continue
            n += 1
            if _in_state(s0, ref, factor):
                continue
            off += 1
            off_s.append(s0)
            pick = _choose(chain, ref)
            back += bool(pick and _in_state(pick[1], ref, factor))
    return {
        "ref_ms": float(ref),
        "factor": float(factor),
        "n": n,
        "off": off,
        "off_sentinel_ms": float(np.median(off_s)) if off_s else None,
        "visits": retaken,
        "back": back,
        "left": off - back,
    }
