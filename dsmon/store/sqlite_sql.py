"""The SQL of the SQLite store: its tables, and the statements each write runs.

Kept apart from :mod:`dsmon.store.sqlite` so the store's logic reads without pages of SQL; the
GPU tables' SQL is in :mod:`dsmon.store.gpu_sql`.
"""

from __future__ import annotations

from dsmon.store import rank_sql
from dsmon.store.base import ROW_COLUMNS
from dsmon.store.gpu_sql import SQLITE
from dsmon.store.sqlite_gpu import DDL as GPU_DDL

# Added after schema version 1 shipped: an older store gets it from its first writer
# (``SQLiteStore._upgrade``), and reads as empty while it is missing.
ACTIVITY_DDL = """CREATE TABLE IF NOT EXISTS run_activity (
    run TEXT PRIMARY KEY,
    restamps INTEGER NOT NULL DEFAULT 0,
    received_at TEXT
)"""
# Added after schema version 1 shipped too: ``after_id`` reads of one kind ("what is new since
# id N") walk only the newer rows. A writer adds it to an older store on its first write.
RUN_KIND_ID = "records_run_kind_id"
RUN_KIND_ID_DDL = f"CREATE INDEX IF NOT EXISTS {RUN_KIND_ID} ON records (run, kind, id)"
# ``after_id`` reads of a whole run (the ingest API's ``GET /v1/records`` without a kind, a
# GPU read that merges in the rows kept as records). An index on ``run`` alone holds the rowid
# (``id``) after it, so it serves ``run = ? AND id > ? ORDER BY id`` without sorting the run.
# Added later again: a writer adds it as above.
RUN_ID = "records_run_id"
RUN_ID_DDL = f"CREATE INDEX IF NOT EXISTS {RUN_ID} ON records (run)"
# What stores written before these indexes had: no read the product makes needs them (each
# read asks for id order, which only the two above give without a sort), and every index
# costs every insert. A writer drops them from an older store on its first write.
OBSOLETE_INDEXES = ("records_run_kind_step", "records_run_kind_ts", "records_run_ts")
DDL = (
    """CREATE TABLE IF NOT EXISTS records (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key BLOB NOT NULL UNIQUE,
        run TEXT NOT NULL,
        kind TEXT NOT NULL,
        step INTEGER,
        ts TEXT,
        node TEXT,
        rank INTEGER,
        file TEXT,
        line INTEGER,
        body TEXT NOT NULL
    )""",
    RUN_KIND_ID_DDL,
    RUN_ID_DDL,
    """CREATE TABLE IF NOT EXISTS run_kinds (
        run TEXT NOT NULL,
        kind TEXT NOT NULL,
        n INTEGER NOT NULL,
        first_ts TEXT,
        last_ts TEXT,
        last_step INTEGER,
        last_id INTEGER NOT NULL,
        PRIMARY KEY (run, kind)
    )""",
    """CREATE TABLE IF NOT EXISTS run_sources (
        run TEXT NOT NULL,
        node TEXT NOT NULL,
        rank INTEGER NOT NULL,
        PRIMARY KEY (run, node, rank)
    )""",
    ACTIVITY_DDL,
    *GPU_DDL,
    *rank_sql.ddl(SQLITE),
)

INSERT = (
    f"INSERT OR IGNORE INTO records ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)
# Folds the rows of one transaction (id > ?) into the per-run bookkeeping. SQLite's
# two-argument min()/max() return NULL when either side is NULL, hence the COALESCE.
# NOT INDEXED keeps the planner on the rowid range, the batch's own rows: left to itself it
# walks a (run, kind, ...) index of the whole table to save sorting the GROUP BY, which
# costs 100s of ms per batch once a big run is stored.
UPDATE_KINDS = """
INSERT INTO run_kinds (run, kind, n, first_ts, last_ts, last_step, last_id)
SELECT run, kind, COUNT(*), MIN(ts), MAX(ts), MAX(step), MAX(id)
FROM records NOT INDEXED WHERE id > ? GROUP BY run, kind
ON CONFLICT (run, kind) DO UPDATE SET
    n = n + excluded.n,
    first_ts = COALESCE(MIN(first_ts, excluded.first_ts), first_ts, excluded.first_ts),
    last_ts = COALESCE(MAX(last_ts, excluded.last_ts), last_ts, excluded.last_ts),
    last_step = COALESCE(MAX(last_step, excluded.last_step), last_step, excluded.last_step),
    last_id = MAX(last_id, excluded.last_id)
"""
# A record sent again with the step it lacked when first stored (live collectors do so).
RESTAMP = "UPDATE records SET step = ?, body = ? WHERE key = ? AND step IS NULL"
RESTAMP_KIND = """
UPDATE run_kinds SET last_step = COALESCE(MAX(last_step, ?), ?) WHERE run = ? AND kind = ?
"""
COUNT_RESTAMPS = """
INSERT INTO run_activity (run, restamps) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET restamps = restamps + excluded.restamps
"""
RECEIVED = """
INSERT INTO run_activity (run, received_at) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET received_at = excluded.received_at
"""
# -1 stands for "unknown" in the key columns, since NULLs never collide in a primary key.
UPDATE_SOURCES = """
INSERT OR IGNORE INTO run_sources (run, node, rank)
SELECT DISTINCT run, COALESCE(node, ''), COALESCE(rank, -1)
FROM records NOT INDEXED WHERE id > ?
"""
