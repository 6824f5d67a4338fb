"""The record store: one SQLite file that one writer fills and many processes read.

SQLite runs in WAL mode, so the dashboard's readers never block the collector writing
and vice versa, with a busy timeout for the moments two writers meet. Each record is kept
as its JSON-lines body plus indexed columns for the queries the dashboard makes (a run's
records of one kind over a step or time range, or newer than an id). A small bookkeeping
table, updated in the same transaction as the records, answers :meth:`SQLiteStore.runs`
without scanning millions of rows. ``open_store`` also accepts ``postgresql://`` URLs
(``dsmon.store.postgres``); what both backends share is in ``dsmon.store.base``.
"""

from __future__ import annotations

import importlib
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from dsmon.model.records import KINDS, GpuSampleRecord, Record
from dsmon.store import sqlite_sql as sql
from dsmon.store.base import (
    BATCH_ROWS,
    SCHEMA_VERSION,
    EncodedRecord,
    KindStats,
    RecordFilter,
    RecordRow,
    RunInfo,
    Store,
    StoreDataError,
    StoreError,
    received_now,
    record_row,
    restamp_candidates,
    row_record,
    run_infos,
)
from dsmon.store.gpu_reads import GpuFold, iso_text
from dsmon.store.gpu_rows import SampleRow, cut_ms, grid, sample_row
from dsmon.store.sqlite_gpu import LEVELS_S, GpuTables

__all__ = ["RunInfo", "SQLiteStore", "Store", "StoreError", "open_store", "sqlite_path"]

#: How long a writer waits for another writer's transaction before giving up.
BUSY_TIMEOUT_S = 30.0


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

    BODY_KINDS = frozenset(KINDS.keys() - {"gpu"})

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._lock = threading.Lock()
        self._indexed = False
        try:
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
            )
            self._gpu = GpuTables(self._conn)
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
            for stmt in sql.DDL:
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
            "SELECT name FROM sqlite_master WHERE name IN (?, 'run_activity', 'gpu_rollup')",
            (sql.RUN_KIND_ID,),
        ).fetchall()
        if len(found) < 3:
            with self._transaction():
                self._conn.execute(sql.RUN_KIND_ID_DDL)
                self._conn.execute(sql.ACTIVITY_DDL)
                self._gpu.create()
                self._move_gpu_records()
        self._indexed = True

    def _move_gpu_records(self) -> None:
        """Move GPU samples an older dsmon kept as records into the GPU tables (new ids)."""
        conn = self._conn
        moved: list[SampleRow] = []
        ids: list[tuple[int]] = []
        for rec_id, body in conn.execute("SELECT id, body FROM records WHERE kind = 'gpu'"):
            rec = row_record(body)
            row = sample_row(rec) if isinstance(rec, GpuSampleRecord) else None
            if row is not None:
                moved.append(row)
                ids.append((rec_id,))
        if not moved:
            return
        conn.executemany("DELETE FROM records WHERE id = ?", ids)
        counts: dict[str, int] = {}
        for row in moved:
            counts[row.key.run] = counts.get(row.key.run, 0) + 1
        conn.executemany(
            "UPDATE run_kinds SET n = n - ? WHERE run = ? AND kind = 'gpu'",
            [(n, run) for run, n in counts.items()],
        )
        conn.execute("DELETE FROM run_kinds WHERE kind = 'gpu' AND n <= 0")
        self._add_gpu(moved)

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn)

    def add(self, records: Iterable[Record | EncodedRecord], *, live: bool = False) -> int:
        """Store the records not stored yet, committing every few thousand; returns how many."""
        inserted = 0
        with self._lock, _errors(self.path):
            self._add_indexes()
        for rows, samples in _split(records):
            with self._lock, _errors(self.path), self._transaction():
                if live:
                    self._received({r.run for r in rows} | {s.key.run for s in samples})
                inserted += self._add_gpu(samples) + self._add_rows(rows)
        return inserted

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
        if new < len(rows):  # some were stored before: fill steps they lacked
            self._restamp(rows)
        return new

    def _add_gpu(self, samples: list[SampleRow]) -> int:
        """Insert GPU samples into their tables; how many were new."""
        kinds = self._gpu.insert(samples)
        self._conn.executemany(sql.GPU_KINDS, kinds)
        return sum(k[2] for k in kinds)

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
                return max(self._max_id(), self._gpu.max_id())
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

    def _select_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """Records-table rows merged in id order with GPU samples from their own tables."""
        rows: list[tuple[int, Record]] = []
        if flt.kind != "gpu":
            rows = [(i, row_record(body)) for i, body in self._select(flt)]
        if flt.kind not in (None, "gpu") or flt.step_min is not None or flt.step_max is not None:
            return rows
        if flt.kind == "gpu":  # samples an older dsmon stored as records, not yet moved
            rows = [(i, row_record(body)) for i, body in self._select(flt)]
        t_range = (cut_ms(iso_text(flt.ts_min)), cut_ms(iso_text(flt.ts_max)))
        with self._lock, _errors(self.path):
            gpu = self._gpu.select(flt.run, flt.after_id, t_range, flt.limit)
        if not gpu:
            return rows
        merged = sorted(rows + gpu, key=lambda pair: pair[0])  # type: ignore[operator]
        return merged if flt.limit is None else merged[: flt.limit]

    def _gpu_fold(
        self, run: str, n_buckets: int | None, ts_max: str | None, gpus: Sequence[str] | None
    ) -> GpuFold:
        """The fold from the roll-ups (or, for a replay cut-off, the samples) in SQL."""
        from dsmon.store import sqlite_gpu_read as read

        cut = cut_ms(ts_max)
        with self._lock, _errors(self.path):
            series = read.series(self._conn, run, gpus)
            span = read.span(self._conn, run, cut)
            if span is None or series.empty:
                return GpuFold(read.fold(self._conn, "", [], 0, None), series, 0, None)
            ids = [int(i) for i in series["series"]]
            t0, width = span[0], None
            if n_buckets:
                t0, width = grid(n_buckets, span, _level_ms(span, n_buckets, cut))
            return GpuFold(read.fold(self._conn, run, ids, t0, width, cut), series, t0, width)

    def _gpu_latest(self, run: str, ts_max: int | None) -> list[GpuSampleRecord]:
        from dsmon.store import sqlite_gpu_read as read

        with self._lock, _errors(self.path):
            return read.latest(self._conn, run, ts_max)

    def check_writable(self) -> None:
        """Rewrite the schema version in place: a real commit through the WAL, no data."""
        with self._lock, _errors(self.path), self._transaction():
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def close(self) -> None:
        """Close the connection (further calls fail)."""
        with self._lock:
            self._conn.close()


