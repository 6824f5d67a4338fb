"""The record store: one SQLite file that one writer fills and many processes read.

SQLite runs in WAL mode, so the dashboard's readers never block the collector writing
and vice versa, with a busy timeout for the moments two writers meet. Each record is kept
as its JSON-lines body plus indexed columns for the queries the dashboard makes (a run's
records of one kind, or of all kinds, newer than an id). A small bookkeeping table, updated
in the same transaction as the records, answers :meth:`SQLiteStore.runs` without scanning
millions of rows. ``open_store`` also accepts ``postgresql://`` URLs
(``dsmon.store.postgres``); what both backends share is in ``dsmon.store.base``.
"""

from __future__ import annotations

import importlib
import logging
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from dsmon.model.records import Record
from dsmon.store import frame_chunks as chunks
from dsmon.store import rank_tables
from dsmon.store import sqlite_sql as sql
from dsmon.store.base import (
    READABLE_VERSIONS,
    SCHEMA_VERSION,
    EncodedRecord,
    KindStats,
    RecordFilter,
    RecordRow,
    RunInfo,
    Store,
    StoreError,
    foreign_version,
    received_now,
    restamp_candidates,
    run_infos,
)
from dsmon.store.gpu_blocks import BATCHES_INDEX
from dsmon.store.gpu_store import TypedGpuStore, move_gpu_records, split
from dsmon.store.gpu_tables import GpuTables
from dsmon.store.rekey import rekey
from dsmon.store.sqlite_checkpoint import BACKSTOP_PAGES, BackgroundCheckpoint
from dsmon.store.sqlite_conn import Transaction, store_errors
from dsmon.store.sqlite_gpu import SQLiteGpuTables

__all__ = ["RunInfo", "SQLiteStore", "Store", "StoreError", "open_store", "sqlite_path"]

T = TypeVar("T")
logger = logging.getLogger(__name__)
#: The indexes and tables whose presence tells this dsmon's layout from an older one's.
_LAYOUT = frozenset(
    {sql.RUN_KIND_ID, sql.RUN_ID, "run_activity", "gpu_rollup", BATCHES_INDEX, "rank_beat_steps"}
)

#: How long a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 30.0
#: How long a reader keeping a frame chunk waits for a writer (:meth:`SQLiteStore._save_chunk`).
CHUNK_WAIT_MS = 250


def sqlite_path(url: str) -> str:
    """The file path of a store URL: ``sqlite:///rel/path``, ``sqlite:////abs/path`` or a path."""
    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :]
    if url.startswith("sqlite://"):
        raise StoreError(f"{url}: expected sqlite:///PATH (three slashes)")
    return url


