"""Per-rank summaries kept as records arrive, so no page reads a run's every ``rank_step``.

``dsmon run``'s probe writes a ``rank_step`` record per rank and optimizer step and about a
heartbeat per rank and second: 6.4 million of the first at 100k steps of 64 ranks, 5.5 million
of the second in a day. The Steps page, the ``ranks.*`` rules and Compare read those kinds as
per-step figures (the straggler score, the step's wall time), each rank's busy time in step
buckets, and each rank's newest heartbeat; reading the records to compute them took 15 s and
gigabytes on a first look. So every write brings what it stored into the tables of
:mod:`dsmon.store.ranks.sql`, in its own transaction, and a reader asks for those tables:
about one row per step, a few thousand roll-up rows, one row per rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dsmon.model.records import HeartbeatRecord
from dsmon.store import blocks
from dsmon.store.backend import Backend, Db
from dsmon.store.ranks import sql
from dsmon.store.ranks.rows import probe_rows
from dsmon.store.ranks.sql import BUSY_LEVELS, PHASE_SUMS, STAT_COLUMNS
from dsmon.store.records.added import Added
from dsmon.store.records.rows import (
    BODY_AT,
    LINE_AT,
    RANK_AT,
    RUN_AT,
    STEP_AT,
    TS_AT,
    row_record,
)

if TYPE_CHECKING:  # pandas loads with the first read: the stores' writers never need it
    import pandas as pd

#: The kinds kept here.
RANK_KINDS = frozenset({"rank_step", "heartbeat"})
#: Steps read per query by a first :meth:`RankTables.step_stats`.
STATS_PAGE_ROWS = 50_000
#: A step no run reaches: "every step".
LAST_STEP = 2**62
#: Columns of :meth:`RankTables.busy`.
BUSY_COLUMNS = ("rank", "step", "n", "busy_ms", "min_ms", "max_ms")
#: Columns of :meth:`RankTables.phases`: each rank's mean per step of each phase (ms).
PHASE_COLUMNS = ("rank", "step", "n", *PHASE_SUMS)
#: Columns of :meth:`RankTables.comm`.
COMM_COLUMNS = (
    "step", "op", "bucket_bytes", "group_size", "steps", "calls", "msg_bytes", "wire_ms",
    "max_ms",
)  # fmt: skip


def source_level(width: int) -> int | None:
    """The coarsest roll-up whose buckets tile buckets of ``width`` steps (None: the steps)."""
    fits = [w for w in BUSY_LEVELS if w <= width and width % w == 0]
    return fits[-1] if fits else None


def bucket_width(last_step: int, n_buckets: int) -> int:
    """The power of two that cuts steps 0..``last_step`` into at most ``n_buckets`` buckets."""
    width = 1
    while (last_step // width) + 1 > n_buckets:
        width *= 2
    return width


class RankTables:
    """The per-rank tables of a store: a write's share, and what pages and rules read."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @staticmethod
    def update(db: Db, added: Added) -> None:
        """Bring the records a write ``added`` into the tables.

        A batch without probe records costs nothing. The new probe records are taken from
        the batch in hand, or read once, and their rows made in Python
        (:func:`dsmon.store.ranks.rows.probe_rows`); each statement then runs once per row,
        touched step or bucket (``executemany``).
        """
        if not RANK_KINDS.intersection(added.kinds):
            return
        d = db.dialect
        made = probe_rows(_new_probe_records(db, added))
        if made.steps:
            db.insert_many(sql.upsert_steps(), made.steps)
            if made.comm:
                db.insert_many(sql.upsert_comm(d), made.comm)
            pairs = made.touched()
            touched = _steps_by_run(pairs)
            _update_stats(db, touched)
            _repack_stats(db, touched)
            for width in BUSY_LEVELS:  # finest first: each level sums the one below
                db.execute_many(sql.update_busy(d, width), made.buckets(width, pairs))
        if made.beats:
            db.insert_many(sql.upsert_beats(), made.beats)
        if made.beat_steps:
            db.insert_many(sql.upsert_beats("rank_beat_steps"), made.beat_steps)

    def step_stats(self, run: str, after_id: int = 0, step_max: int | None = None) -> pd.DataFrame:
        """One row per step of ``rank_step_stats`` changed after ``after_id``, in step order.

        Columns :data:`dsmon.store.ranks.sql.STAT_COLUMNS` (``id``: the newest record taken
        in, what a live reader passes as ``after_id`` next). Without ``after_id``,
        ``step_max`` keeps the steps up to it (a replay position).
        """
        if after_id:
            rows = self._backend.snapshot(lambda db: db.rows(sql.STATS_SINCE, (run, after_id)))
            return _frame(rows, STAT_COLUMNS).sort_values("step").reset_index(drop=True)
        upto = LAST_STEP if step_max is None else step_max
        return self._backend.snapshot(lambda db: _all_stats(db, run, upto))

    def busy(self, run: str, width: int, step_max: int | None = None) -> pd.DataFrame:
        """Each rank's busy time per bucket of ``width`` steps: :data:`BUSY_COLUMNS`.

        ``step`` is the bucket's first step, ``busy_ms`` the mean over its steps, ``n`` how
        many steps of the rank it holds; ``step_max``: the steps up to it.
        """
        level = source_level(width)
        rows = self._backend.snapshot(
            lambda db: db.rows(*_busy_query(db, run, level, width, step_max))
        )
        out = _frame(rows, ("rank", "step", "n", "sum_ms", "min_ms", "max_ms"))
        out["step"] = out["step"] * width
        out["busy_ms"] = out["sum_ms"] / out["n"].where(out["n"] > 0)
        return out[list(BUSY_COLUMNS)]

    def phases(self, run: str, width: int, step_max: int | None = None) -> pd.DataFrame:
        """Each rank's mean time per step in each phase, per bucket of ``width`` steps.

        Columns :data:`PHASE_COLUMNS`: ``fwd_ms``, ``bwd_ms``, ``step_ms``, ``input_ms`` (the
        time before its forwards), ``coll_ms`` (in timed collectives) and ``total_ms`` (its
        step time), each the mean over the bucket's ``n`` steps of the rank (a step without
        a phase's time counts 0 for it); ``step_max``: the steps up to it.
        """
        level = source_level(width)
        rows = self._backend.snapshot(
            lambda db: db.rows(*_phases_query(db, run, level, width, step_max))
        )
        sums = tuple(PHASE_SUMS.values())
        out = _frame(rows, ("rank", "step", "n", *sums))
        out["step"] = out["step"] * width
        per = out["n"].where(out["n"] > 0)
        for col, total in PHASE_SUMS.items():
            out[col] = out[total] / per
        return out[list(PHASE_COLUMNS)]

    def comm(self, run: str, width: int, step_max: int | None = None) -> pd.DataFrame:
        """The timed collectives per bucket of ``width`` steps, op, size bucket and group.

        Columns :data:`COMM_COLUMNS`: ``step`` is the bucket's first step, ``steps`` how many
        steps of it made such calls, ``calls`` and ``msg_bytes`` one rank's (every rank's
        alike), ``wire_ms`` the sum over those steps of the least time a rank spent in them,
        ``max_ms`` of the most (see :mod:`dsmon.store.ranks.sql`). A size bucket or group
        size of -1 is unknown.
        """
        query = sql.comm_read(self._backend.dialect, width, step_max)
        rows = self._backend.snapshot(lambda db: db.rows(query, (run,)))
        out = _frame(rows, COMM_COLUMNS)
        out["step"] = out["step"] * width
        return out

    def last_heartbeats(self, run: str, step_max: int | None = None) -> list[HeartbeatRecord]:
        """Each rank's newest heartbeat (by time, then line), in rank order.

        ``step_max`` (a replay position): of the heartbeats that name a step up to it, those
        of the newest step each rank was in.
        """
        params: tuple[object, ...] = (run,) if step_max is None else (step_max, run)
        query = sql.BEAT_BODIES if step_max is None else sql.BEAT_BODIES_UPTO
        rows = self._backend.snapshot(lambda db: db.rows(query, params))
        beats = [row_record(body) for _, body in rows]
        return [b for b in beats if isinstance(b, HeartbeatRecord)]