def _level_ms(span: tuple[int, int], n_buckets: int, cut: int | None) -> int:
    """The roll-up width (ms) buckets of this span are built from; 1 when from samples.

    A roll-up serves when it still gives a quarter of the buckets asked for: a grid of 75
    one-minute columns reads far fewer rows than 300 columns of samples would.
    """
    if cut is not None:
        return 1
    want = (span[1] - span[0]) // max(n_buckets, 1) + 1
    fits = [lv * 1000 for lv in LEVELS_S if lv * 1000 <= want * 4]
    return fits[-1] if fits else 1


def _split(
    records: Iterable[Record | EncodedRecord],
) -> Iterator[tuple[list[RecordRow], list[SampleRow]]]:
    """Records in batches: rows for the records table, GPU samples for their own tables."""
    rows: list[RecordRow] = []
    samples: list[SampleRow] = []
    for item in records:
        rec = item.record if isinstance(item, EncodedRecord) else item
        sample = sample_row(rec) if isinstance(rec, GpuSampleRecord) else None
        if sample is not None:
            samples.append(sample)
        else:
            rows.append(record_row(*item) if isinstance(item, EncodedRecord) else record_row(rec))
        if len(rows) + len(samples) >= BATCH_ROWS:
            yield rows, samples
            rows, samples = [], []
    if rows or samples:
        yield rows, samples


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
            backend = importlib.import_module("dsmon.store.postgres")
        except ImportError as exc:
            raise StoreError(f"cannot open store {text}: PostgreSQL backend: {exc}") from None
        store: Store = backend.PgStore(text)
        return store
    if "://" in text and not text.startswith("sqlite://"):
        raise StoreError(f"cannot open store {text}: unknown URL scheme")
    return SQLiteStore(sqlite_path(text))
