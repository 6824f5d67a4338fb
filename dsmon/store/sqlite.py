"""The SQLite backend: one file that one writer fills and many processes read.

SQLite runs in WAL mode, so the dashboard's readers never block the collector writing and
vice versa, with a busy timeout for the moments two writers meet. One connection per backend
object, shared by threads under a lock (Streamlit serves sessions from threads); other
processes open their own on the same file. What is SQLite's own here:

- errors: a failure the user can act on (a locked, full or corrupt file) reaches callers as
  a :class:`StoreError`, never a bare ``sqlite3`` error; misuse (a closed store) stays a
  ``sqlite3.ProgrammingError``, a bug rather than a condition to fix;
- turns: a write transaction is ``BEGIN IMMEDIATE``, which takes the write lock up front (a
  deferred one that reads first can fail with SQLITE_BUSY without waiting, when another
  writer got there in between), and that one lock is what makes ids commit in order;
- a batch of records: ``INSERT OR IGNORE``, then the bookkeeping added up from the rows (all
  new) or the batch's own id range, and the steps of stored rows filled in from copies that
  now carry one;
- ids for GPU samples: ``sqlite_sequence``, the AUTOINCREMENT counter of ``records``, moved
  by the batch's size under the write lock;
- the write-ahead log of live writers, checkpointed by a thread of its own
  (:class:`BackgroundCheckpoint`).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from dsmon.store.backend import Backend, Db
from dsmon.store.dialect import SQLITE
from dsmon.store.errors import StoreDataError, StoreError
from dsmon.store.gpu.sql import STAGED, batch_rollup_ddl, temp_ddl
from dsmon.store.records.rows import KEY_AT, ROW_COLUMNS, Inserted, RecordRow, Row
from dsmon.store.records.sql import MAX_ID
from dsmon.store.records.tally import kind_rows, source_rows
from dsmon.store.schema import (
    INSERT_META,
    MADE_BY_ROW,
    META_DDL,
    META_ROWS,
    READ_META,
    SCHEMA_VERSION,
    refused,
)

T = TypeVar("T")
logger = logging.getLogger(__name__)

#: How long a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 30.0
#: How long a brief write (a reader keeping a sealed page) waits for another writer.
BRIEF_WAIT_MS = 250
#: Least seconds between two background checkpoints (a pass copies what came since).
CHECKPOINT_EVERY_S = 0.5
#: A live writer's own checkpoint then happens only past this many WAL pages (64 MiB).
BACKSTOP_PAGES = 16384

INSERT = (
    f"INSERT OR IGNORE INTO records ({', '.join(ROW_COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in ROW_COLUMNS)})"
)
#: Rows one INSERT statement carries (see :func:`insert_rows`): a batch's rows go 200 to a
#: statement, what is left 50, 10, then 1 at a time, so that a connection prepares four
#: statements, not one for every size a batch ends with. A SQLite built with a lower limit
#: of ``?`` per statement (999 before 3.32) skips the sizes past it.
ROWS_PER_INSERT = (200, 50, 10, 1)
# Adds the rows of one transaction (id > ?) to the per-run bookkeeping. SQLite's
# two-argument min()/max() return NULL when either side is NULL, hence the COALESCE.
# NOT INDEXED keeps the planner on the rowid range, the batch's own rows: left to itself it
# walks a (run, kind, ...) index of the whole table to save sorting the GROUP BY, which
# costs 100s of ms per batch once a big run is stored.
_KINDS_MERGE = """
ON CONFLICT (run, kind) DO UPDATE SET
    n = n + excluded.n,
    first_ts = COALESCE(MIN(first_ts, excluded.first_ts), first_ts, excluded.first_ts),
    last_ts = COALESCE(MAX(last_ts, excluded.last_ts), last_ts, excluded.last_ts),
    last_step = COALESCE(MAX(last_step, excluded.last_step), last_step, excluded.last_step),
    last_id = MAX(last_id, excluded.last_id)
