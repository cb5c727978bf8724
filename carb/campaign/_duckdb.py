"""How carb opens a DuckDB file: the one connection function and its settings (re-exported by carb.campaign.store)."""

from __future__ import annotations

from pathlib import Path

import duckdb

__all__ = ["SAFE_CONFIG", "connect"]

#: DuckDB settings of every connection carb opens. A store may come from anyone, and DuckDB by default downloads and
#: loads a native extension that a file needs (an SQLite file passed as a store fetches ``sqlite_scanner``) and lets a
#: view read any file or URL: here no extension is installed or loaded beyond those built into DuckDB (core
#: functions, JSON, Parquet, ICU), nothing outside the database file is read, and the settings cannot be changed
#: through the connection.
SAFE_CONFIG = {
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "enable_external_access": False,
    "lock_configuration": True,
}


def connect(path: str | Path, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to the database file ``path`` with :data:`SAFE_CONFIG`: the only way carb opens one.

    Raises:
        duckdb.Error: the file cannot be opened (not DuckDB, in use, or a format that needs an extension).
    """
    return duckdb.connect(str(path), read_only=read_only, config=dict(SAFE_CONFIG))
