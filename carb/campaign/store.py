"""The campaign store: one embedded DuckDB file per campaign.

Tables (open the file with ``duckdb`` and ask SQL questions):

``meta``
    ``key``, ``value``: schema version, creation time.
``runs``
    one row per invocation of a campaign: ``run_id``, ``started_at``, ``platform``,
    ``device``, ``command``, ``carb_version``, ``provenance`` (JSON: device, CPU/GPU model,
    driver, CUDA, torch versions, clocks, threads, energy sensor) and ``protocol`` (JSON).
``measurements``
    one row per (``config_id``, ``platform``): the config parameters, ``status``,
    ``message``, per target (``latency_ms``, ``energy_j``, ``energy_gross_j``) the median
    and its spread (``_mean``, ``_p5``, ``_p95``, ``_cov``, ``_n``, ``_ci_rel``, ``_min``: the
    fastest sample),
    ``memory_mb``, ``energy_missing_reason``, ``timed_s``, ``wall_s``, ``extra`` (JSON
    telemetry), ``run_id`` and ``measured_at``; ``energy_pkg_j`` and ``energy_dram_j``
    (CPU RAPL, gross J per forward of packages and DRAM; NULL elsewhere); ``arch`` (JSON: the
    parameters of a family other than the ResNets) and ``features`` (JSON: the features of a
    family whose features need its network built, ``net``, captured once when the row is
    stored, so that reading the store never imports the user's code; NULL elsewhere).
``remeasurements``
    the same columns without the key constraint: later re-measurements of configs already
    in ``measurements`` (drift checks), never used for resume.
``rounds``
    the same columns plus ``round``, keyed by (``config_id``, ``platform``, ``round``):
    the partial measurements of a campaign that visits each config in several rounds at
    different moments; a config's pooled row goes to ``measurements`` when its last round
    is done, and a resumed campaign reuses the rounds already stored.
``speed_index``
    the speed sentinel's readings (:mod:`carb.measure.sentinel`), timed at regular moments
    of every campaign: ``run_id``, ``seq``, ``platform``, ``t``, ``sentinel_ms``,
    ``sentinel_ci_rel``, ``wall_s``, ``speed_index`` (the platform's median reading over
    this one), ``detail``. Every row of the three tables above carries ``sentinel_ms``
    (the sentinel at its measurement time), ``speed_index`` and ``latency_ms_norm`` (its
    latency at the platform's median speed); all of a platform's rows are normalized to
    the same median, re-computed with each reading. A store without sentinel columns has
    none of this (read-only) or NULLs there (opened for writing).

Crash safety: each measured config is committed in its own transaction, so a ``kill -9``
at any moment loses at most the config in flight; the primary key makes a duplicate
impossible (a resumed run skips what is stored, and an insert of a stored key is ignored),
and DuckDB's write-ahead log replays a torn commit on the next open.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import duckdb
import pandas as pd

from carb import families
from carb._safeio import DocumentError, created_whole, loads_json
from carb.campaign._duckdb import SAFE_CONFIG, connect
from carb.families.space import PARAMETERS, Config
from carb.measure.base import ConfigLike, Measurement, Stats

__all__ = [
    "Store",
    "StoreError",
    "connect",
    "SAFE_CONFIG",
    "SCHEMA_VERSION",
    "TARGETS",
    "SPREAD",
    "DRIFT_COLUMNS",
    "SPEED_COLUMNS",
]

SCHEMA_VERSION = 2
#: schema versions this carb opens (version 1 lacks ``arch``; opening it for writing adds it)
READABLE_VERSIONS = (1, 2)
#: targets that carry repeat statistics
TARGETS = ("latency_ms", "energy_j", "energy_gross_j")
#: spread columns stored beside each target's median, suffixes of the target name
SPREAD = ("mean", "p5", "p95", "cov", "n", "ci_rel", "min")

_PARAM_SQL = {
    "family": "VARCHAR",
    "block": "VARCHAR",
    "depth": "INTEGER",
    "width": "DOUBLE",
    "early_downsample": "BOOLEAN",
    "input_size": "INTEGER",
    "batch": "INTEGER",
    "precision": "VARCHAR",
    "classes": "INTEGER",
}


#: drift columns (carb.measure.sentinel): ``sentinel_ms`` the speed sentinel's
#: latency around the row's measurement time (ms; the median of the readings near each visit;
#: pooled rounds: the effective value, such that
#: ``latency_ms_norm = latency_ms * ref / sentinel_ms``), ``speed_index`` the machine's speed
#: then relative to the platform's median sentinel reading in this store (``ref / sentinel_ms``:
#: 1 = median speed, > 1 faster), ``latency_ms_norm`` the latency at that median speed (ms).
#: NULL where no sentinel ran (added on open for writing to a store that lacks them).
DRIFT_COLUMNS: list[tuple[str, str]] = [
    ("sentinel_ms", "DOUBLE"),
    ("speed_index", "DOUBLE"),
    ("latency_ms_norm", "DOUBLE"),
]


def _measurement_columns() -> list[tuple[str, str]]:
    cols: list[tuple[str, str]] = [("config_id", "VARCHAR"), ("platform", "VARCHAR")]
    cols += [(p, _PARAM_SQL[p]) for p in PARAMETERS]
    cols += [("status", "VARCHAR"), ("message", "VARCHAR")]
    for t in TARGETS:
        cols.append((t, "DOUBLE"))
        cols += [(f"{t}_{s}", "INTEGER" if s == "n" else "DOUBLE") for s in SPREAD]
    cols += [
        ("memory_mb", "DOUBLE"),
        ("energy_missing_reason", "VARCHAR"),
        ("timed_s", "DOUBLE"),
        ("wall_s", "DOUBLE"),
        ("extra", "JSON"),
        ("run_id", "VARCHAR"),
        ("measured_at", "TIMESTAMPTZ"),
        # the parameters of a family other than the ResNets (carb.families), as JSON;
        # NULL for ResNets, whose parameters are the columns above
        ("arch", "JSON"),
        # the features of a family that builds its network to know them (Family.measured_features), as JSON
        ("features", "JSON"),
    ]
    cols += ENERGY_DOMAIN_COLUMNS
    cols += DRIFT_COLUMNS
    return cols


#: the ``speed_index`` table: one row per sentinel reading of a campaign run. ``t`` when it
#: was taken, ``sentinel_ms`` the sentinel's latency (ms, geometric mean over its configs),
#: ``sentinel_ci_rel`` its largest relative 95% CI, ``wall_s`` what the reading cost (s),
#: ``speed_index`` the platform's median reading over this one (1 = median speed, > 1 faster),
#: ``detail`` JSON (sentinel name, per-config medians), ``used`` false for a reading too noisy
#: to correct anything with (its CI over the sentinel's ``max_ci_rel``): kept, never used.
SPEED_COLUMNS: list[tuple[str, str]] = [
    ("run_id", "VARCHAR"),
    ("seq", "INTEGER"),
    ("platform", "VARCHAR"),
    ("t", "TIMESTAMPTZ"),
    ("sentinel_ms", "DOUBLE"),
    ("sentinel_ci_rel", "DOUBLE"),
    ("wall_s", "DOUBLE"),
    ("speed_index", "DOUBLE"),
    ("detail", "JSON"),
    ("used", "BOOLEAN"),
]

#: CPU energy per RAPL domain (carb.measure.cpu): gross energy per forward of the
#: CPU packages and of DRAM (J, medians over the samples; ``energy_gross_j`` is their sum).
#: NULL where not measured (GPUs, no RAPL, no DRAM zone; added on open for writing).
ENERGY_DOMAIN_COLUMNS: list[tuple[str, str]] = [("energy_pkg_j", "DOUBLE"), ("energy_dram_j", "DOUBLE")]

MEASUREMENT_COLUMNS = _measurement_columns()
_COLNAMES = [c for c, _ in MEASUREMENT_COLUMNS]
#: statuses of a row whose network was built in the worker: its features are captured and stored
_BUILT = ("ok", "oom", "timeout")


class StoreError(RuntimeError):
    """The store cannot be opened or is not a CARB store; the message is one line."""


def _json_cell(text: Any, where: Path | str) -> dict[str, Any]:
    """A store's JSON cell (``arch``, ``features``, ``extra``) as a dict (empty for NULL).

    Raises:
        StoreError: the cell is not a JSON object, or is too large or nested too deeply (:mod:`carb._safeio`).
    """
    if not isinstance(text, str):
        return {}
    try:
        doc = loads_json(text, "a JSON cell")
    except DocumentError as e:
        raise StoreError(f"{where}: {e}") from None
    if not isinstance(doc, dict):
        raise StoreError(f"{where}: a JSON cell holds {type(doc).__name__}, not an object")
    return doc


def _refuse_foreign(con: Any, path: Path) -> None:
    """Raise :class:`StoreError` when the open database ``con`` holds tables but no CARB schema version."""
    tables = sorted(r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall())
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() if tables else 1
    except duckdb.Error:
        row = None
    if row is None:
        shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
        raise StoreError(f"{path}: not a CARB store (it holds {len(tables)} table(s): {shown}); give a new file")


def check_store_file(path: str | Path) -> None:
    """Refuse, without writing to it, a file that is not DuckDB or holds tables but is not a CARB store (one line).

    An absent file passes (a campaign creates it), and so does a store in use (opening it says so).
    """
    try:
        con = connect(path, read_only=True) if Path(path).is_file() else None
    except duckdb.Error as e:
        if isinstance(e, duckdb.IOException) and "lock" in str(e).lower():
            return
        raise StoreError(f"{path}: cannot open as a DuckDB store: {str(e).splitlines()[0]}") from None
    if con is not None:
        with con:
            _refuse_foreign(con, Path(path))


class Store:
    """A campaign store backed by a DuckDB file.

    Args:
        path: the ``.duckdb`` file; created when absent (unless ``read_only``).
        read_only: open without write access (several readers may share the file, but not
            with a running campaign, which holds DuckDB's write lock).
    """

    def __init__(self, path: str | Path, read_only: bool = False) -> None:
        self.path = Path(path)
        self._ref: dict[str, float | None] = {}  # platform -> median sentinel reading (ms)
        self._features: dict[str, str | None] = {}  # config id -> its captured features (JSON), once per config
        #: the private copy read when the store was in use (``read_only`` only), else None
        self.snapshot: Path | None = None
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such store")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():  # made whole beside it: DuckDB writes a header before any table
                self._create_whole()
        try:
            self.con = connect(self.path, read_only=read_only)
        except duckdb.IOException as e:
            first = str(e).splitlines()[0]
            if "lock" in first.lower() and read_only:
                self.con = self._open_snapshot()
            elif "lock" in first.lower():
                raise StoreError(f"{self.path}: in use by another process (a running campaign?): {first}") from None
            else:
                raise StoreError(f"{self.path}: cannot open as a DuckDB store: {first}") from None
        except duckdb.Error as e:
            raise StoreError(f"{self.path}: cannot open as a DuckDB store: {str(e).splitlines()[0]}") from None
        if read_only:
            self._check_schema()
            return
        try:  # a campaign never adds its tables to a foreign database
            _refuse_foreign(self.con, self.path)
            self._create()
        except (StoreError, duckdb.Error) as e:  # e.g. a full disk: _create is one transaction, rolled back whole
            self.con.close()
            if isinstance(e, StoreError):
                raise
            raise StoreError(f"{self.path}: cannot write the store ({str(e).splitlines()[0]})") from None

    # -- schema -------------------------------------------------------------------------
    def _create_whole(self) -> None:
        try:
            with created_whole(self.path) as tmp:
                self.con = connect(tmp)
                try:
                    self._create()
                    self.con.execute("CHECKPOINT")  # the tables in the file itself, not in a log beside it
                finally:
                    self.con.close()
        except duckdb.Error as e:
            raise StoreError(f"{self.path}: cannot write the store ({str(e).splitlines()[0]})") from None

    def _create(self) -> None:
        cols = ", ".join(f"{c} {t}" for c, t in MEASUREMENT_COLUMNS)
        self.con.execute("BEGIN")
        self.con.execute("CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)")
        self.con.execute(
            "CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ, "
            "platform VARCHAR, device VARCHAR, command VARCHAR, carb_version VARCHAR, "
            "provenance JSON, protocol JSON)"
        )
        self.con.execute(f"CREATE TABLE IF NOT EXISTS measurements ({cols}, PRIMARY KEY (config_id, platform))")
        self.con.execute(f"CREATE TABLE IF NOT EXISTS remeasurements ({cols})")
        self.con.execute(
            f"CREATE TABLE IF NOT EXISTS rounds ({cols}, round INTEGER, PRIMARY KEY (config_id, platform, round))"
        )
        self.con.execute("INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT DO NOTHING", [str(SCHEMA_VERSION)])
        version = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is not None and version[0] == "1":  # version 1 -> 2: the arch column
            for table in ("measurements", "remeasurements", "rounds"):
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS arch JSON")
            self.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
        # the speed sentinel's readings and the drift columns: added to a store that lacks
        # them; its rows keep NULL there ("no speed index")
        self.con.execute(
            f"CREATE TABLE IF NOT EXISTS speed_index ({', '.join(f'{c} {t}' for c, t in SPEED_COLUMNS)}, "
            "PRIMARY KEY (run_id, seq))"
        )
        self.con.execute("ALTER TABLE speed_index ADD COLUMN IF NOT EXISTS used BOOLEAN")
        for table in ("measurements", "remeasurements", "rounds"):
            for c, t in DRIFT_COLUMNS:
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {c} {t}")
        for table in ("measurements", "remeasurements", "rounds"):  # the columns a store may lack
            for c, t in ENERGY_DOMAIN_COLUMNS:
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {c} {t}")
            for t in TARGETS:  # the fastest sample: NULL in rows that did not keep it
                self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {t}_min DOUBLE")
            self.con.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS features JSON")
        self.con.execute(
            "INSERT INTO meta VALUES ('created_at', ?) ON CONFLICT DO NOTHING", [datetime.now(timezone.utc).isoformat()]
        )
        self.con.execute("COMMIT")
        self._check_schema()

    def _check_schema(self) -> None:
        try:
            row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except duckdb.Error:
            raise StoreError(f"{self.path}: not a CARB store (no meta table)") from None
        if row is None or int(row[0]) not in READABLE_VERSIONS:
            raise StoreError(
                f"{self.path}: store schema version {row[0] if row else '?'} "
                f"is not {SCHEMA_VERSION}, which this carb reads"
            )

    # -- writing ------------------------------------------------------------------------
    def begin_run(
        self, platform: str, device: str, provenance: dict[str, Any], protocol: dict[str, Any], command: str = ""
    ) -> str:
        """Record the start of a campaign run; returns its ``run_id``."""
        from carb._version import __version__

        run_id = uuid.uuid4().hex[:12]
        self.con.execute(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                datetime.now(timezone.utc),
                platform,
                device,
                command,
                __version__,
                json.dumps(provenance, default=str),
                json.dumps(protocol, default=str),
            ],
        )
        return run_id

    def add(self, config: ConfigLike, platform: str, m: Measurement, run_id: str, remeasure: bool = False) -> bool:
        """Store one measurement in its own transaction.

        Returns False when (config, platform) was already stored (the row is then left as
        it was), True otherwise. With ``remeasure``, the row goes to ``remeasurements``.
        """
        row = self._row(config, platform, m, run_id, self.speed_ref_ms(platform), self._measured_features(config, m))
        table = "remeasurements" if remeasure else "measurements"
        marks = ", ".join("?" * len(_COLNAMES))
        conflict = "" if remeasure else " ON CONFLICT DO NOTHING"
        cur = self.con.execute(f"INSERT INTO {table} ({', '.join(_COLNAMES)}) VALUES ({marks}){conflict}", row)
        changed = cur.fetchone()
        return bool(changed and changed[0])

    def replace(self, config: ConfigLike, platform: str, m: Measurement, run_id: str) -> None:
        """Replace the row of (config, platform) with ``m`` in one transaction.

        For a config pooled anew from its stored visits, e.g. after retakes; the visits stay in ``rounds``.
        """
        row = self._row(config, platform, m, run_id, self.speed_ref_ms(platform), self._measured_features(config, m))
        marks = ", ".join("?" * len(_COLNAMES))
        self.con.execute("BEGIN")
        try:
            self.con.execute(
                "DELETE FROM measurements WHERE config_id = ? AND platform = ?", [config.config_id, platform]
            )
            self.con.execute(f"INSERT INTO measurements ({', '.join(_COLNAMES)}) VALUES ({marks})", row)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def add_round(self, config: ConfigLike, platform: str, m: Measurement, run_id: str, round_: int) -> None:
        """Store one round of a multi-round campaign (its own transaction; a stored round is kept)."""
        row = self._row(config, platform, m, run_id, self.speed_ref_ms(platform)) + [round_]
        marks = ", ".join("?" * len(row))
        self.con.execute(
            f"INSERT INTO rounds ({', '.join(_COLNAMES)}, round) VALUES ({marks}) ON CONFLICT DO NOTHING", row
        )

    def _rounds(self, columns: str, platform: str, config_ids: Iterable[str]):
        """The rounds table's ``columns`` for these configs on ``platform`` (a cursor)."""
        ids = list(config_ids) or [None]  # IN (NULL) matches nothing
        marks = ", ".join("?" * len(ids))
        return self.con.execute(
            f"SELECT {columns} FROM rounds WHERE platform = ? AND config_id IN ({marks})", [platform, *ids]
        )

    def rounds_of(self, platform: str, config_ids: Iterable[str]) -> dict[tuple[str, int], dict[str, Any]]:
        """Stored rounds of these configs: ``{(config_id, round): row dict}``."""
        df = self._rounds("*", platform, config_ids).df()
        return {(r["config_id"], int(r["round"])): r for r in df.to_dict("records")}

    def round_status(self, platform: str, config_ids: Iterable[str]) -> dict[tuple[str, int], str]:
        """The status of every stored round of these configs: ``{(config_id, round): status}``.

        What :meth:`rounds_of` holds, without the rows: for counting visits still to do.
        """
        rows = self._rounds("config_id, round, status", platform, config_ids).fetchall()
        return {(c, int(r)): st for c, r, st in rows}

    # -- speed index ---------------------------------------------------------------------
    def add_speed_reading(
        self,
        run_id: str,
        platform: str,
        sentinel_ms: float,
        sentinel_ci_rel: float,
        wall_s: float,
        detail: dict[str, Any] | None = None,
        t: float | None = None,
        used: bool = True,
    ) -> None:
        """Store one reading of the speed sentinel and re-normalize the platform's rows to it.

        ``sentinel_ms`` is its latency (ms) at unix time ``t`` (default now); in the same
        transaction, re-normalize every row of
        ``platform`` to the new median reading, so that all of the platform's rows share
        one reference at any moment. A reading with ``used`` false (too noisy) is kept for
        the record and left out of every normalization.
        """
        when = datetime.fromtimestamp(t, timezone.utc) if t is not None else datetime.now(timezone.utc)
        self.con.execute("BEGIN")
        seq = self.con.execute("SELECT count(*) FROM speed_index WHERE run_id = ?", [run_id]).fetchone()[0]
        self.con.execute(
            "INSERT INTO speed_index (run_id, seq, platform, t, sentinel_ms, sentinel_ci_rel, wall_s, "
            "detail, used) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                seq,
                platform,
                when,
                float(sentinel_ms),
                _finite_or_none(float(sentinel_ci_rel)),
                float(wall_s),
                json.dumps(detail or {}, default=str),
                bool(used),
            ],
        )
        self._ref.pop(platform, None)
        self._renormalize(platform)
        self.con.execute("COMMIT")

    def set_sentinel(
        self, config_id: str, platform: str, run_id: str, sentinel_ms: float, remeasure: bool = False
    ) -> None:
        """Set a stored row's sentinel (ms) and its drift columns.

        Called with a reading taken after its visits came in, so the sentinel is interpolated rather than held.
        """
        ref = self.speed_ref_ms(platform)
        table = "remeasurements" if remeasure else "measurements"
        self.con.execute(
            f"UPDATE {table} SET sentinel_ms = ?, speed_index = ? / ?, "
            "latency_ms_norm = latency_ms * ? / ? "
            "WHERE config_id = ? AND platform = ? AND run_id = ?",
            [sentinel_ms, ref, sentinel_ms, ref, sentinel_ms, config_id, platform, run_id],
        )

    def has_speed_index(self) -> bool:
        """True when the store has a ``speed_index`` table (added when a store is opened for writing)."""
        return bool(
            self.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = 'speed_index'"
            ).fetchone()[0]
        )

    def speed_readings(self, platform: str | None = None) -> pd.DataFrame:
        """The sentinel's readings (of one platform if given), in time order.

        Empty for a store without a speed index. Columns: see :data:`SPEED_COLUMNS`.
        """
        if not self.has_speed_index():
            return pd.DataFrame(columns=[c for c, _ in SPEED_COLUMNS])
        q, args = "SELECT * FROM speed_index", []
        if platform:
            q += " WHERE platform = ?"
            args.append(platform)
        return self.con.execute(q + " ORDER BY t", args).df()

    def speed_ref_ms(self, platform: str) -> float | None:
        """The platform's median sentinel reading (ms): the speed its ``latency_ms_norm`` is normalized to.

        The median of all its readings when none was
        precise enough to correct with (the reference only sets the level of
        ``latency_ms_norm``; rows timed with a paired sentinel are corrected by their own);
        ``None`` without readings.
        """
        if platform not in self._ref:
            if not self.has_speed_index():
                return None
            v = self.con.execute(
                "SELECT coalesce(median(sentinel_ms) FILTER (WHERE used IS NOT FALSE), "
                "median(sentinel_ms)) FROM speed_index WHERE platform = ?",
                [platform],
            ).fetchone()[0]
            self._ref[platform] = None if v is None else float(v)
        return self._ref[platform]

    def _renormalize(self, platform: str) -> None:
        ref = self.speed_ref_ms(platform)
        if ref is None:
            return
        self.con.execute("UPDATE speed_index SET speed_index = ? / sentinel_ms WHERE platform = ?", [ref, platform])
        for table in ("measurements", "remeasurements", "rounds"):
            self.con.execute(
                f"UPDATE {table} SET speed_index = ? / sentinel_ms, "
                f"latency_ms_norm = latency_ms * ? / sentinel_ms "
                "WHERE platform = ? AND sentinel_ms IS NOT NULL",
                [ref, ref, platform],
            )

    def delete_failed(self, platform: str, config_ids: Iterable[str]) -> int:
        """Delete this platform's non-``ok`` rows (and their rounds) among ``config_ids``.

        So that they are measured again; returns how many configs were deleted.
        """
        wanted = set(config_ids)
        rows = self.con.execute(
            "SELECT config_id FROM measurements WHERE platform = ? AND status <> 'ok'", [platform]
        ).fetchall()
        failed = [r[0] for r in rows if r[0] in wanted]
        if failed:
            marks = ", ".join("?" * len(failed))
            self.con.execute("BEGIN")
            for table in ("measurements", "rounds"):
                self.con.execute(
                    f"DELETE FROM {table} WHERE platform = ? AND config_id IN ({marks})", [platform, *failed]
                )
            self.con.execute("COMMIT")
        return len(failed)

    def _measured_features(self, config: ConfigLike, m: Measurement) -> str | None:
        """The features a family captures from its built network (``net``), as JSON; ``None`` for the others.

        Captured once per config, for a row whose network the worker built (:data:`_BUILT`): the capture imports
        the same user code, here. A capture that fails leaves the row without features; the row is stored all
        the same.
        """
        fam = families.of(config)
        if fam.measured_features is None or m.status not in _BUILT:
            return None
        key = config.config_id
        if key not in self._features:
            try:
                self._features[key] = json.dumps(fam.measured_features(config))
            except (Exception, SystemExit):  # noqa: BLE001 - the user's code: any failure, no features
                self._features[key] = None
        return self._features[key]

    @staticmethod
    def _row(
        config: ConfigLike,
        platform: str,
        m: Measurement,
        run_id: str,
        ref_ms: float | None = None,
        features: str | None = None,
    ) -> list[Any]:
        params = families.to_row(config)
        d: dict[str, Any] = {
            "config_id": config.config_id,
            "platform": platform,
            **{p: params.get(p) for p in PARAMETERS},
            "status": m.status,
            "message": m.message,
            "arch": None if isinstance(config, Config) else json.dumps(params),
            "features": features,
        }
        for t in TARGETS:
            st: Stats | None = getattr(m, t)
            d[t] = st.median if st else None
            for s in SPREAD:
                d[f"{t}_{s}"] = getattr(st, s) if st else None
        d.update(
            memory_mb=m.memory_mb,
            energy_missing_reason=m.energy_missing_reason,
            timed_s=m.timed_s,
            wall_s=m.wall_s,
            extra=json.dumps(m.extra, default=str),
            run_id=run_id,
            measured_at=datetime.now(timezone.utc),
        )
        d.update({c: m.extra.get(c) for c, _ in ENERGY_DOMAIN_COLUMNS})  # the CPU backend puts them there
        d.update(_drift_values(d["latency_ms"], m.extra.get("sentinel_ms"), ref_ms))
        return [_finite_or_none(d.get(c)) for c in _COLNAMES]

    @staticmethod
    def measurement_from_row(row: dict[str, Any]) -> Measurement:
        """Rebuild a :class:`Measurement` from a stored row (a dict of its columns)."""

        def stats(t: str) -> Stats | None:
            if _isnull(row.get(t)):
                return None
            # a store opened read-only may lack a spread column; NULL is None, but the
            # fastest sample is nan where unknown (Stats.min: pooling takes its min)
            spread = {s: row.get(f"{t}_{s}") for s in SPREAD}
            return Stats(
                median=row[t],
                **{s: ((math.nan if s == "min" else None) if _isnull(v) else v) for s, v in spread.items()},
            )

        extra = row.get("extra")
        return Measurement(
            status=row["status"],
            message=row.get("message") or "",
            latency_ms=stats("latency_ms"),
            energy_j=stats("energy_j"),
            energy_gross_j=stats("energy_gross_j"),
            memory_mb=None if _isnull(row.get("memory_mb")) else row["memory_mb"],
            energy_missing_reason=None if _isnull(row.get("energy_missing_reason")) else row["energy_missing_reason"],
            timed_s=row.get("timed_s") or 0.0,
            wall_s=row.get("wall_s") or 0.0,
            extra=_json_cell(extra, "a stored row") if isinstance(extra, str) else (extra or {}),
        )

    # -- reading ------------------------------------------------------------------------
    def done_ids(self, platform: str) -> set[str]:
        """Config ids already stored for ``platform`` (any status)."""
        rows = self.con.execute("SELECT config_id FROM measurements WHERE platform = ?", [platform]).fetchall()
        return {r[0] for r in rows}

    def platforms(self) -> list[str]:
        """The platforms of the stored measurements, sorted."""
        return [r[0] for r in self.con.execute("SELECT DISTINCT platform FROM measurements ORDER BY 1").fetchall()]

    def measurements(self, platform: str | None = None, table: str = "measurements") -> pd.DataFrame:
        """All stored rows (of one platform if given) as a DataFrame, in measurement order.

        A foreign family's parameters (``arch``) and the features stored with a row (``features``) come as columns
        of their own.
        """
        if table not in ("measurements", "remeasurements"):
            raise ValueError(f"unknown table {table!r}")
        q = f"SELECT * FROM {table}"
        args: list[Any] = []
        if platform:
            q += " WHERE platform = ?"
            args.append(platform)
        df = self.con.execute(q + " ORDER BY measured_at", args).df()
        if "arch" in df.columns and df["arch"].notna().any():
            # other families' parameters become columns of their own (empty on other rows)
            params = pd.DataFrame([_json_cell(a, self.path) for a in df["arch"]], index=df.index)
            for c in params.columns:
                if c not in df.columns:
                    df[c] = params[c]
        if "features" in df.columns:
            # the features stored at measurement become columns too (empty on other rows)
            feats = pd.DataFrame([_json_cell(a, self.path) for a in df["features"]], index=df.index)
            df = df.drop(columns="features")
            for c in feats.columns:
                if c not in df.columns:
                    df[c] = pd.to_numeric(feats[c], errors="coerce")
        return df

    def runs(self) -> pd.DataFrame:
        """The ``runs`` table (one row per campaign run), oldest first."""
        return self.con.execute("SELECT * FROM runs ORDER BY started_at").df()

    def summary(self) -> pd.DataFrame:
        """Per platform and status: count, median latency/energy/memory, median latency CoV."""
        return self.con.execute(
            "SELECT platform, status, count(*) AS configs, median(latency_ms) AS latency_ms, "
            "median(energy_j) AS energy_j, median(memory_mb) AS memory_mb, "
            "median(latency_ms_cov) AS latency_cov, sum(timed_s) AS timed_s, sum(wall_s) AS wall_s "
            "FROM measurements GROUP BY ALL ORDER BY platform, status"
        ).df()

    def _open_snapshot(self) -> duckdb.DuckDBPyConnection:
        """Open a copy of the store's file and its WAL in a private temporary folder.

        A running campaign holds DuckDB's lock: the copy reads what was committed when copied.
        """
        import shutil
        import tempfile
        import weakref

        tmp = Path(tempfile.mkdtemp(prefix="carb-store-snapshot-"))
        self.snapshot = tmp / self.path.name
        # removed on close, and also when the store is dropped unclosed (an error, a reader
        # that never calls close)
        self._drop_snapshot = weakref.finalize(self, shutil.rmtree, tmp, True)
        try:
            shutil.copy2(self.path, self.snapshot)
            wal = self.path.with_name(self.path.name + ".wal")
            if wal.exists():
                shutil.copy2(wal, self.snapshot.with_name(self.snapshot.name + ".wal"))
            return connect(self.snapshot)  # a private copy: replaying its WAL is safe
        except (OSError, duckdb.Error) as e:
            self._drop_snapshot()
            raise StoreError(
                f"{self.path}: in use by another process, and a snapshot of it could not be "
                f"read ({str(e).splitlines()[0]}); try again"
            ) from None

    def close(self) -> None:
        """Close the connection (committed rows are on disk)."""
        try:
            self.con.close()
        except duckdb.Error:
            pass
        if self.snapshot is not None:
            self._drop_snapshot()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _drift_values(latency_ms: float | None, sentinel_ms: Any, ref_ms: float | None) -> dict[str, Any]:
    """The drift columns of a row (see :data:`DRIFT_COLUMNS`)."""
    s = float(sentinel_ms) if isinstance(sentinel_ms, (int, float)) and sentinel_ms > 0 else None
    if s is None:
        return {"sentinel_ms": None, "speed_index": None, "latency_ms_norm": None}
    idx = ref_ms / s if ref_ms else None
    return {
        "sentinel_ms": s,
        "speed_index": idx,
        "latency_ms_norm": latency_ms * idx if idx is not None and latency_ms is not None else None,
    }


def _isnull(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NA or v is pd.NaT


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and v != v:  # NaN -> NULL, so SQL aggregates ignore it
        return None
    return v