"""
_KINDS_INTO = "INSERT INTO run_kinds (run, kind, n, first_ts, last_ts, last_step, last_id)"
UPDATE_KINDS = f"""{_KINDS_INTO}
SELECT run, kind, COUNT(*), MIN(ts), MAX(ts), MAX(step), MAX(id)
FROM records NOT INDEXED WHERE id > ? GROUP BY run, kind{_KINDS_MERGE}"""
#: The same, of rows added up in Python (:func:`dsmon.store.records.tally.kind_rows`).
ADD_KINDS = f"{_KINDS_INTO} VALUES (?, ?, ?, ?, ?, ?, ?){_KINDS_MERGE}"
# -1 stands for "unknown" in the key columns, since NULLs never collide in a primary key.
UPDATE_SOURCES = """
INSERT OR IGNORE INTO run_sources (run, node, rank)
SELECT DISTINCT run, COALESCE(node, ''), COALESCE(rank, -1)
FROM records NOT INDEXED WHERE id > ?
"""
ADD_SOURCES = "INSERT OR IGNORE INTO run_sources (run, node, rank) VALUES (?, ?, ?)"
# A record sent again with the step it lacked when first stored (live collectors do so).
RESTAMP = "UPDATE records SET step = ?, body = ? WHERE key = ? AND step IS NULL"
RESTAMP_KIND = """
UPDATE run_kinds SET last_step = COALESCE(MAX(last_step, ?), ?) WHERE run = ? AND kind = ?
"""
COUNT_RESTAMPS = """
INSERT INTO run_activity (run, restamps) VALUES (?, ?)
ON CONFLICT (run) DO UPDATE SET restamps = restamps + excluded.restamps
"""
_STAGE = f"INSERT OR IGNORE INTO temp.gpu_batch VALUES ({', '.join('?' * (len(STAGED) + 1))})"


def _null(value: None) -> None:
    """NULL's adapter: None as it is, which the driver binds as NULL."""
    return value


# Python's driver (3.11) binds a None only after asking its adapter registry and, that
# failing, looking up an ``__adapt__`` attribute that fails by raising and clearing an
# AttributeError, as it does for a key bound as ``bytes`` (see insert_rows): about 2,000
# instructions a NULL, and the ingest server binds one or two a record (a row without a
# step, time or rank, a summary row without a phase's time, a GPU sample without a clock
# or GPM reading). With an adapter registered the lookup succeeds (a third of a
# microsecond less a NULL); the value bound is the same NULL. The registry is the
# process's: any connection binds None the same way.
sqlite3.register_adapter(type(None), _null)


@contextmanager
def store_errors(where: str) -> Iterator[None]:
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
            raise StoreDataError(f"store {where}: {exc}") from None
        raise StoreError(f"store {where}: {exc}") from None


def values_statements(
    conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]
) -> Iterator[tuple[str, list[Any]]]:
    """``sql``, an INSERT of one row of ``VALUES``, as statements of many rows and their values.

    The rows go :data:`ROWS_PER_INSERT` to a statement, in order: SQLite runs a statement's
    ``VALUES`` rows one after the other, each as it would run alone (an upsert of a key a row
    before it inserted updates that row), so the statements do what running ``sql`` once per
    row does, without binding, stepping and resetting a statement per row.
    """
    query = many_values(sql, 1)
    width = query.count("?")
    most = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width
    start = 0
    for size in ROWS_PER_INSERT:
        if size > most:
            continue
        query = many_values(sql, size)
        while len(rows) - start >= size:
            yield query, list(_chain(rows[start : start + size]))
            start += size


@functools.cache
def many_values(sql: str, n: int) -> str:
    """``sql``, an INSERT with one row of ``VALUES (...)``, with ``n`` such rows."""
    head, mark, tail = sql.partition(" VALUES (")
    if not mark:
        raise ValueError(f"not an INSERT of one row of VALUES: {sql!r}")
    one, _, rest = tail.partition(")")
    return f"{head} VALUES {', '.join([f'({one})'] * n)}{rest}"