def _new_probe_records(db: Db, added: Added) -> list[Any]:
    """The rows :func:`dsmon.store.ranks.sql.new_probe_records` reads, in hand if they are."""
    steps, beats = added.of_kind("rank_step"), added.of_kind("heartbeat")
    if steps is None or beats is None:
        return db.rows(sql.new_probe_records(db.dialect), (added.after_id,))
    first, decoded = added.first_id, added.decoded
    found: list[tuple[Any, ...]] = [
        ("rank_step", r[RUN_AT], r[STEP_AT], r[RANK_AT], i, r[TS_AT], r[LINE_AT],
         _step_line(decoded, i - first, r[BODY_AT]))
        for i, r in steps
        if r[RANK_AT] is not None and r[STEP_AT] is not None
    ]  # fmt: skip
    found += [
        ("heartbeat", r[RUN_AT], r[STEP_AT], r[RANK_AT], i, r[TS_AT], r[LINE_AT], None)
        for i, r in beats
        if r[RANK_AT] is not None and r[TS_AT] is not None
    ]
    return found  # by kind, each in id order: probe_rows keeps the kinds apart


def _step_line(decoded: Mapping[int, Any], index: int, body: str) -> Any:
    """A ``rank_step``'s line as the server decoded it, where that reads as its body; or the body.

    The decoded line has the record's defaults where the body's reader has None for a field
    left out: they differ only in a collective's ``calls`` (0), so a line with a collective of
    0 calls is read from its body.
    """
    line = decoded.get(index)
    if line is None:
        return body
    for c in line.collectives:
        if c.calls == 0:
            return body
    return line


def _busy_query(
    db: Db, run: str, level: int | None, width: int, step_max: int | None
) -> tuple[str, tuple[str, ...]]:
    """:func:`dsmon.store.ranks.sql.busy_read` and its parameters."""
    query, n_params = sql.busy_read(db.dialect, level, width, step_max)
    return query, (run,) * n_params


