"""The PostgreSQL store backend, for deployments where many nodes report to one dashboard.

SQLite serialises writers on one file; when dozens of collectors push through several ingest
servers, or the dashboard runs on another host than the database, PostgreSQL takes over.
The tables, row form and query filters are the SQLite store's (``dsmon.store.base``), so
both backends answer every question the same way; only the SQL dialect and connection
handling differ:

- A batch is COPYed into a temporary table and moved into ``records`` with one
  ``INSERT ... ON CONFLICT (key) DO NOTHING`` that also updates the per-run bookkeeping, so a
  replayed batch stores nothing twice and costs one round trip.
- Writers take a table lock that only writers contend for (readers never wait): ids are
  handed out and committed in the same order, so a reader polling ``after_id`` can never see
  id 11 committed while id 10 is still in flight and skip it forever.
- Text columns use the "C" collation: ``ts`` range filters and min/max compare ISO strings
  byte-wise, as SQLite does, whatever the database's default locale.
- A dropped connection (server restart, network blip) is reopened and the call retried
  once; writes are idempotent, so the retry cannot duplicate a record.
- GPU samples go to the typed GPU tables with roll-ups, as in SQLite
  (:mod:`dsmon.store.postgres_gpu`); their ids come from the records' sequence.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import psycopg

from dsmon.model.records import Record
from dsmon.store import frame_chunks as chunks
from dsmon.store import rank_tables
from dsmon.store.base import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    EncodedRecord,
    KindStats,
    RecordFilter,
    RecordRow,
    RunInfo,
    StoreDataError,
    StoreError,
    foreign_version,
    received_now,
    redact_url,
    run_infos,
)
from dsmon.store.gpu_rows import SampleRow, SeriesInfo, SeriesKey
from dsmon.store.gpu_store import TypedGpuStore, split
from dsmon.store.gpu_tables import GpuTables
from dsmon.store.postgres_gpu import TEMP_DDL, PgGpuTables
from dsmon.store.postgres_sql import (
    COLS,
    DDL,
    LAST_ID,
    MARK_RANKS,
    MOVE,
    RANKS_BUILT,
    RECEIVED,
    RESTAMP,
    STAGING,
)
from dsmon.store.rekey import rekey

__all__ = ["PgStore", "redact_url"]

T = TypeVar("T")
logger = logging.getLogger(__name__)

#: How long opening a connection may take before the store gives up.
CONNECT_TIMEOUT_S = 10
#: SQLSTATE classes of errors caused by the values written: data exceptions (22),
#: integrity violations (23) and program limits such as an index row too long (54).
_DATA_SQLSTATES = ("22", "23", "54")


class PgStore(TypedGpuStore):
    """A store in a PostgreSQL database, selected by a ``postgresql://`` URL.

    The tables go into the first schema of the connection's ``search_path`` (``public`` by
    default; ``?options=-csearch_path%3Dname`` in the URL picks another). One connection per
    store object, shared by threads under a lock, like the SQLite store.

    Args:
        url: a libpq connection URL, ``postgresql://user:password@host:port/database``.

    Raises:
        StoreError: the server cannot be reached, or the database holds tables of another
            dsmon schema version.
    """

    RANKS_READY = f"SELECT 1 FROM dsmon_meta WHERE name = '{RANKS_BUILT}'"

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._series: dict[SeriesKey, SeriesInfo] = {}  # GPU series ids (never change)
        self._gpu_layout: dict[str, bool] = {}  # the samples' layout, once it is this dsmon's
        # Until the first write: an older dsmon's GPU records are moved, its keys re-keyed.
        self._upgraded = False
        with self._lock:
            self._call(self._setup)

    def _connect(self) -> psycopg.Connection[Any]:
        """A fresh autocommit connection with the staging tables in place."""
        conn = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
        conn.execute(STAGING)
        conn.execute(TEMP_DDL)
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
            raise error(f"store {redact_url(self.url)}: {reason}") from None

    def _setup(self, conn: psycopg.Connection[Any]) -> None:
        """Create the tables if needed, or check that they are of this schema version."""
        with conn.transaction():
            # Two processes opening a new database at once would race on CREATE TABLE.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('dsmon schema'))")
            for stmt in DDL:
                conn.execute(stmt)
            row = conn.execute("SELECT value FROM dsmon_meta WHERE name = 'schema_version'")
            found = row.fetchone()
            if found is None:
                conn.execute(
                    "INSERT INTO dsmon_meta (name, value) VALUES ('schema_version', %s)",
                    (str(SCHEMA_VERSION),),
                )
                PgGpuTables(conn).mark_typed()  # a new store: nothing to move
                conn.execute(MARK_RANKS)
            elif found[0] not in {str(v) for v in READABLE_VERSIONS}:
                raise foreign_version(redact_url(self.url), found[0])

    def prepare_writes(self) -> None:
        """The layout an older dsmon left, brought up to date now (:func:`_upgrade`)."""

        def upgrade(conn: psycopg.Connection[Any]) -> None:
            with conn.transaction():
                conn.execute("LOCK TABLE records IN SHARE ROW EXCLUSIVE MODE")
                _upgrade(PgGpuTables(conn, self._series, self._gpu_layout))

        with self._lock:
            if not self._upgraded:
                self._call(upgrade)
                self._upgraded = True

    def add(
        self, records: Iterable[Record | EncodedRecord | RecordRow], *, live: bool = False
    ) -> int:
        """Store the records not stored yet, one transaction per few thousand; returns how many."""
        inserted = 0
        for rows, samples in split(records):
            write = functools.partial(self._write, rows=rows, samples=samples, live=live)
            with self._lock:
                inserted += self._call(write)
                self._upgraded = True
        return inserted

    def _write(
        self,
        conn: psycopg.Connection[Any],
        rows: list[RecordRow],
        samples: list[SampleRow],
        live: bool,
    ) -> int:
        """One batch in one transaction; cached GPU series are forgotten if it fails."""
        tables = PgGpuTables(conn, self._series, self._gpu_layout)
        try:
            return _insert(conn, tables, rows, samples, live=live, upgraded=self._upgraded)
        except BaseException:
            tables.forget()
            raise

    def _on_gpu(self, fn: Callable[[GpuTables], T]) -> T:
        def snapshot(conn: psycopg.Connection[Any]) -> T:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return fn(PgGpuTables(conn, self._series, self._gpu_layout))

        with self._lock:
            return self._call(snapshot)

    def runs(self) -> list[RunInfo]:
        """Every run, from the bookkeeping tables (no scan of the records)."""
        with self._lock:
            stats, sources, activity = self._call(_run_tables)
        return run_infos(
            (KindStats(*row) for row in stats),
            sources,
            {run: (int(n), at) for run, n, at in activity},
        )

    def last_id(self, run: str | None = None) -> int:
        """Id of the newest record of ``run`` (or of the whole store); 0 if there is none."""
        sql = LAST_ID
        params: tuple[str, ...] = ()
        if run is not None:
            sql, params = "SELECT MAX(last_id) FROM run_kinds WHERE run = %s", (run,)
        with self._lock:
            row = self._call(lambda conn: conn.execute(sql, params).fetchone())
        return int(row[0] or 0) if row else 0

    def restamps(self, run: str) -> int:
        """Rows of ``run`` whose step was filled in later."""
        sql = "SELECT restamps FROM run_activity WHERE run = %s"
        with self._lock:
            row = self._call(lambda conn: conn.execute(sql, (run,)).fetchone())
        return int(row[0]) if row else 0

    def _select(self, flt: RecordFilter) -> list[tuple[int, str]]:
        sql, params = flt.select("%s")
        with self._lock:
            rows = self._call(lambda conn: conn.execute(sql, params).fetchall())
        return [(int(i), str(body)) for i, body in rows]

    def _load_chunk(self, key: chunks.ChunkKey) -> bytes | None:
        sql = chunks.SELECT.format(ph="%s")
        with self._lock:
            row = self._call(lambda conn: conn.execute(sql, chunks.select_params(key)).fetchone())
        return None if row is None else bytes(row[0])

    def _kept_chain(self, key: chunks.ChunkKey) -> dict[int, int]:
        sql = chunks.CHAIN.format(ph="%s")
        try:
            with self._lock:
                rows = self._call(lambda c: c.execute(sql, chunks.chain_params(key)).fetchall())
        except StoreError as exc:  # a table of another shape: the pages are parsed again
            logger.info("dsmon: kept frame chunks not readable: %s", exc)
            return {}
        return {int(a): int(b) for a, b in rows}

    def _save_chunk(self, key: chunks.ChunkKey, last_id: int, data: bytes) -> None:
        """Keep the chunk; writers' table lock is on ``records``, so this never waits on it."""
        upsert = chunks.UPSERT.format(ph="%s")
        self._chunk_write(key, "kept", upsert, chunks.upsert_params(key, last_id, data))

    def _drop_chunk(self, key: chunks.ChunkKey) -> None:
        """Forget a kept chunk (a tail whose page filled); one left behind is never used."""
        delete = chunks.DELETE.format(ph="%s")
        self._chunk_write(key, "dropped", delete, chunks.delete_params(key))

    def _chunk_write(
        self, key: chunks.ChunkKey, done: str, sql: str, params: tuple[object, ...]
    ) -> None:
        """One statement on ``frame_chunks``, best effort: a read-only role parses JSON again."""
        try:
            with self._lock:
                self._call(lambda conn: conn.execute(sql, params))
        except StoreError as exc:
            logger.info("dsmon: frame chunk of %s not %s: %s", key.kind, done, exc)

    def check_writable(self) -> None:
        """Rewrite the schema version row in place: a committed write that changes no data."""
        sql = "UPDATE dsmon_meta SET value = value WHERE name = 'schema_version'"
        with self._lock:
            self._call(lambda conn: conn.execute(sql))

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _insert(
    conn: psycopg.Connection[Any],
    tables: PgGpuTables,
    rows: list[RecordRow],
    samples: list[SampleRow],
    *,
    live: bool = False,
    upgraded: bool = True,
) -> int:
    """Store GPU samples, then COPY ``rows`` to the staging table and move the new ones.

    Commits before returning. ``typed`` False: first look for GPU samples an older dsmon
    kept as records.
    """
    with conn.transaction(), conn.cursor() as cur:
        # Writers queue here; readers (ACCESS SHARE) are not blocked by this mode. GPU
        # sample ids are taken under it too, so every id commits in the order handed out.
        cur.execute("LOCK TABLE records IN SHARE ROW EXCLUSIVE MODE")
        if not upgraded:
            _upgrade(tables)
        new = tables.add(samples)
        if rows:
            kinds = {r.kind for r in rows}
            before = _max_id(cur) if kinds & rank_tables.RANK_KINDS else 0
            new += _insert_rows(cur, rows)
            rank_tables.fold(tables, before, kinds)
        if live:
            runs = {r.run for r in rows} | {s.key.run for s in samples}
            now = received_now()
            cur.executemany(RECEIVED, [(run, now) for run in sorted(runs)])
    return new


