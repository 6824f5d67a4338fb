"""The records table and its bookkeeping tables, and the statements both backends run alike.

``records`` has two indexes besides its key: ``(run, kind, id)`` and ``(run, id)``, because
every read asks for a run's records, of one kind or of all, in id order ("what is new since
id N"); each further index would cost every insert. In SQLite an index on ``run`` alone
holds the rowid (``id``) after it, so it serves ``run = ? AND id > ? ORDER BY id`` without
sorting the run. How a batch of rows goes in differs by engine (``Db.insert_records`` of
:mod:`dsmon.store.sqlite` and :mod:`dsmon.store.postgres`).
"""

from __future__ import annotations

from dsmon.store.dialect import Dialect


def ddl(d: Dialect) -> tuple[str, ...]:
    """The records table, its indexes and the per-run bookkeeping (see docs/store.md)."""
    i, t = d.integer, d.text
    return (
        f"""CREATE TABLE IF NOT EXISTS records (
            id {d.record_id},
            key {d.blob} NOT NULL UNIQUE,
            run {t} NOT NULL,
            kind {t} NOT NULL,
            step {i},
            ts {t},
            node {t},
            rank {i},
            file {t},
            line {i},
            body TEXT NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS records_run_kind_id ON records (run, kind, id)",
        f"CREATE INDEX IF NOT EXISTS records_run_id ON records ({d.run_id_index})",
        f"""CREATE TABLE IF NOT EXISTS run_kinds (
            run {t} NOT NULL,
            kind {t} NOT NULL,
            n {i} NOT NULL,
            first_ts {t},
            last_ts {t},
            last_step {i},
            last_id {i} NOT NULL,
            PRIMARY KEY (run, kind)
        )""",
        f"""CREATE TABLE IF NOT EXISTS run_sources (
            run {t} NOT NULL,
            node {t} NOT NULL,
            rank {i} NOT NULL,
            PRIMARY KEY (run, node, rank)
        )""",
        f"""CREATE TABLE IF NOT EXISTS run_activity (
            run {t} PRIMARY KEY,
            restamps {i} NOT NULL DEFAULT 0,
            received_at {t}
        )""",
    )


#: Per run and kind: count, first and last time, last step, last id.
KIND_STATS = "SELECT run, kind, n, first_ts, last_ts, last_step, last_id FROM run_kinds"
#: The same of one run.
RUN_KIND_STATS = f"{KIND_STATS} WHERE run = ?"
SOURCES = "SELECT run, node, rank FROM run_sources"
ACTIVITY = "SELECT run, restamps, received_at FROM run_activity"
RESTAMPS = "SELECT restamps FROM run_activity WHERE run = ?"
RUN_LAST_ID = "SELECT MAX(last_id) FROM run_kinds WHERE run = ?"
#: The newest record id (a MAX alone in its query: both engines read the end of the key).
MAX_ID = "SELECT MAX(id) FROM records"
#: A live sender wrote to the run now (``RunInfo.received_at``).
RECEIVED = """
INSERT INTO run_activity (run, received_at) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET received_at = excluded.received_at
"""