def _phases_query(
    db: Db, run: str, level: int | None, width: int, step_max: int | None
) -> tuple[str, tuple[str, ...]]:
    """:func:`dsmon.store.ranks.sql.phases_read` and its parameters."""
    query, n_params = sql.phases_read(db.dialect, level, width, step_max)
    return query, (run,) * n_params


#: How :mod:`dsmon.store.blocks` packs a ``rank_step_stats`` row: its time as a time, the
#: rest as floats (as :func:`_frame` reads them).
_STAT_KINDS = "".join(blocks.TIME if c == "ts" else blocks.FLOAT for c in STAT_COLUMNS)


def _steps_by_run(touched: Sequence[tuple[str, int]]) -> dict[str, list[int]]:
    """The steps of each run, in the order of ``touched``."""
    by_run: dict[str, list[int]] = {}
    for run, step in touched:
        by_run.setdefault(run, []).append(int(step))
    return by_run


def _update_stats(db: Db, touched: dict[str, list[int]]) -> None:
    """Recompute the ``rank_step_stats`` rows of the steps a write touched, many a statement."""
    for run, steps in touched.items():
        start = 0
        for size in sql.STATS_STEPS:
            query = sql.update_stats(db.dialect, size)
            while len(steps) - start >= size:
                db.execute(query, (run, *steps[start : start + size]))
                start += size


def _repack_stats(db: Db, touched: dict[str, list[int]]) -> None:
    """The packed blocks of the steps a write changed dropped, those it went past packed."""
    for run, steps in touched.items():

        def rows_of(first: int, end: int, run: str = run) -> list[Any]:
            return db.rows(sql.STATS_BLOCK, (run, first, end))

        blocks.repack(db, sql.STAT_BLOCKS, run, steps, rows_of, _STAT_KINDS)


def _all_stats(db: Db, run: str, step_max: int) -> pd.DataFrame:
    """Every step's row up to ``step_max``, in one snapshot: packed blocks, and pages of rows.

    A million steps fetched at once as tuples take gigabytes; a page of them, megabytes; the
    whole blocks before ``step_max``, packed, are unpacked instead of fetched; the parts'
    columns are joined once (:func:`dsmon.store.blocks.joined`).
    """
    parts: list[dict[str, Any]] = []
    after = -1  # the last step read (steps from 0 on)
    for low, data in blocks.packed_blocks(db, sql.STAT_BLOCKS, run, step_max + 1):
        if low <= after:
            continue
        if low > after + 1:
            parts += _stat_pages(db, run, after, low - 1)
        parts.append(_unpacked_stats(data))
        after = low + blocks.BLOCK_STEPS - 1
    parts += _stat_pages(db, run, after, step_max)
    return blocks.joined(parts, STAT_COLUMNS)


def _stat_pages(db: Db, run: str, after: int, upto: int) -> list[dict[str, Any]]:
    """The rows of steps after ``after`` up to ``upto``, a page at a time."""
    parts = []
    while True:
        rows = db.rows(sql.STATS_PAGE, (run, after, upto, STATS_PAGE_ROWS))
        parts.append(_columns(rows, STAT_COLUMNS))
        if len(rows) < STATS_PAGE_ROWS:
            return parts
        after = int(rows[-1][0])


def _unpacked_stats(data: bytes) -> dict[str, Any]:
    """A packed block's columns as :func:`_columns` makes them of fetched rows."""
    cols = dict(zip(STAT_COLUMNS, blocks.unpack(data, _STAT_KINDS), strict=True))
    if isinstance(cols["ts"], list):  # packed as text (times with a zone, say): parsed
        cols["ts"] = _times(cols["ts"])
    return cols


def _times(texts: Sequence[Any]) -> Any:
    """ISO 8601 texts (None: NULL) as pandas reads them: a numpy array when without a zone."""
    import numpy as np
    import pandas as pd

    out = pd.to_datetime(pd.Series(texts, dtype=object), errors="coerce", format="ISO8601")
    return out.to_numpy() if isinstance(out.dtype, np.dtype) else out


def _frame(rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> pd.DataFrame:
    """Rows as a frame of float columns (integers with gaps would become floats anyway)."""
    import pandas as pd

    return pd.DataFrame(_columns(rows, columns), columns=list(columns))


def _columns(rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> dict[str, Any]:
    """Rows as :func:`_frame`'s columns: float arrays, times (``ts``), texts (``op``).

    Column by column, each made an array at once (NULL: NaN): a frame of the rows' tuples
    made numeric afterwards took twice as long as fetching them (a million steps' table).
    """
    import numpy as np
    import pandas as pd

    values = list(zip(*rows, strict=True)) if rows else [()] * len(columns)
    cols: dict[str, Any] = {}
    for col, got in zip(columns, values, strict=True):
        if col == "ts":
            cols[col] = _times(got)
        elif col == "op":
            cols[col] = pd.Series(got, dtype=object).astype(str)
        else:
            cols[col] = np.array(got, dtype=np.float64)
    return cols
