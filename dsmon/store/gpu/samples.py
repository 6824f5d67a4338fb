"""GPU samples in typed tables: one row per sample under its GPU series, and roll-ups.

The GPUs page of a day-long 64-GPU run must not read 5.5 million rows per refresh. Samples go
to ``gpu_samples`` (in id order, the order they arrive in, see :mod:`dsmon.store.gpu.rows`
and :mod:`dsmon.store.gpu.blocks`), and each insert also sums them up into ``gpu_rollup``:
count, sum, min and max of every charted metric per GPU and 60 s / 600 s bucket, with
clock-event counts per reason bit. A page asks for buckets of the width it can draw and gets
them from the coarsest roll-up that is fine enough: a day of 64 GPUs is 92k one-minute rows,
not 5.5M (:mod:`dsmon.store.gpu.reads`).

Ids come from the ``records`` table's sequence, so ``since``/``after_id`` readers see GPU
samples and other records in one order (:mod:`dsmon.store.records.log` merges them).
``gpu_batches`` notes the id and time range of blocks of inserts: reading a time range, or
"ids after N", scans only the blocks it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from dsmon.model.records import GpuSampleRecord
from dsmon.store.backend import Backend, Db
from dsmon.store.gpu import blocks, sql
from dsmon.store.gpu.rows import (
    SAMPLE_SELECT,
    SERIES_FIELDS,
    SampleRow,
    SeriesInfo,
    SeriesKey,
    cut_ms,
    iso_text,
    ms_ts,
    record_of,
    stored_values,
)
from dsmon.store.gpu.sql import STAGED

if TYPE_CHECKING:  # pandas loads with the first question: the stores' writers never need it
    import pandas as pd

    from dsmon.store.gpu.buckets import BucketGrid

_SERIES_COLS = "id, t0_ms, uuid, name, mem_total_bytes, power_limit_w"
#: Per-run bookkeeping rows: (run, 'gpu', n, first ts, last ts, last id).
KindRow = tuple[str, str, int, str, str, int]


class GpuSamples:
    """A store's GPU samples: their writes, their reads in id order, and the GPU questions.

    Series rows never change once written, so their ids are cached; another process may add
    series: a miss is looked up, then inserted. The cache is forgotten when a write rolls
    back (:meth:`forget`): a series that transaction created does not exist.
    """

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self._series: dict[SeriesKey, SeriesInfo] = {}

    def forget(self) -> None:
        """Drop the cached series (after a rolled-back write)."""
        self._series.clear()

    # --- writes, in the caller's transaction -----------------------------------------------

    def add(self, db: Db, rows: Sequence[SampleRow]) -> int:
        """Store the samples not stored yet, with their bookkeeping; how many were new."""
        if not rows:
            return 0
        kinds = self._insert(db, rows)
        db.execute_many(sql.gpu_kinds(db.dialect), kinds)
        return sum(k[2] for k in kinds)

    def _insert(self, db: Db, rows: Sequence[SampleRow]) -> list[KindRow]:
        """Store the samples not stored yet; returns per run ``(run, 'gpu', n, first, last, id)``.

        The result has the form of the per-run bookkeeping rows, for the caller to add in.
        """
        d = db.dialect
        first = db.allocate_ids(len(rows))
        values = []
        known = self._series
        for i, row in enumerate(rows, first):
            key, t_ms, fixed, measured, extra = row
            info = known.get(key) or self._series_of(db, row)
            series, t0_ms, series_fixed = info  # by position: a field's name costs a lookup
            if extra or fixed != series_fixed:
                stored = stored_values(row, info)
                values.append((*stored[:2], i, *stored[2:], t_ms))
            else:  # stored_values' of a collector's sample: nothing goes to extra
                values.append((series, t_ms - t0_ms, i, *measured, None, t_ms))
        db.stage_samples(values)
        self._drop_stored(db)
        cols = ", ".join(STAGED)
        db.execute(f"INSERT INTO gpu_samples ({cols}) SELECT {cols} FROM {d.temp}gpu_batch")
        db.execute(f"DELETE FROM {d.temp}gpu_batch_rollup")  # made with the staging table
        finest = sql.LEVELS_S[0]
        db.execute(sql.batch_rollup(d), (finest * 1000,))
        for level in sql.LEVELS_S:
            db.execute(sql.rollup(d), (level, level // finest))
        return self._bookkeeping(db)

    @staticmethod
    def _drop_stored(db: Db) -> None:
        """Drop the staged samples stored before (a collector sends again what it held).

        A stored copy lies in a block whose time range holds its time: only those blocks'
        rows are read.
        """
        temp = db.dialect.temp
        (lo, hi), *_ = db.rows(f"SELECT MIN(abs_ms), MAX(abs_ms) FROM {temp}gpu_batch")
        if lo is None:
            return
        ranges = blocks.id_ranges(db, lo, hi)
        if not ranges:
            return
        head, cond = blocks.scan_from(ranges)
        db.execute(
            f"DELETE FROM {temp}gpu_batch WHERE (series, t_ms) IN "
            f"(SELECT s.series, s.t_ms FROM {head} CROSS JOIN {temp}gpu_batch b "
            f"WHERE {cond} AND b.series = s.series AND b.t_ms = s.t_ms)"
        )

    @staticmethod
    def _bookkeeping(db: Db) -> list[KindRow]:
        """Note the batch in ``gpu_batches`` (:func:`blocks.note`); its per-run counts."""
        temp = db.dialect.temp
        (found,) = db.rows(
            f"SELECT MIN(id), MAX(id), COUNT(*), MIN(abs_ms), MAX(abs_ms) FROM {temp}gpu_batch"
        )
        if not found[2]:
            return []
        lo_id, hi_id, n, t_min, t_max = found
        blocks.note(db, blocks.Block(hi_id, lo_id, n, t_min, t_max))
        per_run = db.rows(
            "SELECT ser.run, COUNT(*), MIN(b.abs_ms), MAX(b.abs_ms), MAX(b.id), ser.node "
            f"FROM {temp}gpu_batch b JOIN gpu_series ser ON ser.id = b.series "
            "GROUP BY ser.run, ser.node"
        )
        db.execute_many(
            "INSERT INTO run_sources (run, node, rank) VALUES (?, ?, -1) ON CONFLICT DO NOTHING",
            sorted({(run, node) for run, *_, node in per_run}),
        )
        out: dict[str, list[int]] = {}
        for run, n, lo, hi, top, _ in per_run:
            acc = out.setdefault(run, [0, lo, hi, top])
            acc[0] += n
            acc[1], acc[2], acc[3] = min(acc[1], lo), max(acc[2], hi), max(acc[3], top)
        return [(run, "gpu", n, ms_ts(lo), ms_ts(hi), top) for run, (n, lo, hi, top) in out.items()]

    def _series_of(self, db: Db, row: SampleRow) -> SeriesInfo:
        """The series of a sample, created with the sample's time and fixed fields if new."""
        info = self._series.get(row.key)
        if info is not None:
            return info
        db.execute(
            "INSERT INTO gpu_series (run, node, file, sub, gpu_index, t0_ms, "
            f"{', '.join(SERIES_FIELDS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (*row.key, row.t_ms, *row.fixed),
        )
        (found,) = db.rows(
            f"SELECT {_SERIES_COLS} FROM gpu_series "
            "WHERE run = ? AND node = ? AND file = ? AND sub = ? AND gpu_index = ?",
            row.key,
        )
        info = SeriesInfo(int(found[0]), int(found[1]), tuple(found[2:]))
        self._series[row.key] = info
        return info

    # --- reads in id order, in the caller's snapshot ---------------------------------------

    @staticmethod
    def max_id(db: Db) -> int:
        """The newest GPU sample id (0 when none)."""
        return blocks.max_id(db)

    @staticmethod
    def select(
        db: Db,
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
            bound = blocks.after(db, after_id, limit)
            if bound is None:
                return []
            id_lo, id_hi = after_id + 1, bound[2]
        ranges = blocks.id_ranges(db, lo, hi)
        if id_lo is not None or ranges is not None:
            ranges = blocks.clipped(ranges, id_lo, id_hi)
        head, cond = blocks.scan_from(ranges)
        conds = [cond, "ser.id = s.series", "ser.run = ?"]
        params: list[Any] = [run]
        for where, value in (("s.t_ms + ser.t0_ms >= ?", lo), ("s.t_ms + ser.t0_ms <= ?", hi)):
            if value is not None:
                conds.append(where)
                params.append(value)
        query = (
            f"SELECT s.id, {SAMPLE_SELECT} FROM {head} CROSS JOIN gpu_series ser "
            f"WHERE {' AND '.join(conds)} ORDER BY s.id"
        )
        if limit is not None:
            query += f" LIMIT {int(limit)}"
        return [(int(r[0]), record_of(r[1:])) for r in db.rows(query, params)]

    # --- what pages and rules ask -----------------------------------------------------------

    def summary(self, run: str, ts_max: str | datetime | None = None) -> pd.DataFrame:
        """One row per GPU (``buckets.summary``), samples up to ``ts_max`` when given."""
        from dsmon.store.gpu import buckets

        got = self._grid(run, None, iso_text(ts_max), None)
        return buckets.summary(got.stats, got.series)

    def buckets(
        self,
        run: str,
        n_buckets: int,
        ts_max: str | datetime | None = None,
        gpus: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Mean/min/max of every metric per GPU in up to ``n_buckets`` equal time buckets.

        ``gpus`` (labels, ``node/gpuN``) restricts the answer to those GPUs: traces are
        drawn for a few GPUs, at a finer grain than the grids of all of them.
        """
        return self.grid(run, n_buckets, ts_max, gpus).per_bucket()

    def grid(
        self,
        run: str,
        n_buckets: int | None,
        ts_max: str | datetime | None = None,
        gpus: Sequence[str] | None = None,
        since: BucketGrid | None = None,
    ) -> BucketGrid:
        """The buckets behind :meth:`buckets`; given the grid read before, only what changed.

        A live page asks every second: with ``since`` (what this call returned last time), and
        the same grid and GPUs, the store sums up again only the buckets that samples stored
        after ``since`` fall in (late ones too) and keeps the others from ``since``.
        ``n_buckets`` None makes one bucket per GPU (what :meth:`summary` sums up): live, it
        is kept in two parts, and ``since`` reads again only the part from the newest
        roll-up on.
        """
        return self._grid(run, n_buckets, iso_text(ts_max), gpus, since)

    def latest(self, run: str, ts_max: str | datetime | None = None) -> list[GpuSampleRecord]:
        """The newest sample of each GPU (up to ``ts_max``)."""
        from dsmon.store.gpu import reads

        cut = cut_ms(iso_text(ts_max))
        return self._backend.snapshot(lambda db: reads.latest(db, run, cut))

    def _grid(
        self,
        run: str,
        n_buckets: int | None,
        ts_max: str | None,
        gpus: Sequence[str] | None,
        since: BucketGrid | None = None,
    ) -> BucketGrid:
        """The grid from the roll-ups (or, for a replay cut-off, the samples), in SQL."""
        from dsmon.store.gpu import reads

        return self._backend.snapshot(
            lambda db: reads.grid(db, run, n_buckets, ts_max, gpus, since)
        )
