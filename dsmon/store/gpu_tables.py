"""GPU samples in typed tables: one row per sample under its GPU series, and roll-ups.

The GPUs page of a day-long 64-GPU run must not read 5.5 million rows per refresh. Samples go
to ``gpu_samples`` (in id order, the order they arrive in, see :mod:`dsmon.store.gpu_rows`
and :mod:`dsmon.store.gpu_blocks`), and each insert also folds them into
``gpu_rollup``: count, sum, min and max of every charted metric per GPU and 60 s / 600 s
bucket, with clock-event counts per reason bit. A page asks for buckets of the width it can
draw and gets them from the coarsest roll-up that is fine enough: a day of 64 GPUs is 92k
one-minute rows, not 5.5M.

Ids come from the ``records`` table's sequence, so ``since``/``after_id`` readers see GPU
samples and other records in one order. ``gpu_batches`` notes the id and time range of
blocks of inserts: reading a time range, or "ids after N", scans only the blocks it needs.

Both backends share this class (their SQL differs only as :mod:`dsmon.store.gpu_sql` says);
each says how ids are reserved and how a batch is staged (:mod:`dsmon.store.sqlite_gpu`,
:mod:`dsmon.store.postgres_gpu`).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

from dsmon.model.records import GpuSampleRecord
from dsmon.store import gpu_blocks, gpu_sql
from dsmon.store.gpu_rows import (
    KEYED_SAMPLE_COLUMNS,
    SAMPLE_COLUMNS,
    SERIES_FIELDS,
    SampleRow,
    SeriesInfo,
    SeriesKey,
    ms_ts,
    relaid,
    sample_record,
    stored_values,
)
from dsmon.store.gpu_sql import STAGED, Dialect

log = logging.getLogger(__name__)
#: Rows of an older layout copied per step: memory stays flat on a store of millions.
RELAYOUT_CHUNK = 20_000
_SERIES_COLS = "id, t0_ms, uuid, name, mem_total_bytes, power_limit_w"
#: Per-run bookkeeping rows: (run, 'gpu', n, first ts, last ts, last id).
KindRow = tuple[str, str, int, str, str, int]


class GpuTables(ABC):
    """The GPU tables seen through one connection; every method runs in the caller's transaction.

    Series rows never change once written, so their ids are cached (``series``: a dict the
    store keeps; another process may add series: a miss is looked up, then inserted). A
    store clears it when a write fails: a series created by a rolled-back transaction does
    not exist. So is the samples' layout once it is this dsmon's (``layout``, also the
    store's): an older one becomes it once, and never goes back.
    """

    DIALECT: ClassVar[Dialect]

    def __init__(
        self,
        conn: Any,
        series: dict[SeriesKey, SeriesInfo] | None = None,
        layout: dict[str, bool] | None = None,
    ) -> None:
        self._conn = conn
        self._series: dict[SeriesKey, SeriesInfo] = {} if series is None else series
        self._layout: dict[str, bool] = {} if layout is None else layout
        self._q = self.DIALECT.q

    def create(self) -> None:
        """The tables, in a store being created or one an older dsmon wrote."""
        for stmt in gpu_sql.ddl(self.DIALECT):
            self._conn.execute(stmt)

    @abstractmethod
    def keyed_by_series(self) -> bool:
        """Whether the samples are in an older dsmon's layout: keyed by series and time."""

    def relayout(self) -> bool:
        """Store an older dsmon's samples in id order (:mod:`dsmon.store.gpu_blocks`); if it did.

        In the caller's write transaction. Every read answers the same under either layout, so
        readers need not wait for it; a writer does it once, copying the table.
        """
        if not self.keyed_by_series():
            return False
        (count,) = self.rows("SELECT COUNT(*) FROM gpu_samples")[0]
        log.warning(
            "dsmon: storing the %d GPU samples of an older dsmon's store in id order", count
        )
        self._conn.execute(gpu_sql.samples_ddl(self.DIALECT, "gpu_samples_by_id"))
        old = ", ".join(("series", "t_ms", "id", *KEYED_SAMPLE_COLUMNS))
        insert = (
            f"INSERT INTO gpu_samples_by_id ({', '.join(STAGED)}) "
            f"VALUES ({', '.join('?' for _ in STAGED)})"
        )
        for chunk in self._stream(f"SELECT {old} FROM gpu_samples ORDER BY id", RELAYOUT_CHUNK):
            self.execute_many(insert, [relaid(row) for row in chunk])
        self._conn.execute("DROP TABLE gpu_samples")
        self._conn.execute("ALTER TABLE gpu_samples_by_id RENAME TO gpu_samples")
        return True

    @abstractmethod
    def _stream(self, sql: str, size: int) -> Iterator[list[Any]]:
        """The rows of a big read, ``size`` at a time, never all in memory."""

    def sample_columns(self) -> tuple[str, ...]:
        """The sample columns of this store's layout (an older one's until its first writer).

        Asked of the database only until the answer is this dsmon's layout, which stays.
        """
        if not self._layout.get("by_id"):
            if self.keyed_by_series():
                return KEYED_SAMPLE_COLUMNS
            self._layout["by_id"] = True
        return SAMPLE_COLUMNS

    def samples_sql(self, columns: tuple[str, ...]) -> str:
        """The columns a sample ``s`` of series ``ser`` is read back from (:meth:`record_of`)."""
        return (
            "ser.run, ser.node, ser.file, ser.sub, ser.gpu_index, s.t_ms + ser.t0_ms, "
            f"{', '.join('ser.' + f for f in SERIES_FIELDS)}, "
            f"{', '.join('s.' + c for c in columns)}"
        )

    @staticmethod
    def record_of(row: Sequence[Any], columns: tuple[str, ...]) -> GpuSampleRecord:
        """The record of a row read with :meth:`samples_sql` (``columns`` as given there)."""
        n_fixed = len(SERIES_FIELDS)
        return sample_record(
            SeriesKey(*row[:5]), int(row[5]), tuple(row[6 : 6 + n_fixed]),
            tuple(row[6 + n_fixed :]), columns,
        )  # fmt: skip

    def forget(self) -> None:
        """Drop the cached series and layout (after a rolled-back write)."""
        self._series.clear()
        self._layout.clear()

    @abstractmethod
    def _allocate(self, n: int) -> int:
        """Reserve ``n`` ids of the records' sequence; returns the first."""

    @abstractmethod
    def _stage(self, values: list[tuple[Any, ...]]) -> None:
        """Empty the staging table and put rows in; the first of a (series, t_ms) wins."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement written with ``?`` placeholders."""
        self._conn.execute(self._q(sql), params)

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement written with ``?`` placeholders once per row."""
        self._conn.cursor().executemany(self._q(sql), list(rows))

    def add(self, rows: Sequence[SampleRow]) -> int:
        """Store the samples not stored yet, with their bookkeeping; how many were new."""
        if not rows:
            return 0
        kinds = self.insert(rows)
        self.execute_many(gpu_sql.gpu_kinds(self.DIALECT), kinds)
        return sum(k[2] for k in kinds)

    def insert(self, rows: Sequence[SampleRow]) -> list[KindRow]:
        """Store the samples not stored yet; returns per run ``(run, 'gpu', n, first, last, id)``.

        The result has the form of the per-run bookkeeping rows, for the caller to fold in.
        """
        if not rows:
            return []
        conn, d = self._conn, self.DIALECT
        first = self._allocate(len(rows))
        values = []
        for i, row in enumerate(rows):
            info = self._series_of(row)
            stored = stored_values(row, info)
            values.append((*stored[:2], first + i, *stored[2:], row.t_ms))
        self._stage(values)
        self._drop_stored()
        cols = ", ".join(STAGED)
        conn.execute(f"INSERT INTO gpu_samples ({cols}) SELECT {cols} FROM {d.temp}gpu_batch")
        for level in gpu_sql.LEVELS_S:
            conn.execute(gpu_sql.rollup(d), (level, level * 1000))
        return self._bookkeeping()

    def _drop_stored(self) -> None:
        """Drop the staged samples stored before (a collector sends again what it held).

        A stored copy lies in a block whose time range holds its time: only those blocks'
        rows are read.
        """
        temp = self.DIALECT.temp
        lo, hi = self._conn.execute(
            f"SELECT MIN(abs_ms), MAX(abs_ms) FROM {temp}gpu_batch"
        ).fetchone()
        if lo is None:
            return
        ranges = gpu_blocks.id_ranges(self, lo, hi)
        if not ranges:
            return
        head, cond = gpu_blocks.scan_from(ranges)
        self._conn.execute(
            f"DELETE FROM {temp}gpu_batch WHERE (series, t_ms) IN "
            f"(SELECT s.series, s.t_ms FROM {head} WHERE {cond})"
        )

    def _bookkeeping(self) -> list[KindRow]:
        """Note the batch in ``gpu_batches`` (:func:`gpu_blocks.note`); its per-run counts."""
        conn, temp = self._conn, self.DIALECT.temp
        found = conn.execute(
            f"SELECT MIN(id), MAX(id), COUNT(*), MIN(abs_ms), MAX(abs_ms) FROM {temp}gpu_batch"
        ).fetchone()
        if not found[2]:
            return []
        lo_id, hi_id, n, t_min, t_max = found
        gpu_blocks.note(self, gpu_blocks.Block(hi_id, lo_id, n, t_min, t_max))
        per_run = conn.execute(
            "SELECT ser.run, COUNT(*), MIN(b.abs_ms), MAX(b.abs_ms), MAX(b.id), ser.node "
            f"FROM {temp}gpu_batch b JOIN gpu_series ser ON ser.id = b.series "
            "GROUP BY ser.run, ser.node"
        ).fetchall()
        self.execute_many(
            "INSERT INTO run_sources (run, node, rank) VALUES (?, ?, -1) ON CONFLICT DO NOTHING",
            sorted({(run, node) for run, *_, node in per_run}),
        )
        out: dict[str, list[int]] = {}
        for run, n, lo, hi, top, _ in per_run:
            acc = out.setdefault(run, [0, lo, hi, top])
            acc[0] += n
            acc[1], acc[2], acc[3] = min(acc[1], lo), max(acc[2], hi), max(acc[3], top)
        return [(run, "gpu", n, ms_ts(lo), ms_ts(hi), top) for run, (n, lo, hi, top) in out.items()]

    def _series_of(self, row: SampleRow) -> SeriesInfo:
        """The series of a sample, created with the sample's time and fixed fields if new."""
        info = self._series.get(row.key)
        if info is not None:
            return info
        conn = self._conn
        conn.execute(
            self._q(
                "INSERT INTO gpu_series (run, node, file, sub, gpu_index, t0_ms, "
                f"{', '.join(SERIES_FIELDS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING"
            ),
            (*row.key, row.t_ms, *row.fixed),
        )
        found = conn.execute(
            self._q(
                f"SELECT {_SERIES_COLS} FROM gpu_series "
                "WHERE run = ? AND node = ? AND file = ? AND sub = ? AND gpu_index = ?"
            ),
            row.key,
        ).fetchone()
        info = SeriesInfo(int(found[0]), int(found[1]), tuple(found[2:]))
        self._series[row.key] = info
        return info

    # --- reads -----------------------------------------------------------------------------

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read written with ``?`` placeholders (none from a missing table)."""
        return list(self._conn.execute(self._q(sql), params).fetchall())

    def max_id(self) -> int:
        """The newest GPU sample id (0 when none, or no table yet)."""
        found = self.rows("SELECT MAX(last_id) FROM gpu_batches")
        return int(found[0][0] or 0) if found else 0

    def select(
        self,
        run: str,
        after_id: int | None,
        t_range: tuple[int | None, int | None],
        limit: int | None,
    ) -> list[tuple[int, GpuSampleRecord]]:
        """``(id, record)`` of a run's samples in id order: ids above ``after_id``, times in range.

        The blocks overlapping the time range bound the ids read; with ``after_id`` and
        ``limit``, so do the blocks stored after it: paging through a day of samples reads
        each page's rows only.
        """
        lo, hi = t_range
        id_lo, id_hi = None, None
        if after_id:
            bound = self._after(after_id, limit)
            if bound is None:
                return []
            id_lo, id_hi = after_id + 1, bound[2]
        ranges = gpu_blocks.id_ranges(self, lo, hi)
        if id_lo is not None or ranges is not None:
            ranges = gpu_blocks.clipped(ranges, id_lo, id_hi)
        head, cond = gpu_blocks.scan_from(ranges)
        columns = self.sample_columns()
        conds = [cond, "ser.id = s.series", "ser.run = ?"]
        params: list[Any] = [run]
        for sql, value in (("s.t_ms + ser.t0_ms >= ?", lo), ("s.t_ms + ser.t0_ms <= ?", hi)):
            if value is not None:
                conds.append(sql)
                params.append(value)
        sql = (
            f"SELECT s.id, {self.samples_sql(columns)} FROM {head} CROSS JOIN gpu_series ser "
            f"WHERE {' AND '.join(conds)} ORDER BY s.id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [(int(r[0]), self.record_of(r[1:], columns)) for r in self.rows(sql, params)]

    def times_after(self, after_id: int) -> tuple[int, int] | None:
        """First and last time (ms) of the samples stored after ``after_id``, of every run."""
        found = self._after(after_id, None)
        return None if found is None else (found[0], found[1])

    def _after(self, after_id: int, limit: int | None) -> tuple[int, int, int | None] | None:
        """Time range and id bound of the batches stored after ``after_id`` (None: none)."""
        batches = self.rows(
            "SELECT last_id, n, t_min_ms, t_max_ms, first_id FROM gpu_batches "
            "WHERE last_id > ? ORDER BY last_id",
            (after_id,),
        )
        if not batches:
            return None
        taken, total = [], 0
        for batch in batches:
            taken.append(batch)
            # A batch partly read before may hold fewer new rows than it counts: count none.
            total += batch[1] if batch[4] > after_id else 0
            if limit is not None and total >= limit:
                break
        id_hi = taken[-1][0] if len(taken) < len(batches) else None
        return min(b[2] for b in taken), max(b[3] for b in taken), id_hi
