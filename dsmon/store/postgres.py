"""The PostgreSQL backend, for deployments where many nodes report to one dashboard.

SQLite serialises writers on one file; when dozens of collectors push through several ingest
servers, or the dashboard runs on another host than the database, PostgreSQL takes over.
The tables, queries and answers are the SQLite store's (each part writes its SQL once);
what is PostgreSQL's own here:

- a batch of records is COPYed into a temporary table and moved into ``records`` with one
  ``INSERT ... ON CONFLICT (key) DO NOTHING`` that also updates the per-run bookkeeping, so a
  replayed batch stores nothing twice and costs one round trip;
- writers take a table lock that only writers contend for (readers never wait): ids are
  handed out and committed in the same order, so a reader polling ``after_id`` can never see
  id 11 committed while id 10 is still in flight and skip it forever. GPU sample ids are
  reserved from the ``records`` identity's own sequence under the same lock, and their batch
  is COPYed into a temporary table too (duplicates within it dropped first: COPY cannot
  skip them);
- reads that must see one state run in a REPEATABLE READ transaction;
- a dropped connection (server restart, network blip) is reopened and the call retried
  once; writes are idempotent, so the retry cannot duplicate a record.

The tables go into the first schema of the connection's ``search_path`` (``public`` by
default; ``?options=-csearch_path%3Dname`` in the URL picks another).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

from dsmon.store.backend import Backend, Db
from dsmon.store.dialect import POSTGRES
from dsmon.store.errors import StoreDataError, StoreError
from dsmon.store.gpu.sql import STAGED, batch_rollup_ddl, temp_ddl
from dsmon.store.records.rows import ROW_COLUMNS, STEP_AT, Inserted, Row
from dsmon.store.schema import (
    INSERT_META,
    MADE_BY_ROW,
    META_DDL,
    META_ROWS,
    READ_META,
    SCHEMA_ROW,
    SCHEMA_VERSION,
    refused,
)
from dsmon.store.url import redact_url

T = TypeVar("T")

#: How long opening a connection may take before the store gives up.
CONNECT_TIMEOUT_S = 10
#: SQLSTATE classes of errors caused by the values written: data exceptions (22),
#: integrity violations (23) and program limits such as an index row too long (54).
_DATA_SQLSTATES = ("22", "23", "54")

COLS = ", ".join(ROW_COLUMNS)
# Column types of the staging table (the records table's, without constraints).
_ROW_TYPES = {"key": "BYTEA", "step": "BIGINT", "rank": "BIGINT", "line": "BIGINT"}
# The staging table lives per connection and empties itself at every commit.
STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS dsmon_incoming (seq INTEGER, "
    + ", ".join(f"{c} {_ROW_TYPES.get(c, 'TEXT')}" for c in ROW_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
# One statement: insert what is new (in batch order, so ids follow the log), then add the
# rows actually inserted to the bookkeeping tables. -1 and '' stand for an unknown rank
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
# step in place, then note what changed in the bookkeeping.
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
_COPY_SAMPLES = f"COPY pg_temp.gpu_batch ({', '.join(STAGED)}, abs_ms) FROM STDIN"
_ALLOCATE = """
SELECT setval(seq, nextval(seq) + %s - 1)
FROM (SELECT pg_get_serial_sequence('records', 'id') AS seq) AS s
"""


class PostgresDb(Db):
    """A PostgreSQL connection, inside one of the backend's reads or transactions."""

    dialect = POSTGRES

    def insert_records(self, rows: list[Row]) -> Inserted:
        """COPY the rows to the staging table and move the new ones, bookkeeping and all.

        No ``first_id``: other sessions take numbers of the identity's sequence meanwhile,
        so the new rows are read back by their id range.
        """
        with self.conn.cursor() as cur:
            with cur.copy(f"COPY dsmon_incoming (seq, {COLS}) FROM STDIN") as copy:
                for seq, row in enumerate(rows):
                    copy.write_row((seq, *row))
            found = cur.execute(MOVE).fetchone()
            new = int(found[0]) if found else 0
            if new < len(rows) and any(r[STEP_AT] is not None for r in rows):
                cur.execute(RESTAMP)
        return Inserted(new)

    def allocate_ids(self, n: int) -> int:
        """Reserve ``n`` ids in one call on the ``records`` identity's sequence."""
        found = self.conn.execute(_ALLOCATE, (n,)).fetchone()
        return int(found[0]) - n + 1

    def stage_samples(self, values: list[tuple[Any, ...]]) -> None:
        """COPY the batch to the connection's temporary table, first of each sample only."""
        conn = self.conn
        conn.execute("DELETE FROM pg_temp.gpu_batch")
        first: dict[tuple[Any, Any], tuple[Any, ...]] = {}
        for row in values:
            first.setdefault((row[0], row[1]), row)
        with conn.cursor().copy(_COPY_SAMPLES) as copy:
            for row in first.values():
                copy.write_row(row)


