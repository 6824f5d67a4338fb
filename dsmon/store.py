"""The record store: one SQLite file that one writer fills and many processes read.

SQLite runs in WAL mode, so the dashboard's readers never block the collector writing
and vice versa, with a busy timeout for the moments two writers meet. Each record is kept
as its JSON-lines body plus indexed columns for the queries the dashboard makes (a run's
records of one kind over a step or time range, or newer than an id). A small bookkeeping
table, updated in the same transaction as the records, answers :meth:`SQLiteStore.runs`
without scanning millions of rows. ``open_store`` also accepts ``postgresql://`` URLs
(``dsmon.store_pg``); what both backends share is in ``dsmon.store_schema``.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from dsmon.records import Record
from dsmon.store_schema import (
    ROW_COLUMNS,
    SCHEMA_VERSION,
    EncodedRecord,
    KindStats,
    RecordFilter,
    RecordRow,
    RunInfo,
    Store,
    StoreDataError,
    StoreError,
    batched,
    received_now,
    restamp_candidates,
    run_infos,
)

__all__ = ["RunInfo", "SQLiteStore", "Store", "StoreError", "open_store", "sqlite_path"]

#: How long a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 30.0

# Added after schema version 1 shipped: an older store gets it from its first writer
# (``_add_indexes``), and reads as empty while it is missing.
_ACTIVITY_DDL = """CREATE TABLE IF NOT EXISTS run_activity (
    run TEXT PRIMARY KEY,
    restamps INTEGER NOT NULL DEFAULT 0,
    received_at TEXT
)"""
# Added after schema version 1 shipped too: ``after_id`` reads of one kind ("what is new since
# id N") walk only the newer rows. A writer adds it to an older store on its first write.
_RUN_KIND_ID = "records_run_kind_id"
_RUN_KIND_ID_DDL = f"CREATE INDEX IF NOT EXISTS {_RUN_KIND_ID} ON records (run, kind, id)"
_DDL = (
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
    "CREATE INDEX IF NOT EXISTS records_run_kind_step ON records (run, kind, step)",
    "CREATE INDEX IF NOT EXISTS records_run_kind_ts ON records (run, kind, ts)",
    "CREATE INDEX IF NOT EXISTS records_run_ts ON records (run, ts)",
    _RUN_KIND_ID_DDL,
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
    _ACTIVITY_DDL,
)

_INSERT = (
    f"INSERT OR IGNORE INTO records ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)
# Folds the rows of one transaction (id > ?) into the per-run bookkeeping. SQLite's
# two-argument min()/max() return NULL when either side is NULL, hence the COALESCE.
# NOT INDEXED keeps the planner on the rowid range, the batch's own rows: left to itself it
# walks a (run, kind, ...) index of the whole table to save sorting the GROUP BY, which
# costs 100s of ms per batch once a big run is stored.
_UPDATE_KINDS = """
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
_RESTAMP = "UPDATE records SET step = ?, body = ? WHERE key = ? AND step IS NULL"
_RESTAMP_KIND = """
UPDATE run_kinds SET last_step = COALESCE(MAX(last_step, ?), ?) WHERE run = ? AND kind = ?
"""
_COUNT_RESTAMPS = """
INSERT INTO run_activity (run, restamps) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET restamps = restamps + excluded.restamps
"""
_RECEIVED = """
INSERT INTO run_activity (run, received_at) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET received_at = excluded.received_at
"""
# -1 stands for "unknown" in the key columns, since NULLs never collide in a primary key.
_UPDATE_SOURCES = """
INSERT OR IGNORE INTO run_sources (run, node, rank)
SELECT DISTINCT run, COALESCE(node, ''), COALESCE(rank, -1)
FROM records NOT INDEXED WHERE id > ?
"""