def insert_rows(conn: sqlite3.Connection, rows: Sequence[Row]) -> None:
    """``INSERT OR IGNORE`` the rows, many to a statement (:data:`ROWS_PER_INSERT`).

    ``executemany`` runs its statement once per row, and binding, stepping and resetting it
    cost the Python driver about 1.4 us a row: a fifth of the insert. One statement of 200
    ``VALUES`` rows does that once, inserts them alike (in order, each ignored if its key is
    stored), and spends its time in SQLite with the GIL released.

    The keys are bound as ``bytearray``: Python's driver binds a ``bytes`` only after asking
    its adapter registry and, failing that, the ``__adapt__`` of its protocol, an attribute
    lookup that fails by raising and clearing an AttributeError: 2,300 instructions a key,
    2 % of the ingest server's work a record. A ``bytearray`` is bound as the same BLOB at
    once (a None: see :func:`_null`).
    """
    width = len(ROW_COLUMNS)
    for sql, params in values_statements(conn, INSERT, rows):
        params[KEY_AT::width] = map(bytearray, params[KEY_AT::width])
        conn.execute(sql, params)


_chain = itertools.chain.from_iterable


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error); ``BEGIN`` for a snapshot.

    Reads that must see one snapshot (``BEGIN``) take no lock until they read.
    """

    def __init__(self, conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self._conn = conn
        self._begin = begin

    def __enter__(self) -> None:
        self._conn.execute(self._begin)

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            # SQLite rolls back by itself on some errors (a full disk): a ROLLBACK then
            # would fail and hide the error that matters.
            self._conn.execute("ROLLBACK")


class SQLiteDb(Db):
    """A SQLite connection, inside one of the backend's reads or transactions."""

    dialect = SQLITE

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read (``?`` is SQLite's own placeholder: the SQL runs as written)."""
        return self.conn.execute(sql, params).fetchall()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement as written."""
        self.conn.execute(sql, params)

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement once per row, rows taken as they come."""
        self.conn.executemany(sql, rows)

    def insert_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run an INSERT of one row once per row, many rows to a statement.

        See :func:`values_statements`: it spares binding, stepping and resetting a statement
        per row, a microsecond of each row of the timer and per-rank tables.
        """
        execute = self.conn.execute
        for query, params in values_statements(self.conn, sql, rows):
            execute(query, params)

    def insert_records(self, rows: list[Row]) -> Inserted:
        """``INSERT OR IGNORE``, then the bookkeeping of the new rows.

        When every row was new it is added up from the rows (:mod:`dsmon.store.records.tally`),
        and their ids are the ``len(rows)`` numbers up to the newest, in row order
        (AUTOINCREMENT numbers a statement's rows in order, and the write lock keeps anyone
        else from taking one); else it is read back from ``records`` by the new rows' id range.
        """
        conn = self.conn
        before = int(conn.execute(MAX_ID).fetchone()[0] or 0)
        changes = conn.total_changes
        insert_rows(conn, rows)
        new = conn.total_changes - changes
        if new and new == len(rows):
            first = int(conn.execute(MAX_ID).fetchone()[0]) - new + 1
            conn.executemany(ADD_KINDS, kind_rows(rows, first))
            conn.executemany(ADD_SOURCES, source_rows(rows))
            return Inserted(new, first)
        if new:
            conn.execute(UPDATE_KINDS, (before,))
            conn.execute(UPDATE_SOURCES, (before,))
        if new < len(rows):  # some were stored before: fill steps they lacked
            self._restamp(rows)
        return Inserted(new)

    def _restamp(self, rows: list[Row]) -> None:
        """Give stored rows without a step the step their copy in ``rows`` carries."""
        conn = self.conn
        by_run: dict[str, list[RecordRow]] = {}
        for row in map(RecordRow._make, rows):  # plain tuples from the server
            if row.step is not None:
                by_run.setdefault(row.run, []).append(row)
        for run, cands in by_run.items():
            changes = conn.total_changes
            conn.executemany(RESTAMP, [(r.step, r.body, r.key) for r in cands])
            filled = conn.total_changes - changes
            if not filled:
                continue
            top: dict[str, int] = {}
            for r in cands:
                top[r.kind] = max(top.get(r.kind, 0), r.step or 0)
            conn.executemany(RESTAMP_KIND, [(s, s, run, k) for k, s in top.items()])
            conn.execute(COUNT_RESTAMPS, (run, filled))

    def allocate_ids(self, n: int) -> int:
        """Move ``sqlite_sequence`` by ``n``: the write lock keeps anyone else from taking ids."""
        conn = self.conn
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        if row is None:
            top = conn.execute("SELECT MAX(id) FROM records").fetchone()[0] or 0
            conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top + n,)
            )
            return int(top) + 1
        conn.execute("UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'records'", (n,))
        return int(row[0]) + 1

    def stage_samples(self, values: list[tuple[Any, ...]]) -> None:
        """The connection's temporary tables made if new; the samples' emptied and filled.

        The samples go in by INSERT OR IGNORE; the batch's roll-up table is the writer's.
        """
        self.conn.execute(temp_ddl(SQLITE))
        self.conn.execute(batch_rollup_ddl(SQLITE))
        self.conn.execute("DELETE FROM temp.gpu_batch")
        self.insert_many(_STAGE, values)


class SQLiteBackend(Backend):
    """A store in a SQLite file, created with its tables when missing.

    Args:
        path: the database file (``:memory:`` for one that lives as long as the object).

    Raises:
        StoreError: the file cannot be opened.
    """

    dialect = SQLITE

    def __init__(self, path: str | Path) -> None:
        self.path = self.url = self.name = str(path)
        self._lock = threading.Lock()
        self._checkpoints = None if self.path == ":memory:" else BackgroundCheckpoint(self.path)
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None
        self._db = SQLiteDb(self._conn)
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            if self.path != ":memory:":
                if _empty(self.path):
                    # Turning an empty file to WAL is a write in rollback mode, which SQLite
                    # makes durable with four syncs of the file, its journal and the folder
                    # (half of creating a store). Lost on a power cut, the file is empty
                    # again: the next open turns it to WAL. So that write is not synced.
                    self._conn.execute("PRAGMA synchronous = OFF")
                self._conn.execute("PRAGMA journal_mode = WAL")
            # NORMAL is durable in WAL mode except for the last commits on power loss.
            self._conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error as exc:
            self._conn.close()
            raise StoreError(f"cannot open store {self.path}: {exc}") from None

    def prepare(self, ddl: Sequence[str]) -> None:
        """The tables of a new file; an existing store's version checked (no write lock).

        Its version is also SQLite's ``user_version``, which a dsmon of any schema reads first.
        """
        conn = self._conn
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version == SCHEMA_VERSION:
                return  # a reader opening an existing store takes no write lock
            if version:
                raise refused(self.name, version, self._made_by())
            with self._lock, Transaction(conn):
                for stmt in (META_DDL, *ddl):
                    conn.execute(stmt)
                conn.executemany(INSERT_META, META_ROWS)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {self.path}: {exc}") from None

    def _made_by(self) -> str | None:
        """The dsmon version a store of another schema notes, if it notes one."""
        try:
            return dict(self._conn.execute(READ_META).fetchall()).get(MADE_BY_ROW)
        except sqlite3.Error:  # a store made before dsmon noted its maker
            return None

    def read(self, fn: Callable[[Db], T]) -> T:
        """``fn`` under the connection's lock, each statement its own (autocommit) read."""
        with self._lock, store_errors(self.name):
            return fn(self._db)

    def snapshot(self, fn: Callable[[Db], T]) -> T:
        """``fn`` in a deferred transaction: WAL gives its reads one snapshot, takes no lock."""
        with self._lock, store_errors(self.name), Transaction(self._conn, "BEGIN"):
            return fn(self._db)

    def write(self, fn: Callable[[Db], T], undo: Callable[[], None] | None = None) -> T:
        """``fn`` in ``BEGIN IMMEDIATE`` ... ``COMMIT``: SQLite's one write lock is the turn."""
        with self._lock, store_errors(self.name):
            try:
                with Transaction(self._conn):
                    return fn(self._db)
            except BaseException:
                if undo is not None:
                    undo()
                raise

    def write_briefly(self, fn: Callable[[Db], None]) -> None:
        """``fn`` in its own transaction, waiting at most :data:`BRIEF_WAIT_MS` for the lock.

        A page being drawn must not wait the 30 s a writer may.
        """
        with self._lock:
            self._conn.execute(f"PRAGMA busy_timeout = {BRIEF_WAIT_MS}")
            try:
                with Transaction(self._conn):
                    fn(self._db)
            except sqlite3.Error as exc:  # read-only file, locked, disk full
                raise StoreError(f"store {self.name}: {exc}") from None
            finally:
                self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def wrote_live(self) -> None:
        """Hand the WAL's checkpoints to the thread; this connection's become a backstop."""
        if self._checkpoints and self._checkpoints.wrote():
            with self._lock:  # the thread started: this connection's checkpoints are a backstop
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")

    def check_writable(self) -> None:
        """Rewrite the schema version in place: a real commit through the WAL, no data."""
        self.write(lambda db: db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}"))

    def close(self) -> None:
        """Close the connection (further calls fail), after the checkpoint thread ends."""
        if self._checkpoints is not None:
            self._checkpoints.close()
        with self._lock:
            self._conn.close()


class BackgroundCheckpoint:
    """A live writer's WAL copied into the database file by a daemon thread of its own.

    In WAL mode SQLite appends each commit to the ``-wal`` file, and by default the commit
    that takes the log past 1,000 pages (4 MB) also copies it all into the database file and
    syncs both (a checkpoint). For the ingest server that was every third batch of 2,000
    records, in the request being answered: 3.2 of its 11 us a record of SQL were the commit,
    1.3 without the checkpoint. Servers that live on SQLite move the checkpoint off the
    writer's path, as this does for the live writers (the ingest server, a dashboard's own
    ingest): after their commits a thread with its own connection runs
    ``PRAGMA wal_checkpoint(PASSIVE)`` at most every :data:`CHECKPOINT_EVERY_S`, which waits
    for no reader and no writer, and SQLite releases the GIL while it copies. The writer's
    own automatic checkpoint stays as a backstop at :data:`BACKSTOP_PAGES`, should this
    thread fall behind or fail.

    The thread and its connection start with the first :meth:`wrote`; :meth:`close` ends
    them. A checkpoint that fails (a disk error, the file gone) is logged and tried again
    after the next write; the writer's backstop keeps the WAL bounded meanwhile.
    """

    def __init__(self, path: str, every_s: float | None = None) -> None:
        self.path = path
        self.every_s = CHECKPOINT_EVERY_S if every_s is None else every_s
        self.passes = 0
        self._wrote = threading.Event()
        self._stop = threading.Event()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None

    def wrote(self) -> bool:
        """Note a commit: the thread checkpoints within :attr:`every_s`.

        True when this call started the thread: the writer then raises its own automatic
        checkpoint to :data:`BACKSTOP_PAGES`.
        """
        self._wrote.set()
        if self._thread is not None:
            return False
        with self._start:
            if self._thread is not None or self._stop.is_set():
                return False
            self._thread = threading.Thread(target=self._loop, name="dsmon-checkpoint", daemon=True)
            self._thread.start()
            return True

    def close(self, timeout_s: float = 10.0) -> None:
        """End the thread after its current checkpoint, if it runs one."""
        self._stop.set()
        self._wrote.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
        except sqlite3.Error as exc:
            logger.warning("dsmon: WAL checkpoints stay with the writer: %s", exc)
            return
        try:
            while not self._stop.is_set():
                self._wrote.wait()
                if self._stop.wait(self.every_s):  # commits of the next moments join this pass
                    break
                self._wrote.clear()
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.passes += 1
        except sqlite3.Error as exc:
            logger.warning("dsmon: background WAL checkpoint failed, next write retries: %s", exc)


def _empty(path: str) -> bool:
    """Whether the database file is new: no page written yet (SQLite has just created it)."""
    try:
        return os.path.getsize(path) == 0
    except OSError:
        return True