class SQLiteStore(TypedGpuStore):
    """The default store backend.

    One connection per store object, shared by threads under a lock (Streamlit serves
    sessions from threads). Other processes open their own ``SQLiteStore`` on the same
    file; WAL lets them read while this one writes.

    Args:
        path: the database file; created with its schema when missing.

    Raises:
        StoreError: the file cannot be opened or holds a schema of another version.
    """

    RANKS_READY = "SELECT 1 FROM sqlite_master WHERE name = 'rank_beat_steps'"

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._upgraded = False
        self._checkpoints = None if self.path == ":memory:" else BackgroundCheckpoint(self.path)
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._gpu = SQLiteGpuTables(self._conn)
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
        if version not in (0, *READABLE_VERSIONS):
            raise foreign_version(self.path, version)
        if version:
            return  # a reader opening an existing store takes no write lock
        with self._transaction():
            for stmt in sql.DDL:
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._upgraded = True

    def _upgrade(self) -> None:
        """Give a store written by an older dsmon this one's layout (first write only).

        That is the ``(run, kind, id)`` and ``(run)`` indexes, the ``run_activity`` table and
        the GPU tables (samples in id order), no more of the indexes no query needs, and
        version 2 keys (:mod:`dsmon.store.rekey`). Readers never do it: it takes the write
        lock, for seconds on a big store; and every read answers the same under either layout.
        """
        if self._upgraded:
            return
        if self._has_layout():
            self._upgraded = True
            return
        with self._forgetting(), self._transaction():
            have = self._layout_names()  # again, under the write lock
            for name in sql.OBSOLETE_INDEXES:
                self._conn.execute(f"DROP INDEX IF EXISTS {name}")
            self._conn.execute(sql.RUN_KIND_ID_DDL)
            self._conn.execute(sql.RUN_ID_DDL)
            self._conn.execute(sql.ACTIVITY_DDL)
            self._gpu.create()
            if "gpu_rollup" not in have:  # samples an older dsmon kept as records
                move_gpu_records(self._gpu)
            rank_tables.create(self._gpu)
            if "rank_beat_steps" not in have:  # probe records stored before the rank tables
                rank_tables.fold(self._gpu, 0, rank_tables.RANK_KINDS)
            self._gpu.relayout()
            if self._version() < SCHEMA_VERSION:
                rekey(self._gpu)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        self._upgraded = True

    def _has_layout(self) -> bool:
        """Whether the store has this dsmon's indexes, tables and keys already."""
        return self._layout_names() == _LAYOUT and self._version() == SCHEMA_VERSION

    def _layout_names(self) -> set[str]:
        """Which of the indexes and tables that tell one layout from another the store has."""
        names = sorted(_LAYOUT | set(sql.OBSOLETE_INDEXES))
        found = self._conn.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({', '.join('?' for _ in names)})",
            names,
        ).fetchall()
        return {row[0] for row in found}

    def _version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def _transaction(self) -> Transaction:
        return Transaction(self._conn)

    def prepare_writes(self) -> None:
        """The layout an older dsmon left, brought up to date now (:meth:`_upgrade`)."""
        with self._lock, store_errors(self.path):
            self._upgrade()

    def add(
        self, records: Iterable[Record | EncodedRecord | RecordRow], *, live: bool = False
    ) -> int:
        """Store the records not stored yet, committing every few thousand; returns how many."""
        inserted = 0
        self.prepare_writes()
        for rows, samples in split(records):
            with self._lock, store_errors(self.path), self._forgetting(), self._transaction():
                if live:
                    self._received({r.run for r in rows} | {s.key.run for s in samples})
                inserted += self._gpu.add(samples) + self._add_rows(rows)
        if live and inserted and self._checkpoints and self._checkpoints.wrote():
            with self._lock:  # the thread started: this connection's checkpoints are a backstop
                self._conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
        return inserted

    @contextmanager
    def _forgetting(self) -> Iterator[None]:
        """Forget cached GPU series when a write fails: its new series were rolled back."""
        try:
            yield
        except BaseException:
            self._gpu.forget()
            raise

    def _add_rows(self, rows: list[RecordRow]) -> int:
        """Insert records-table rows and fold them into the bookkeeping; how many were new."""
        if not rows:
            return 0
        before, changes = self._max_id(), self._conn.total_changes
        self._conn.executemany(sql.INSERT, rows)
        new = self._conn.total_changes - changes
        if new:
            self._conn.execute(sql.UPDATE_KINDS, (before,))
            self._conn.execute(sql.UPDATE_SOURCES, (before,))
            rank_tables.fold(self._gpu, before, {r.kind for r in rows})
        if new < len(rows):  # some were stored before: fill steps they lacked
            self._restamp(rows)
        return new

    def _restamp(self, rows: list[RecordRow]) -> None:
        """Give stored rows without a step the step their copy in ``rows`` carries."""
        conn = self._conn
        for run, cands in restamp_candidates(rows).items():
            changes = conn.total_changes
            conn.executemany(sql.RESTAMP, [(r.step, r.body, r.key) for r in cands])
            filled = conn.total_changes - changes
            if not filled:
                continue
            top: dict[str, int] = {}
            for r in cands:
                top[r.kind] = max(top.get(r.kind, 0), r.step or 0)
            conn.executemany(sql.RESTAMP_KIND, [(s, s, run, k) for k, s in top.items()])
            conn.execute(sql.COUNT_RESTAMPS, (run, filled))

    def _received(self, runs: set[str]) -> None:
        """Note that ``runs`` are being sent to now (see ``RunInfo.received_at``)."""
        now = received_now()
        self._conn.executemany(sql.RECEIVED, [(run, now) for run in runs])

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
        with self._lock, store_errors(self.path):
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
                return max(self._max_id(), self._gpu.max_id())
            row = self._conn.execute(
                "SELECT MAX(last_id) FROM run_kinds WHERE run = ?", (run,)
            ).fetchone()
        return int(row[0] or 0)

    def _select(self, flt: RecordFilter) -> list[tuple[int, str]]:
        sql, params = flt.select("?")
        with self._lock, store_errors(self.path):
            return self._conn.execute(sql, params).fetchall()

    def _select_bodies(self, flt: RecordFilter) -> list[tuple[int, bytes]]:
        sql, params = flt.select("?", body="CAST(body AS BLOB)")
        with self._lock, store_errors(self.path):
            return self._conn.execute(sql, params).fetchall()

    def _load_chunk(self, key: chunks.ChunkKey) -> bytes | None:
        query = chunks.SELECT.format(ph="?")
        with self._lock:
            try:
                row = self._conn.execute(query, chunks.select_params(key)).fetchone()
            except sqlite3.Error:  # no such table (no chunk kept yet), or unreadable: JSON
                return None
        return None if row is None else bytes(row[0])

    def _kept_chain(self, key: chunks.ChunkKey) -> dict[int, int]:
        query = chunks.CHAIN.format(ph="?")
        with self._lock:
            try:
                rows = self._conn.execute(query, chunks.chain_params(key)).fetchall()
            except sqlite3.Error:  # no such table: nothing kept yet
                return {}
        return {int(a): int(b) for a, b in rows}

    def _save_chunk(self, key: chunks.ChunkKey, last_id: int, data: bytes) -> None:
        """Keep the chunk, waiting at most :data:`CHUNK_WAIT_MS` for another writer.

        A page being drawn must not wait the 30 s a writer may (a long re-key holds the lock
        for minutes); the next reader can keep the chunk as well.
        """
        upsert = chunks.UPSERT.format(ph="?"), chunks.upsert_params(key, last_id, data)
        self._chunk_write(key, "kept", [(chunks.DDL.format(blob="BLOB"), ()), upsert])

    def _drop_chunk(self, key: chunks.ChunkKey) -> None:
        """Forget a kept chunk as :meth:`_save_chunk` keeps one; a tail left is never used."""
        delete = chunks.DELETE.format(ph="?"), chunks.delete_params(key)
        self._chunk_write(key, "dropped", [delete])

    def _chunk_write(
        self, key: chunks.ChunkKey, done: str, statements: list[tuple[str, tuple[object, ...]]]
    ) -> None:
        """``statements`` in one transaction, best effort, waiting for the lock at most briefly."""
        with self._lock:
            self._conn.execute(f"PRAGMA busy_timeout = {CHUNK_WAIT_MS}")
            try:
                with self._transaction():
                    for statement, params in statements:
                        self._conn.execute(statement, params)
            except sqlite3.Error as exc:  # read-only file, locked, disk full: JSON next time
                logger.info("dsmon: frame chunk of %s not %s: %s", key.kind, done, exc)
            finally:
                self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    def _on_gpu(self, fn: Callable[[GpuTables], T]) -> T:
        with self._lock, store_errors(self.path), Transaction(self._conn, "BEGIN"):
            return fn(self._gpu)

    def check_writable(self) -> None:
        """Rewrite the schema version in place: a real commit through the WAL, no data."""
        with self._lock, store_errors(self.path), self._transaction():
            self._conn.execute(f"PRAGMA user_version = {self._version()}")

    def close(self) -> None:
        """Close the connection (further calls fail), after the checkpoint thread ends."""
        if self._checkpoints is not None:
            self._checkpoints.close()
        with self._lock:
            self._conn.close()


def open_store(url: str | Path) -> Store:
    """Open the store a URL names: a path or ``sqlite:///path`` (SQLite), ``postgresql://...``.

    Raises:
        StoreError: the URL names an unknown or unavailable backend, or the store cannot be
            opened.
    """
    text = str(url)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            backend = importlib.import_module("dsmon.store.postgres")
        except ImportError as exc:
            raise StoreError(f"cannot open store {text}: PostgreSQL backend: {exc}") from None
        store: Store = backend.PgStore(text)
        return store
    if "://" in text and not text.startswith("sqlite://"):
        raise StoreError(f"cannot open store {text}: unknown URL scheme")
    return SQLiteStore(sqlite_path(text))
