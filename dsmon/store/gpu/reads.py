"""SQL reads of the GPU tables: buckets per GPU on a grid, spans, newest samples.

Each query returns the shapes of :mod:`dsmon.store.gpu.buckets`, so pages and rules never see
where buckets came from. They are read from the coarsest roll-up whose buckets fit the width
asked for; a replay cut-off (``ts_max``) or a width finer than 10 s reads the samples
themselves, restricted to the id ranges that hold the times that matter
(:mod:`dsmon.store.gpu.blocks`). The same queries serve SQLite and PostgreSQL (``db`` knows
the dialect); each runs in the caller's snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from dsmon.model.records import GpuSampleRecord
from dsmon.store.backend import Db
from dsmon.store.gpu import blocks, sql
from dsmon.store.gpu.buckets import BUCKET_COLUMNS, SERIES_COLUMNS, BucketGrid
from dsmon.store.gpu.rows import SAMPLE_SELECT, SERIES_FIELDS, cut_ms, gpu_label, record_of
from dsmon.store.gpu.rows import grid as grid_of
from dsmon.store.gpu.sql import LEVELS_S


def grid(
    db: Db,
    run: str,
    n_buckets: int | None,
    ts_max: str | None,
    gpus: Sequence[str] | None,
    since: BucketGrid | None = None,
) -> BucketGrid:
    """The run's buckets from the roll-ups (or, for a replay cut-off, the samples), in SQL.

    With ``since`` (this function's answer before), only the buckets that later samples
    fall in are read again (:func:`first_changed`).
    """
    cut = cut_ms(ts_max)
    found = series(db, run, gpus)
    when = span(db, run, cut)
    last_id = blocks.max_id(db)
    if when is None or found.empty:
        return BucketGrid(stats(db, "", [], 0, None), found, 0, None, last_id)
    ids = [int(i) for i in found["series"]]
    if n_buckets is None and cut is None:
        return summary_grid(db, run, found, ids, when, since, last_id)
    t0, width = when[0], None
    if n_buckets:
        t0, width = grid_of(n_buckets, when, level_ms(when, n_buckets, cut))
    start = None if cut is not None else first_changed(db, since, ids, t0, width)
    if since is None or start is None:
        return BucketGrid(stats(db, run, ids, t0, width, cut), found, t0, width, last_id)
    kept = since.stats[since.stats["b"] < start]
    fresh = stats(db, run, ids, t0, width, from_bucket=start)
    return BucketGrid(_joined(kept, fresh), found, t0, width, last_id)


def _joined(kept: pd.DataFrame, fresh: pd.DataFrame) -> pd.DataFrame:
    """The buckets kept from ``since`` and those read again, as one frame of all rows."""
    # dtypes as one frame of all rows gets them (a column of None beside numbers: floats)
    return pd.concat([kept, fresh], ignore_index=True).infer_objects()


def first_changed(
    db: Db, since: BucketGrid | None, ids: list[int], t0_ms: int, width_ms: int | None
) -> int | None:
    """The first bucket that samples stored after ``since`` can have changed; None: any.

    ``since`` serves only on the same grid and GPUs: a run that grew past its grid's span
    gets wider buckets, and every bucket changes. Samples of any run stored since count, and
    so does a late sample (a collector sending what it held through an outage): its bucket
    and every later one are read again.
    """
    if since is None or width_ms is None or since.last_id <= 0 or since.stats.empty:
        return None
    if (since.t0_ms, since.width_ms) != (t0_ms, width_ms):
        return None
    if since.series["series"].astype("int64").tolist() != ids:
        return None
    times = blocks.times_after(db, since.last_id)
    if times is None:  # nothing stored since: only the last bucket, which is cheap to read
        return int(since.stats["b"].max())
    first = (times[0] - t0_ms) // width_ms
    return int(first) if first >= 0 else None


#: Coarsest roll-ups a live summary reads again on each tick before it is split anew.
SPLIT_AFTER = 6
_COARSEST_MS = LEVELS_S[-1] * 1000


def summary_grid(
    db: Db,
    run: str,
    found: pd.DataFrame,
    ids: list[int],
    when: tuple[int, int],
    since: BucketGrid | None,
    last_id: int,
) -> BucketGrid:
    """One bucket per GPU, live, kept in two parts: the roll-ups before a split and after it.

    Every sample changes a GPU's one bucket, so a summary summed up whole on each tick read
    every roll-up of the run (35-100 ms at 64 GPUs x 24 h). Split at the newest coarsest
    roll-up, the part before the split is kept from ``since``; a tick reads only the part from
    it. A late sample before the split, other GPUs or a part after it grown past
    :data:`SPLIT_AFTER` roll-ups are read whole again, split at the newest roll-up then.
    ``found`` is the run's series frame, ``ids`` their ids.
    """
    if since is None or not split_holds(db, since, ids, when):
        split = when[1] - when[1] % _COARSEST_MS
        whole = stats(db, run, ids, when[0], None, split_ms=split)
        return BucketGrid(whole, found, when[0], None, last_id, split)
    kept = since.stats[since.stats["b"] == 0]
    fresh = stats(db, run, ids, when[0], None, from_bucket=1, split_ms=since.split_ms)
    return BucketGrid(_joined(kept, fresh), found, when[0], None, last_id, since.split_ms)


def split_holds(db: Db, since: BucketGrid, ids: list[int], when: tuple[int, int]) -> bool:
    """Whether the part of ``since`` before its split still stands (:func:`summary_grid`)."""
    split = since.split_ms
    if split is None or since.width_ms is not None or since.last_id <= 0:
        return False
    if since.series["series"].astype("int64").tolist() != ids:
        return False
    if when[1] - split >= SPLIT_AFTER * _COARSEST_MS:
        return False
    times = blocks.times_after(db, since.last_id)
    return times is None or times[0] >= split


def level_ms(span: tuple[int, int], n_buckets: int, cut: int | None) -> int:
    """The roll-up width (ms) buckets of this span are built from; 1 when from samples.

    A roll-up serves when it still gives a quarter of the buckets asked for: a grid of 75
    one-minute columns reads far fewer rows than 300 columns of samples would.
    """
    if cut is not None:
        return 1
    want = (span[1] - span[0]) // max(n_buckets, 1) + 1
    fits = [lv * 1000 for lv in LEVELS_S if lv * 1000 <= want * 4]
    return fits[-1] if fits else 1


def series(db: Db, run: str, gpus: Sequence[str] | None) -> pd.DataFrame:
    """The run's GPU series (:data:`dsmon.store.gpu.buckets.SERIES_COLUMNS`), ``gpus`` if given."""
    rows = db.rows(
        f"SELECT id, node, gpu_index, {', '.join(SERIES_FIELDS)} FROM gpu_series WHERE run = ?",
        [run],
    )
    out = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    out["node"] = out["node"].where(out["node"] != "", None)
    if gpus is not None:
        labels = [gpu_label(n, i) for n, i in zip(out["node"], out["gpu_index"], strict=True)]
        out = out[[label in set(gpus) for label in labels]].reset_index(drop=True)
    return out


def span(db: Db, run: str, ts_max: int | None) -> tuple[int, int] | None:
    """First and last sample time of the run (up to ``ts_max``), from the coarsest roll-up."""
    query = (
        "SELECT MIN(r.t_min_ms), MAX(r.t_max_ms) FROM gpu_series ser "
        "JOIN gpu_rollup r ON r.level_s = ? AND r.series = ser.id WHERE ser.run = ?"
    )
    found = db.rows(query, [LEVELS_S[-1], run])
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


def stats(
    db: Db,
    run: str,
    series_ids: Sequence[int],
    t0_ms: int,
    width_ms: int | None,
    ts_max: int | None = None,
    from_bucket: int = 0,
    split_ms: int | None = None,
) -> pd.DataFrame:
    """Bucket statistics of some of a run's series from ``t0_ms`` in buckets of ``width_ms``.

    ``width_ms`` None makes one bucket of each series, or two with ``split_ms`` (from the
    roll-ups, aligned to them): 0 before it, 1 from it on. ``from_bucket`` leaves out the
    buckets before it (read by the roll-ups' key, or the blocks of the samples' times).
    """
    d = db.dialect
    level = level_for(width_ms, ts_max)
    w = width_ms or 1
    only = f" AND ser.id IN ({', '.join(str(int(i)) for i in series_ids)})" if series_ids else ""
    t_from = t0_ms + from_bucket * w if width_ms is not None and from_bucket > 0 else None
    if split_ms is not None and from_bucket > 0:
        t_from = split_ms
    if level is not None:
        b = "0" if width_ms is None else f"(r.bucket * {level * 1000} - ?) / {w}"
        if width_ms is None and split_ms is not None:
            b = f"CASE WHEN r.bucket < {split_ms // (level * 1000)} THEN 0 ELSE 1 END"
        # the roll-ups that start at t_from or later: those whose bucket is from_bucket on
        later = "" if t_from is None else f" AND r.bucket >= {-(-t_from // (level * 1000))}"
        query = (
            f"SELECT r.series, {b}, {sql.stats_from_rollups(d)} FROM gpu_series ser "
            f"JOIN gpu_rollup r ON r.level_s = {level} AND r.series = ser.id{later} "
            f"WHERE ser.run = ?{only} GROUP BY r.series, 2"
        )
    else:
        b = "0" if width_ms is None else f"(s.t_ms + ser.t0_ms - ?) / {w}"
        cut = "" if ts_max is None else f" AND s.t_ms + ser.t0_ms <= {int(ts_max)}"
        if t_from is not None:
            cut += f" AND s.t_ms + ser.t0_ms >= {int(t_from)}"
        # the run's samples start at t0_ms: batches that ended before hold none of them
        lo = t0_ms if t_from is None else t_from
        head, ids = blocks.scan_from(blocks.id_ranges(db, lo, ts_max))
        query = (
            f"SELECT s.series, {b}, {sql.stats_from_samples(d)} FROM {head} "
            f"CROSS JOIN gpu_series ser WHERE {ids} AND ser.id = s.series "
            f"AND ser.run = ?{only}{cut} GROUP BY s.series, 2"
        )
    params: list[Any] = ([] if width_ms is None else [t0_ms]) + [run]
    return pd.DataFrame(db.rows(query, params), columns=list(BUCKET_COLUMNS))


def latest(db: Db, run: str, ts_max: int | None) -> list[GpuSampleRecord]:
    """The newest sample of each of the run's GPUs (up to ``ts_max``).

    Samples have no (GPU, time) index: each GPU's newest one-minute roll-up up to ``ts_max``
    says in which minute its newest sample lies, and only the blocks of those minutes are
    read (:func:`newest_minutes`), all GPUs' at once when they are close in time.
    """
    out: list[GpuSampleRecord] = []
    for lo, hi, ids in _windows(newest_minutes(db, run, ts_max)):
        head, cond = blocks.scan_from(blocks.id_ranges(db, lo, hi))
        query = (
            f"SELECT * FROM (SELECT {SAMPLE_SELECT}, "
            "ROW_NUMBER() OVER (PARTITION BY s.series ORDER BY s.t_ms DESC) AS newest "
            f"FROM {head} CROSS JOIN gpu_series ser WHERE {cond} AND ser.id = s.series "
            f"AND ser.id IN ({', '.join(str(i) for i in ids)}) "
            "AND s.t_ms + ser.t0_ms BETWEEN ? AND ?) AS x WHERE x.newest = 1"
        )
        out += [record_of(r[:-1]) for r in db.rows(query, [lo, hi])]
    return out


def newest_minutes(db: Db, run: str, ts_max: int | None) -> list[tuple[int, int, int]]:
    """``(series, lo, hi)``: the time range (ms) each GPU's newest sample up to ``ts_max`` is in.

    From the newest one-minute roll-up that starts before ``ts_max``: its last sample's time
    when that is not after ``ts_max``; else from its start to ``ts_max``. A roll-up whose
    samples all come after ``ts_max`` is passed over for the one before it.
    """
    level = LEVELS_S[0]
    width = level * 1000
    bound = "" if ts_max is None else f" AND x.bucket <= {ts_max // width} AND x.t_min_ms <= ?"
    query = (
        "SELECT ser.id, r.bucket, r.t_max_ms FROM gpu_series ser JOIN gpu_rollup r "
        f"ON r.level_s = {level} AND r.series = ser.id AND r.bucket = ("
        f"SELECT MAX(x.bucket) FROM gpu_rollup x WHERE x.level_s = {level} "
        f"AND x.series = ser.id{bound}) WHERE ser.run = ?"
    )
    params: list[Any] = ([] if ts_max is None else [ts_max]) + [run]
    out = []
    for series_id, bucket, t_max in db.rows(query, params):
        if ts_max is None or t_max <= ts_max:
            out.append((int(series_id), int(t_max), int(t_max)))
        else:
            out.append((int(series_id), int(bucket) * width, ts_max))
    return out


def _windows(minutes: list[tuple[int, int, int]]) -> list[tuple[int, int, list[int]]]:
    """GPUs whose ranges lie within a minute of one another, read together: (lo, hi, series)."""
    out: list[tuple[int, int, list[int]]] = []
    for series_id, lo, hi in sorted(minutes, key=lambda m: m[1]):
        if out and lo - out[-1][0] <= LEVELS_S[0] * 1000:
            out[-1] = (out[-1][0], max(out[-1][1], hi), [*out[-1][2], series_id])
        else:
            out.append((lo, hi, [series_id]))
    return out