def sqlite_path(url: str) -> str:
    """The file path of a store URL: ``sqlite:///rel/path``, ``sqlite:////abs/path`` or a path."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    if url.startswith("sqlite://"):
        raise StoreError(f"{url}: expected sqlite:///PATH (three slashes)")
    return url


class SQLiteStore(Store):
    """The default store backend.

    One connection per store object, shared by threads under a lock (Streamlit serves
    sessions from threads). Other processes open their own ``SQLiteStore`` on the same
    file; WAL lets them read while this one writes.

    Args:
        path: the database file; created with its schema when missing.

    Raises:
        StoreError: the file cannot be opened or holds a schema of another version.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._indexed = False
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._setup()
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None

    def _setup(self) -> None:
        """Pragmas for concurrent use, then the schema (or a check of the existing one)."""
        conn = self._conn
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if self.path != ":memory:":
            conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL is durable in WAL mode except for the last commits on power loss.
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):
            raise StoreError(
                f"cannot open store {self.path}: schema version {version}, "
                f"this dsmon reads version {SCHEMA_VERSION}"
            )
        if version == SCHEMA_VERSION:
            return  # a reader opening an existing store takes no write lock
        with self._transaction():
            for stmt in _DDL:
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._indexed = True

    def _add_indexes(self) -> None:
        """Give a store written by an older dsmon what was added since (first write only).

        That is the ``(run, kind, id)`` index and the ``run_activity`` table. Readers never do it: building an index takes the write lock, for seconds on a big store.
        """
        if self._indexed:
            return
        found = self._conn.execute(
            "SELECT name FROM sqlite_master WHERE name IN (?, 'run_activity')", (_RUN_KIND_ID,)
        ).fetchall()
        if len(found) < 2:
            with self._transaction():
                self._conn.execute(_RUN_KIND_ID_DDL)
                self._conn.execute(_ACTIVITY_DDL)
        self._indexed = True

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    def add(self, records: Iterable[Record | EncodedRecord], *, live: bool = False) -> int:
        """Store the records not stored yet, committing every few thousand; returns how many."""
        inserted = 0
        with self._lock, _errors(self.path):
            self._add_indexes()
        for rows in batched(records):
            with self._lock, _errors(self.path), self._transaction():
                if live:
                    self._received(rows)
                before, changes = self._max_id(), self._conn.total_changes
                self._conn.executemany(_INSERT, rows)
                new = self._conn.total_changes - changes
                if new:
                    self._conn.execute(_UPDATE_KINDS, (before,))
                    self._conn.execute(_UPDATE_SOURCES, (before,))
                if new < len(rows):  # some were stored before: fill steps they lacked
                    self._restamp(rows)
                inserted += new
        return inserted

    def _restamp(self, rows: list[RecordRow]) -> None:
        """Give stored rows without a step the step their copy in ``rows`` carries."""
        conn = self._conn
        for run, cands in restamp_candidates(rows).items():
            changes = conn.total_changes
            conn.executemany(_RESTAMP, [(r.step, r.body, r.key) for r in cands])
            filled = conn.total_changes - changes
            if not filled:
                continue
            top: dict[str, int] = {}
            for r in cands:
                top[r.kind] = max(top.get(r.kind, 0), r.step or 0)
            conn.executemany(_RESTAMP_KIND, [(s, s, run, k) for k, s in top.items()])
            conn.execute(_COUNT_RESTAMPS, (run, filled))

    def _received(self, rows: list[RecordRow]) -> None:
        """Note that the runs of ``rows`` are being sent to now (see ``RunInfo.received_at``)."""
        now = received_now()
        self._conn.executemany(_RECEIVED, [(run, now) for run in {r.run for r in rows}])

    def _activity(self) -> dict[str, tuple[int, str | None]]:
        """Restamp count and last receive time per run ({} in a store that never had any)."""
        try:
            rows = self._conn.execute(
                "SELECT run, restamps, received_at FROM run_activity"
            ).fetchall()
        except sqlite3.OperationalError:  # no such table: an older store, nothing noted
            return {}
        return {run: (int(n), at) for run, n, at in rows}

    def restamps(self, run: str) -> int:
        """Rows of ``run`` whose step was filled in later (0 in a store that never had one)."""
        with self._lock:
            return self._activity().get(run, (0, None))[0]

    def _max_id(self) -> int:
        row = self._conn.execute("SELECT MAX(id) FROM records").fetchone()
        return int(row[0] or 0)

    def runs(self) -> list[RunInfo]:
        """Every run, from the bookkeeping tables (no scan of the records)."""
        with self._lock, _errors(self.path):
            stats = self._conn.execute(
                "SELECT run, kind, n, first_ts, last_ts, last_step, last_id FROM run_kinds"
            ).fetchall()
            sources = self._conn.execute("SELECT run, node, rank FROM run_sources").fetchall()
            activity = self._activity()
        return run_infos((KindStats(*row) for row in stats), sources, activity)

    def last_id(self, run: str | None = None) -> int:
        """Id of the newest record of ``run`` (or of the whole store); 0 if there is none."""
        with self._lock:
            if run is None:
                return self._max_id()
            row = self._conn.execute(
                "SELECT MAX(last_id) FROM run_kinds WHERE run = ?", (run,)
            ).fetchone()
        return int(row[0] or 0)

    def _select(self, flt: RecordFilter) -> list[tuple[int, str]]:
        where, params = flt.where("?")
        sql = f"SELECT id, body FROM records WHERE {where} ORDER BY id"
        if flt.limit is not None:
            sql += " LIMIT ?"
            params.append(flt.limit)
        with self._lock, _errors(self.path):
            return self._conn.execute(sql, params).fetchall()

    def check_writable(self) -> None:
        """Rewrite the schema version in place: a real commit through the WAL, no data."""
        with self._lock, _errors(self.path), self._transaction():
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the connection (further calls fail)."""
        with self._lock:
            self._conn.close()


@contextmanager
def _errors(path: str) -> Iterator[None]:
    """SQLite failures at run time (locked too long, disk full, corrupt file) as StoreError.

    Misuse (a closed store) stays a ``sqlite3.ProgrammingError``: that is a bug, not a
    condition the user can fix.
    """
    try:
        yield
    except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
        if isinstance(exc, sqlite3.ProgrammingError):
            raise
        if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError):
            raise StoreDataError(f"store {path}: {exc}") from None
        raise StoreError(f"store {path}: {exc}") from None


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error).

    IMMEDIATE takes the write lock up front: a deferred transaction that reads first and
    writes later can fail with SQLITE_BUSY without waiting, when another writer got there
    in between.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            # SQLite rolls back by itself on some errors (a full disk): a ROLLBACK then
            # would fail and hide the error that matters.
            self._conn.execute("ROLLBACK")


def open_store(url: str | Path) -> Store:
    """Open the store a URL names: a path or ``sqlite:///path`` (SQLite), ``postgresql://...``.

    Raises:
        StoreError: the URL names an unknown or unavailable backend, or the store cannot be
            opened.
    """
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            backend = importlib.import_module("dsmon.store_pg")
        except ImportError as exc:
            raise StoreError(f"cannot open store {text}: PostgreSQL backend: {exc}") from None
        store: Store = backend.PgStore(text)
        return store
    if "://" in text and not text.startswith("sqlite://"):
        raise StoreError(f"cannot open store {text}: unknown URL scheme")
    return SQLiteStore(sqlite_path(text))