class PostgresBackend(Backend):
    """A store in a PostgreSQL database, selected by a ``postgresql://`` URL.

    One connection per backend object, shared by threads under a lock, like SQLite's.

    Args:
        url: a libpq connection URL, ``postgresql://user:password@host:port/database``.

    The connection is opened by the first call (:meth:`prepare`, when the store opens).
    """

    dialect = POSTGRES

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = redact_url(url)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None

    def _connect(self) -> psycopg.Connection[Any]:
        """A fresh autocommit connection with the staging tables in place."""
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        conn.execute(STAGING)
        conn.execute(temp_ddl(POSTGRES))
        conn.execute(batch_rollup_ddl(POSTGRES))
        return conn

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, reopened when the server closed it."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = self._connect()
        return self._conn

    def _call(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        """Run ``fn`` on the live connection; retry once on a new one if the link dropped.

        Callers hold ``self._lock``. Every operation is a read or an idempotent write, so
        running it a second time after a failure of unknown outcome is safe.
        """
        try:
            try:
                return fn(self._live())
            except psycopg.OperationalError:
                if self._conn is not None and not (self._conn.broken or self._conn.closed):
                    raise  # the server refused the statement: retrying would not help
                self._conn = None
                return fn(self._live())
        except psycopg.Error as exc:
            reason = " ".join(str(exc).split())
            # The data itself is refused (too long for an index, out of range): permanent.
            data = isinstance(exc, psycopg.DataError | psycopg.IntegrityError) or (
                exc.sqlstate is not None and exc.sqlstate.startswith(_DATA_SQLSTATES)
            )
            error = StoreDataError if data else StoreError
            raise error(f"store {self.name}: {reason}") from None

    def prepare(self, ddl: Sequence[str]) -> None:
        """Create the tables of a new store, or check that a store is of this schema version."""

        def setup(conn: psycopg.Connection[Any]) -> None:
            db = PostgresDb(conn)
            with conn.transaction():
                # Two processes opening a new database at once would race on CREATE TABLE.
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('dsmon schema'))")
                conn.execute(META_DDL)
                meta = dict(db.rows(READ_META))
                found = meta.get(SCHEMA_ROW)
                if found is None:
                    for stmt in ddl:
                        db.execute(stmt)
                    db.execute_many(INSERT_META, META_ROWS)
                elif found != str(SCHEMA_VERSION):
                    raise refused(self.name, found, meta.get(MADE_BY_ROW))

        with self._lock:
            self._call(setup)

    def read(self, fn: Callable[[Db], T]) -> T:
        """``fn`` on the live connection, in autocommit: each statement is its own."""
        with self._lock:
            return self._call(lambda conn: fn(PostgresDb(conn)))

    def snapshot(self, fn: Callable[[Db], T]) -> T:
        """``fn`` in a REPEATABLE READ transaction: every read sees its first one's state."""

        def snap(conn: psycopg.Connection[Any]) -> T:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return fn(PostgresDb(conn))

        with self._lock:
            return self._call(snap)

    def write(self, fn: Callable[[Db], T], undo: Callable[[], None] | None = None) -> T:
        """``fn`` in a transaction holding the writers' table lock; retried once on a new link."""

        def attempt(conn: psycopg.Connection[Any]) -> T:
            try:
                with conn.transaction():
                    # Writers queue here; readers (ACCESS SHARE) are not blocked by this mode.
                    # GPU sample ids are taken under it too, so every id commits in the order
                    # handed out.
                    conn.execute("LOCK TABLE records IN SHARE ROW EXCLUSIVE MODE")
                    return fn(PostgresDb(conn))
            except BaseException:
                if undo is not None:
                    undo()
                raise

        with self._lock:
            return self._call(attempt)

    def wrote_live(self) -> None:
        """Nothing to do: the server checkpoints its own log."""

    def write_briefly(self, fn: Callable[[Db], None]) -> None:
        """``fn`` committed as it runs: the writers' lock is on ``records``, never waited on."""
        self.read(fn)

    def check_writable(self) -> None:
        """Rewrite the schema version row in place: a committed write that changes no data."""
        rewrite = "UPDATE dsmon_meta SET value = value WHERE name = ?"
        self.read(lambda db: db.execute(rewrite, (SCHEMA_ROW,)))

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