def _upgrade(tables: PgGpuTables) -> None:
    """Give a store an older dsmon wrote this one's layout, unless done before.

    Under the writers' lock: move GPU samples kept as records to the GPU tables, store
    samples kept by series and time in id order, then give a version 1 store version 2 keys.
    """
    tables.move_once()
    tables.relayout()
    if not tables.rows(PgStore.RANKS_READY):  # probe records stored before the rank tables
        rank_tables.fold(tables, 0, rank_tables.RANK_KINDS)
        tables.execute(MARK_RANKS)
    found = tables.rows("SELECT value FROM dsmon_meta WHERE name = 'schema_version'")
    if found and found[0][0] != str(SCHEMA_VERSION):
        rekey(tables)
        tables.execute(
            "UPDATE dsmon_meta SET value = ? WHERE name = 'schema_version'", (str(SCHEMA_VERSION),)
        )


def _max_id(cur: psycopg.Cursor[Any]) -> int:
    """The newest record id: this transaction's rows come after it (writers hold the lock)."""
    found = cur.execute("SELECT COALESCE(MAX(id), 0) FROM records").fetchone()
    return int(found[0]) if found else 0


def _insert_rows(cur: psycopg.Cursor[Any], rows: list[RecordRow]) -> int:
    """COPY records-table rows to the staging table and move the new ones; how many."""
    with cur.copy(f"COPY dsmon_incoming (seq, {COLS}) FROM STDIN") as copy:
        for seq, row in enumerate(rows):
            copy.write_row((seq, *row))
    found = cur.execute(MOVE).fetchone()
    new = int(found[0]) if found else 0
    if new < len(rows) and any(r.step is not None for r in rows):
        cur.execute(RESTAMP)
    return new


def _run_tables(conn: psycopg.Connection[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """The bookkeeping rows behind :meth:`PgStore.runs`, read in one snapshot."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        stats = conn.execute(
            "SELECT run, kind, n, first_ts, last_ts, last_step, last_id FROM run_kinds"
        ).fetchall()
        sources = conn.execute("SELECT run, node, rank FROM run_sources").fetchall()
        activity = conn.execute("SELECT run, restamps, received_at FROM run_activity").fetchall()
    return stats, sources, activity
