"""SQL reads of the SQLite GPU tables: folds per GPU and bucket, spans, newest samples.

Each query returns the shapes of :mod:`dsmon.store.gpu_fold`, so pages and rules never see where
a fold came from. Folds are read from the coarsest roll-up whose buckets fit the width asked
for; a replay cut-off (``ts_max``) or a width finer than 10 s reads the samples themselves,
restricted by the (series, time) key to the range that matters.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import pandas as pd

from dsmon.model.records import GpuSampleRecord
from dsmon.store.gpu_fold import FOLD_COLUMNS, SERIES_COLUMNS
from dsmon.store.gpu_rows import (
    FOLDED,
    SAMPLE_COLUMNS,
    SERIES_FIELDS,
    THROTTLE_BITS,
    SeriesKey,
    gpu_label,
    sample_record,
)
from dsmon.store.sqlite_gpu import LEVELS_S


def _from_samples() -> list[str]:
    """Fold columns (after series and b) computed over samples ``s``."""
    cols = ["COUNT(*)"]
    for _, _, column, _ in FOLDED:
        c = f"s.{column}"
        cols += [f"COUNT({c})", f"SUM({c})", f"MIN({c})", f"MAX({c})"]
    cols.append("COUNT(s.throttle_reasons)")
    cols += [f"SUM((s.throttle_reasons & {bit}) != 0)" for bit in THROTTLE_BITS]
    cols += ["MIN(s.ecc_corrected)", "MAX(s.ecc_corrected)", "MAX(s.ecc_uncorrected)"]
    cols += [
        "MAX(json_extract(s.extra, '$.xid'))",
        "MIN(s.t_ms + ser.t0_ms)",
        "MAX(s.t_ms + ser.t0_ms)",
    ]
    return cols


def _from_rollup() -> list[str]:
    """Fold columns (after series and b) merged from roll-up rows ``r``."""
    cols = ["SUM(r.n)"]
    for prefix, *_ in FOLDED:
        cols += [f"SUM(r.{prefix}_n)", f"SUM(r.{prefix}_sum)"]
        cols += [f"MIN(r.{prefix}_min)", f"MAX(r.{prefix}_max)"]
    cols.append("SUM(r.thr_n)")
    cols += [f"SUM(r.thr_{bit})" for bit in THROTTLE_BITS]
    cols += ["MIN(r.ecc_c_min)", "MAX(r.ecc_c_max)", "MAX(r.ecc_u_max)", "MAX(r.xid_max)"]
    cols += ["MIN(r.t_min_ms)", "MAX(r.t_max_ms)"]
    return cols


_SAMPLES_SELECT = ", ".join(_from_samples())
_ROLLUP_SELECT = ", ".join(_from_rollup())


def _query(conn: sqlite3.Connection, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Rows of a read; none from a store whose GPU tables do not exist yet."""
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


def series(conn: sqlite3.Connection, run: str, gpus: Sequence[str] | None) -> pd.DataFrame:
    """The run's GPU series (:data:`dsmon.store.gpu_fold.SERIES_COLUMNS`), only ``gpus`` if given."""
    rows = _query(
        conn,
        f"SELECT id, node, gpu_index, {', '.join(SERIES_FIELDS)} FROM gpu_series WHERE run = ?",
        [run],
    )
    out = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    out["node"] = out["node"].where(out["node"] != "", None)
    if gpus is not None:
        labels = [gpu_label(n, i) for n, i in zip(out["node"], out["gpu_index"], strict=True)]
        out = out[[label in set(gpus) for label in labels]].reset_index(drop=True)
    return out


def span(conn: sqlite3.Connection, run: str, ts_max: int | None) -> tuple[int, int] | None:
    """First and last sample time of the run (up to ``ts_max``), from the coarsest roll-up."""
    sql = (
        "SELECT MIN(r.t_min_ms), MAX(r.t_max_ms) FROM gpu_series ser "
        "JOIN gpu_rollup r ON r.level_s = ? AND r.series = ser.id WHERE ser.run = ?"
    )
    found = _query(conn, sql, [LEVELS_S[-1], run])
    if not found or found[0][0] is None:
        return None
    lo, hi = int(found[0][0]), int(found[0][1])
    if ts_max is not None:
        hi = min(hi, ts_max)
    return (lo, hi) if hi >= lo else None


def level_for(width_ms: int | None, ts_max: int | None) -> int | None:
    """The coarsest roll-up level (s) whose buckets tile ``width_ms``; None: read samples."""
    if ts_max is not None:
        return None
    fits = [lv for lv in LEVELS_S if width_ms is None or width_ms % (lv * 1000) == 0]
    return fits[-1] if fits else None


def fold(
    conn: sqlite3.Connection,
    run: str,
    series_ids: Sequence[int],
    t0_ms: int,
    width_ms: int | None,
    ts_max: int | None = None,
) -> pd.DataFrame:
    """The fold of some of a run's series from ``t0_ms`` in buckets of ``width_ms``.

    ``width_ms`` None folds each series into one bucket.
    """
    level = level_for(width_ms, ts_max)
    w = width_ms or 1
    only = f" AND ser.id IN ({', '.join(str(int(i)) for i in series_ids)})" if series_ids else ""
    if level is not None:
        b = "0" if width_ms is None else f"(r.bucket * {level * 1000} - ?) / {w}"
        sql = (
            f"SELECT r.series, {b}, {_ROLLUP_SELECT} FROM gpu_series ser JOIN gpu_rollup r "
            f"ON r.level_s = {level} AND r.series = ser.id WHERE ser.run = ?{only} "
            "GROUP BY r.series, 2"
        )
    else:
        b = "0" if width_ms is None else f"(s.t_ms + ser.t0_ms - ?) / {w}"
        cut = "" if ts_max is None else f" AND s.t_ms <= {int(ts_max)} - ser.t0_ms"
        sql = (
            f"SELECT s.series, {b}, {_SAMPLES_SELECT} FROM gpu_series ser JOIN gpu_samples s "
            f"ON s.series = ser.id WHERE ser.run = ?{only}{cut} GROUP BY s.series, 2"
        )
    params: list[Any] = ([] if width_ms is None else [t0_ms]) + [run]
    return pd.DataFrame(_query(conn, sql, params), columns=list(FOLD_COLUMNS))


def latest(conn: sqlite3.Connection, run: str, ts_max: int | None) -> list[GpuSampleRecord]:
    """The newest sample of each of the run's GPUs (up to ``ts_max``): one key seek per GPU."""
    cut = "" if ts_max is None else f" AND s.t_ms <= {int(ts_max)} - ser.t0_ms"
    sql = (
        "SELECT ser.run, ser.node, ser.file, ser.sub, ser.gpu_index, s.t_ms + ser.t0_ms, "
        f"{', '.join('ser.' + f for f in SERIES_FIELDS)}, "
        f"{', '.join('s.' + c for c in SAMPLE_COLUMNS)} "
        "FROM gpu_series ser JOIN gpu_samples s ON s.series = ser.id "
        "AND s.t_ms = (SELECT MAX(t_ms) FROM gpu_samples x WHERE x.series = ser.id"
        f"{cut.replace('s.t_ms', 'x.t_ms')}) WHERE ser.run = ?"
    )
    n_fixed = len(SERIES_FIELDS)
    return [
        sample_record(SeriesKey(*r[:5]), int(r[5]), r[6 : 6 + n_fixed], r[6 + n_fixed :])
        for r in _query(conn, sql, [run])
    ]
