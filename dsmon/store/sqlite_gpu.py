"""GPU samples in SQLite: typed rows per GPU series, and roll-ups the pages read.

The GPUs page of a day-long 64-GPU run must not read 5.5 million rows per refresh. Samples go
to ``gpu_samples`` (a WITHOUT ROWID table keyed by series and time, about 60 bytes a sample,
see :mod:`dsmon.store.gpu_rows`), and each insert also folds them into ``gpu_rollup``: count, sum,
min and max of every charted metric per GPU and 60 s / 600 s bucket, with clock-event
counts per reason bit. A page asks for buckets of the width it can draw and gets them from
the coarsest roll-up that is fine enough: a day of 64 GPUs is 92k one-minute rows, not 5.5M.

Ids come from the ``records`` table's sequence, so ``since``/``after_id`` readers see GPU
samples and other records in one order. ``gpu_batches`` notes each insert's id and time
range: reading "ids after N" then scans only the times those batches cover.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from dsmon.model.records import GpuSampleRecord
from dsmon.store.gpu_rows import (
    FOLD_STATS,
    FOLDED,
    SAMPLE_COLUMNS,
    SCALED_FIELDS,
    SERIES_FIELDS,
    THROTTLE_BITS,
    SampleRow,
    SeriesInfo,
    SeriesKey,
    ms_ts,
    sample_record,
    stored_values,
)

#: Roll-up bucket widths, seconds, finest first. A 10 s level would cost 12 bytes a sample.
LEVELS_S = (60, 600)
_INTEGER = {sc.column for sc in SCALED_FIELDS} | {
    "throttle_reasons",
    "ecc_corrected",
    "ecc_uncorrected",
}


def _col_type(col: str) -> str:
    if col == "extra":
        return "TEXT"
    return "INTEGER" if col in _INTEGER else "REAL"


_SAMPLE_COLS_SQL = ", ".join(f"{c} {_col_type(c)}" for c in SAMPLE_COLUMNS)
DDL = (
    """CREATE TABLE IF NOT EXISTS gpu_series (
        id INTEGER PRIMARY KEY,
        run TEXT NOT NULL, node TEXT NOT NULL, file TEXT NOT NULL, sub INTEGER NOT NULL,
        gpu_index INTEGER NOT NULL, t0_ms INTEGER NOT NULL,
        uuid TEXT, name TEXT, mem_total_bytes INTEGER, power_limit_w REAL,
        UNIQUE (run, node, file, sub, gpu_index)
    )""",
    f"""CREATE TABLE IF NOT EXISTS gpu_samples (
        series INTEGER NOT NULL, t_ms INTEGER NOT NULL, id INTEGER NOT NULL,
        {_SAMPLE_COLS_SQL},
        PRIMARY KEY (series, t_ms)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS gpu_batches (
        last_id INTEGER PRIMARY KEY, first_id INTEGER NOT NULL, n INTEGER NOT NULL,
        t_min_ms INTEGER NOT NULL, t_max_ms INTEGER NOT NULL
    )""",
    f"""CREATE TABLE IF NOT EXISTS gpu_rollup (
        level_s INTEGER NOT NULL, series INTEGER NOT NULL, bucket INTEGER NOT NULL,
        n INTEGER NOT NULL, {", ".join(f"{c} NUMERIC" for c in FOLD_STATS)},
        PRIMARY KEY (level_s, series, bucket)
    ) WITHOUT ROWID""",
)
_TEMP_DDL = f"""CREATE TEMP TABLE IF NOT EXISTS gpu_batch (
    series INTEGER NOT NULL, t_ms INTEGER NOT NULL, id INTEGER NOT NULL,
    {_SAMPLE_COLS_SQL}, abs_ms INTEGER NOT NULL,
    PRIMARY KEY (series, t_ms)
)"""
_ALL = ("series", "t_ms", "id", *SAMPLE_COLUMNS)
_FOLDS = {"n": "COUNT({})", "sum": "SUM({})", "min": "MIN({})", "max": "MAX({})"}
_MERGE = {"n": "{0} + excluded.{0}", "sum": "COALESCE({0}, 0) + COALESCE(excluded.{0}, 0)"}


def _rollup_sql() -> str:
    """INSERT ... SELECT of the batch's buckets at one level, merged into existing ones."""
    sel = ["COUNT(*)"]
    merge = ["n = n + excluded.n"]
    for prefix, _, column, _ in FOLDED:
        expr = f"b.{column}"
        for stat, fold in _FOLDS.items():
            col = f"{prefix}_{stat}"
            sel.append(fold.format(expr))
            how = _MERGE.get(stat)
            if how is None:  # min/max: SQLite's scalar MIN/MAX are NULL if either side is
                fn = stat.upper()
                how = f"COALESCE({fn}({{0}}, excluded.{{0}}), {{0}}, excluded.{{0}})"
            merge.append(f"{col} = " + how.format(col))
    sel.append("COUNT(b.throttle_reasons)")
    merge.append("thr_n = thr_n + excluded.thr_n")
    for bit in THROTTLE_BITS:
        sel.append(f"SUM((b.throttle_reasons & {bit}) != 0)")
        merge.append(f"thr_{bit} = COALESCE(thr_{bit}, 0) + COALESCE(excluded.thr_{bit}, 0)")
    for col, fold, src in (
        ("ecc_c_min", "MIN", "b.ecc_corrected"),
        ("ecc_c_max", "MAX", "b.ecc_corrected"),
        ("ecc_u_max", "MAX", "b.ecc_uncorrected"),
        ("xid_max", "MAX", "json_extract(b.extra, '$.xid')"),
        ("t_min_ms", "MIN", "b.abs_ms"),
        ("t_max_ms", "MAX", "b.abs_ms"),
    ):
        sel.append(f"{fold}({src})")
        merge.append(f"{col} = COALESCE({fold}({col}, excluded.{col}), {col}, excluded.{col})")
    cols = ", ".join(["level_s", "series", "bucket", "n", *FOLD_STATS])
    return (
        f"INSERT INTO gpu_rollup ({cols}) SELECT ?, b.series, b.abs_ms / ?, "
        f"{', '.join(sel)} FROM temp.gpu_batch b GROUP BY b.series, b.abs_ms / ? "
        f"ON CONFLICT (level_s, series, bucket) DO UPDATE SET {', '.join(merge)}"
    )


_ROLLUP = _rollup_sql()
_SERIES_COLS = "id, t0_ms, uuid, name, mem_total_bytes, power_limit_w"


class GpuTables:
    """The GPU tables of one SQLite connection; every method runs in the caller's transaction.

    Series rows never change once written, so their ids are cached for the life of the
    connection (another process may add series: a miss is looked up, then inserted).
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._series: dict[SeriesKey, SeriesInfo] = {}

    def create(self) -> None:
        """The tables, in a store being created or one an older dsmon wrote."""
        for stmt in DDL:
            self._conn.execute(stmt)

    def insert(self, rows: Sequence[SampleRow]) -> list[tuple[str, str, int, str, str, int]]:
        """Store the samples not stored yet; returns per run ``(run, 'gpu', n, first, last, id)``.

        The result has the form of the per-run bookkeeping rows, for the caller to fold in.
        """
        if not rows:
            return []
        conn = self._conn
        conn.execute(_TEMP_DDL)
        conn.execute("DELETE FROM temp.gpu_batch")
        first = self._allocate(len(rows))
        values = []
        for i, row in enumerate(rows):
            info = self._series_of(row)
            stored = stored_values(row, info)
            values.append((*stored[:2], first + i, *stored[2:], row.t_ms))
        marks = ", ".join("?" for _ in range(len(_ALL) + 1))
        conn.executemany(f"INSERT OR IGNORE INTO temp.gpu_batch VALUES ({marks})", values)
        conn.execute(
            "DELETE FROM temp.gpu_batch WHERE EXISTS (SELECT 1 FROM gpu_samples s "
            "WHERE s.series = gpu_batch.series AND s.t_ms = gpu_batch.t_ms)"
        )
        cols = ", ".join(_ALL)
        conn.execute(f"INSERT INTO gpu_samples ({cols}) SELECT {cols} FROM temp.gpu_batch")
        for level in LEVELS_S:
            conn.execute(_ROLLUP, (level, level * 1000, level * 1000))
        return self._bookkeeping()

    def _bookkeeping(self) -> list[tuple[str, str, int, str, str, int]]:
        """Note the batch in ``gpu_batches``; its per-run counts for ``run_kinds``."""
        conn = self._conn
        found = conn.execute(
            "SELECT MIN(id), MAX(id), COUNT(*), MIN(abs_ms), MAX(abs_ms) FROM temp.gpu_batch"
        ).fetchone()
        if not found[2]:
            return []
        lo_id, hi_id, n, t_min, t_max = found
        conn.execute(
            "INSERT INTO gpu_batches VALUES (?, ?, ?, ?, ?)", (hi_id, lo_id, n, t_min, t_max)
        )
        per_run = conn.execute(
            "SELECT ser.run, COUNT(*), MIN(b.abs_ms), MAX(b.abs_ms), MAX(b.id), ser.node "
            "FROM temp.gpu_batch b JOIN gpu_series ser ON ser.id = b.series "
            "GROUP BY ser.run, ser.node"
        ).fetchall()
        conn.executemany(
            "INSERT OR IGNORE INTO run_sources (run, node, rank) VALUES (?, ?, -1)",
            {(run, node) for run, *_, node in per_run},
        )
        out: dict[str, list[int]] = {}
        for run, n, lo, hi, top, _ in per_run:
            acc = out.setdefault(run, [0, lo, hi, top])
            acc[0] += n
            acc[1], acc[2], acc[3] = min(acc[1], lo), max(acc[2], hi), max(acc[3], top)
        return [(run, "gpu", n, ms_ts(lo), ms_ts(hi), top) for run, (n, lo, hi, top) in out.items()]

    def _allocate(self, n: int) -> int:
        """Reserve ``n`` ids of the records' sequence; returns the first."""
        conn = self._conn
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        if row is None:
            top = conn.execute("SELECT MAX(id) FROM records").fetchone()[0] or 0
            conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top + n,)
            )
            return int(top) + 1
        conn.execute("UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'records'", (n,))
        return int(row[0]) + 1

    def _series_of(self, row: SampleRow) -> SeriesInfo:
        """The series of a sample, created with the sample's time and fixed fields if new."""
        info = self._series.get(row.key)
        if info is not None:
            return info
        conn = self._conn
        conn.execute(
            "INSERT OR IGNORE INTO gpu_series (run, node, file, sub, gpu_index, t0_ms, "
            f"{', '.join(SERIES_FIELDS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row.key, row.t_ms, *row.fixed),
        )
        found = conn.execute(
            f"SELECT {_SERIES_COLS} FROM gpu_series "
            "WHERE run = ? AND node = ? AND file = ? AND sub = ? AND gpu_index = ?",
            row.key,
        ).fetchone()
        info = SeriesInfo(int(found[0]), int(found[1]), tuple(found[2:]))
        self._series[row.key] = info
        return info

    # --- reads -----------------------------------------------------------------------------

    def max_id(self) -> int:
        """The newest GPU sample id (0 when none, or no table yet)."""
        try:
            row = self._conn.execute("SELECT MAX(last_id) FROM gpu_batches").fetchone()
        except sqlite3.OperationalError:
            return 0
        return int(row[0] or 0)

    def select(
        self,
        run: str,
        after_id: int | None,
        t_range: tuple[int | None, int | None],
        limit: int | None,
    ) -> list[tuple[int, GpuSampleRecord]]:
        """``(id, record)`` of a run's samples in id order: ids above ``after_id``, times in range.

        With ``after_id``, the batches stored after it bound the time range scanned and, with
        ``limit``, the id range: paging through a day of samples reads each page's rows only.
        """
        lo, hi = t_range
        id_hi = None
        if after_id:
            bound = self._after(after_id, limit)
            if bound is None:
                return []
            t_lo, t_hi, id_hi = bound
            lo = t_lo if lo is None else max(lo, t_lo)
            hi = t_hi if hi is None else min(hi, t_hi)
        conds = ["ser.run = ?"]
        params: list[Any] = [run]
        for sql, value in (
            ("s.t_ms >= ? - ser.t0_ms", lo),
            ("s.t_ms <= ? - ser.t0_ms", hi),
            ("s.id > ?", after_id),
            ("s.id <= ?", id_hi),
        ):
            if value is not None:
                conds.append(sql)
                params.append(value)
        sql = (
            "SELECT s.id, s.t_ms + ser.t0_ms, ser.run, ser.node, ser.file, ser.sub, "
            f"ser.gpu_index, {', '.join('ser.' + f for f in SERIES_FIELDS)}, "
            f"{', '.join('s.' + c for c in SAMPLE_COLUMNS)} "
            "FROM gpu_series ser JOIN gpu_samples s ON s.series = ser.id "
            f"WHERE {' AND '.join(conds)} ORDER BY s.id"
        )
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        try:
            rows = self._conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise
        n_fixed = len(SERIES_FIELDS)
        return [
            (
                int(r[0]),
                sample_record(SeriesKey(*r[2:7]), int(r[1]), r[7 : 7 + n_fixed], r[7 + n_fixed :]),
            )
            for r in rows
        ]

    def _after(self, after_id: int, limit: int | None) -> tuple[int, int, int | None] | None:
        """Time range and id bound of the batches stored after ``after_id`` (None: none)."""
        try:
            batches = self._conn.execute(
                "SELECT last_id, n, t_min_ms, t_max_ms, first_id FROM gpu_batches "
                "WHERE last_id > ? ORDER BY last_id",
                (after_id,),
            ).fetchall()
        except sqlite3.OperationalError:
            return None
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
