"""The SQL of the PostgreSQL store: its tables, and the statements each write runs.

Kept apart from :mod:`dsmon.store.postgres` so the store's logic reads without pages of SQL,
as :mod:`dsmon.store.sqlite_sql` is for SQLite; the GPU tables' SQL is in
:mod:`dsmon.store.postgres_gpu`.
"""

from __future__ import annotations

from dsmon.store import frame_chunks as chunks
from dsmon.store import rank_sql
from dsmon.store.base import ROW_COLUMNS
from dsmon.store.gpu_sql import POSTGRES
from dsmon.store.postgres_gpu import DDL as GPU_DDL

DDL = (
    """CREATE TABLE IF NOT EXISTS dsmon_meta (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS records (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key BYTEA NOT NULL UNIQUE,
        run TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,
        step BIGINT,
        ts TEXT COLLATE "C",
        node TEXT COLLATE "C",
        rank BIGINT,
        file TEXT COLLATE "C",
        line BIGINT,
        body TEXT NOT NULL
    )""",
    # ``after_id`` polling of one run ("what is new since I last looked").
    "CREATE INDEX IF NOT EXISTS records_run_id ON records (run, id)",
    # ... and of one kind of it; added after schema version 1, so older stores get it here.
    "CREATE INDEX IF NOT EXISTS records_run_kind_id ON records (run, kind, id)",
    """CREATE TABLE IF NOT EXISTS run_kinds (
        run TEXT COLLATE "C" NOT NULL,
        kind TEXT COLLATE "C" NOT NULL,
        n BIGINT NOT NULL,
        first_ts TEXT COLLATE "C",
        last_ts TEXT COLLATE "C",
        last_step BIGINT,
        last_id BIGINT NOT NULL,
        PRIMARY KEY (run, kind)
    )""",
    """CREATE TABLE IF NOT EXISTS run_sources (
        run TEXT COLLATE "C" NOT NULL,
        node TEXT COLLATE "C" NOT NULL,
        rank BIGINT NOT NULL,
        PRIMARY KEY (run, node, rank)
    )""",
    """CREATE TABLE IF NOT EXISTS run_activity (
        run TEXT COLLATE "C" PRIMARY KEY,
        restamps BIGINT NOT NULL DEFAULT 0,
        received_at TEXT COLLATE "C"
    )""",
    *GPU_DDL,
    *rank_sql.ddl(POSTGRES),
    chunks.DDL.format(blob="BYTEA"),
    # What older stores had, and no query needs (every read asks for id order, which only
    # (run, id) and (run, kind, id) give without a sort); each costs every insert. Dropped on
    # open, as missing indexes are created on open: a reader of either layout reads the same.
    "DROP INDEX IF EXISTS records_run_kind_step, records_run_kind_ts, records_run_ts",
)

COLS = ", ".join(ROW_COLUMNS)
# Column types of the staging table (the records table's, without constraints).
_ROW_TYPES = {"key": "BYTEA", "step": "BIGINT", "rank": "BIGINT", "line": "BIGINT"}
# The staging table lives per connection and empties itself at every commit.
STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS dsmon_incoming (seq INTEGER, "
    + ", ".join(f"{c} {_ROW_TYPES.get(c, 'TEXT')}" for c in ROW_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
# One statement: insert what is new (in batch order, so ids follow the log), then fold the
# rows actually inserted into the bookkeeping tables. -1 and '' stand for an unknown rank
# or node in the key columns, as in the SQLite store. LEAST/GREATEST skip NULLs.
MOVE = f"""
WITH ins AS (
    INSERT INTO records ({COLS})
    SELECT {COLS} FROM dsmon_incoming ORDER BY seq
    ON CONFLICT (key) DO NOTHING
    RETURNING id, run, kind, step, ts, node, rank
), kinds AS (
    INSERT INTO run_kinds AS k (run, kind, n, first_ts, last_ts, last_step, last_id)
    SELECT run, kind, COUNT(*), MIN(ts), MAX(ts), MAX(step), MAX(id) FROM ins GROUP BY run, kind
    ON CONFLICT (run, kind) DO UPDATE SET
        n = k.n + excluded.n,
        first_ts = LEAST(k.first_ts, excluded.first_ts),
        last_ts = GREATEST(k.last_ts, excluded.last_ts),
        last_step = GREATEST(k.last_step, excluded.last_step),
        last_id = GREATEST(k.last_id, excluded.last_id)
), sources AS (
    INSERT INTO run_sources (run, node, rank)
    SELECT DISTINCT run, COALESCE(node, ''), COALESCE(rank, -1) FROM ins
    ON CONFLICT DO NOTHING
)
SELECT COUNT(*) FROM ins
"""

# Rows stored before without a step, sent again with it (live collectors do so): fill the
# step in place, then fold what changed into the bookkeeping.
RESTAMP = """
WITH filled AS (
    UPDATE records r SET step = i.step, body = i.body FROM dsmon_incoming i
    WHERE r.key = i.key AND r.step IS NULL AND i.step IS NOT NULL
    RETURNING r.run, r.kind, r.step
), kinds AS (
    UPDATE run_kinds k SET last_step = GREATEST(k.last_step, f.top)
    FROM (SELECT run, kind, MAX(step) AS top FROM filled GROUP BY run, kind) f
    WHERE k.run = f.run AND k.kind = f.kind
), counts AS (
    INSERT INTO run_activity AS c (run, restamps) SELECT run, COUNT(*) FROM filled GROUP BY run
    ON CONFLICT (run) DO UPDATE SET restamps = c.restamps + excluded.restamps
)
SELECT COUNT(*) FROM filled
"""
#: The newest id of the whole store: of the records, or of GPU samples (they share the ids).
LAST_ID = "SELECT GREATEST(MAX(id), (SELECT MAX(last_id) FROM gpu_batches)) FROM records"
RECEIVED = """
INSERT INTO run_activity (run, received_at) VALUES (%s, %s)
ON CONFLICT (run) DO UPDATE SET received_at = excluded.received_at
"""
# The per-rank tables (``dsmon.store.rank_tables``) hold the store's probe records: a new
# store's are empty and complete; an older store's are built by its first writer, then marked.
RANKS_BUILT = "rank_tables"
MARK_RANKS = (
    f"INSERT INTO dsmon_meta (name, value) VALUES ('{RANKS_BUILT}', 'built') ON CONFLICT DO NOTHING"
)
