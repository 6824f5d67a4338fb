"""Which store this dsmon reads and writes: its schema version, noted in the store with its maker.

A store records in ``dsmon_meta`` the schema version of its tables and the dsmon version that
created it (SQLite also keeps the schema version as ``PRAGMA user_version``, which a dsmon
reads before any table). dsmon has had no release: a store of any other schema version is
refused with one line that says who made it and what to do, never migrated. The logs are the
record of truth, and ``dsmon import`` builds a store of this schema from them again.
"""

from __future__ import annotations

from dsmon import __version__
from dsmon.store.errors import StoreError

#: Bumped when the tables change shape or what a column holds (indexes included).
SCHEMA_VERSION = 8
#: The store's identity, the same in both dialects.
META_DDL = """CREATE TABLE IF NOT EXISTS dsmon_meta (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)"""
#: Its rows: the schema version and the dsmon version that created the store.
SCHEMA_ROW, MADE_BY_ROW = "schema_version", "dsmon_version"
META_ROWS = ((SCHEMA_ROW, str(SCHEMA_VERSION)), (MADE_BY_ROW, __version__))
#: Notes them in a new store (a second opener racing the first changes nothing).
INSERT_META = "INSERT INTO dsmon_meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"
#: What a store notes about itself, as (name, value) rows.
READ_META = "SELECT name, value FROM dsmon_meta"


def refused(where: str, schema: object, made_by: str | None) -> StoreError:
    """The one line for a store of another schema version (``made_by``: its dsmon, if noted).

    A store made before dsmon noted its maker says only its schema version.
    """
    maker = f"dsmon {made_by}" if made_by else "an earlier dsmon"
    return StoreError(
        f"cannot open store {where}: made by {maker} with store schema {schema}; "
        f"this dsmon writes schema {SCHEMA_VERSION}: re-import the logs with `dsmon import`"
    )
