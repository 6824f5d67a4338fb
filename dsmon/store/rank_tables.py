"""Per-rank summaries kept as records arrive, so no page reads a run's every ``rank_step``.

``dsmon run``'s probe writes a ``rank_step`` record per rank and optimizer step and about a
heartbeat per rank and second: 6.4 million of the first at 100k steps of 64 ranks, 5.5 million
of the second in a day. The Steps page, the ``ranks.*`` rules and Compare read those kinds as
per-step figures (the straggler score, the step's wall time), each rank's busy time in step
buckets, and each rank's newest heartbeat; reading the records to compute them took 15 s and
gigabytes on a first look. So every write folds what it stored into the tables of
:mod:`dsmon.store.rank_sql`, in its own transaction, and a reader asks for those tables: about
one row per step, a few thousand roll-up rows, one row per rank.

A store an older dsmon wrote has its tables built from its records by its first writer (the
same statements, over every id). A reader of such a store, before any writer, gets None and
computes from the records as before (:mod:`dsmon.view.rank_views`, :mod:`dsmon.health.gather`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from dsmon.model.records import HeartbeatRecord
from dsmon.store import rank_sql
from dsmon.store.gpu_sql import Dialect
from dsmon.store.rank_sql import BUSY_LEVELS, STAT_COLUMNS

if TYPE_CHECKING:  # pandas loads with the first read: the stores' writers never need it
    import pandas as pd

    from dsmon.store.gpu_tables import GpuTables

T = TypeVar("T")
#: The kinds folded here.
RANK_KINDS = frozenset({"rank_step", "heartbeat"})
#: Steps read per query by a first :meth:`RankReads.rank_step_stats`.
STATS_PAGE_ROWS = 50_000
#: A step no run reaches: "every step".
LAST_STEP = 2**62
#: Columns of :meth:`RankReads.rank_busy`.
BUSY_COLUMNS = ("rank", "step", "n", "busy_ms", "min_ms", "max_ms")


@functools.cache
def _fold_sql(d: Dialect, kind: str) -> tuple[str, ...]:
    if kind == "heartbeat":
        return (rank_sql.fold_beats(d), rank_sql.fold_beats(d, "rank_beat_steps"))
    return (
        rank_sql.fold_steps(d),
        rank_sql.fold_stats(d),
        *(rank_sql.fold_busy(d, w) for w in BUSY_LEVELS),
    )


def create(tables: GpuTables) -> None:
    """The per-rank tables, in a new store or one an older dsmon wrote (no rows)."""
    for stmt in rank_sql.ddl(tables.DIALECT):
        tables.execute(stmt)


def fold(tables: GpuTables, after_id: int, kinds: Collection[str]) -> None:
    """Fold the records stored after ``after_id`` (this transaction's) into the tables.

    ``kinds``: the kinds the write stored; a batch without probe records costs nothing here.
    ``after_id`` 0 builds the tables from every record (an older store's first write).
    """
    for kind in sorted(RANK_KINDS.intersection(kinds)):
        for stmt in _fold_sql(tables.DIALECT, kind):
            tables.execute(stmt, (after_id,))


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


class RankReads:
    """The per-rank tables' reads (mixed into ``dsmon.store.base.Store``).

    A backend with the tables answers :meth:`_on_ranks`; one without (or an older store no
    writer has upgraded yet) answers None, and the callers compute from the records.
    """

    def _on_ranks(self, fn: Callable[[GpuTables], T]) -> T | None:
        """``fn`` of the tables on the store's connection; None when the store has none."""
        return None

    def rank_step_stats(
        self, run: str, after_id: int = 0, step_max: int | None = None
    ) -> pd.DataFrame | None:
        """One row per step of ``rank_step_stats`` changed after ``after_id``, in step order.

        Columns :data:`dsmon.store.rank_sql.STAT_COLUMNS` (``id``: the newest record folded
        in, what a live reader passes as ``after_id`` next). Without ``after_id``,
        ``step_max`` keeps the steps up to it (a replay position). None: no per-rank tables.
        """
        if after_id:
            rows = self._on_ranks(lambda t: t.rows(rank_sql.STATS_SINCE, (run, after_id)))
            if rows is None:
                return None
            return _frame(rows, STAT_COLUMNS).sort_values("step").reset_index(drop=True)
        upto = LAST_STEP if step_max is None else step_max
        return self._on_ranks(lambda t: _all_stats(t, run, upto))

    def rank_busy(self, run: str, width: int, step_max: int | None = None) -> pd.DataFrame | None:
        """Each rank's busy time per bucket of ``width`` steps: :data:`BUSY_COLUMNS`.

        ``step`` is the bucket's first step, ``busy_ms`` the mean over its steps, ``n`` how
        many steps of the rank it holds; ``step_max``: the steps up to it. None: no tables.
        """
        level = source_level(width)
        rows = self._on_ranks(lambda t: t.rows(*_busy_query(t, run, level, width, step_max)))
        if rows is None:
            return None
        out = _frame(rows, ("rank", "step", "n", "sum_ms", "min_ms", "max_ms"))
        out["step"] = out["step"] * width
        out["busy_ms"] = out["sum_ms"] / out["n"].where(out["n"] > 0)
        return out[list(BUSY_COLUMNS)]

    def last_heartbeats(
        self, run: str, step_max: int | None = None
    ) -> list[HeartbeatRecord] | None:
        """Each rank's newest heartbeat (by time, then line), in rank order. None: no tables.

        ``step_max`` (a replay position): of the heartbeats that name a step up to it, those
        of the newest step each rank was in.
        """
        from dsmon.store.base import row_record

        params: tuple[object, ...] = (run,) if step_max is None else (step_max, run)
        sql = rank_sql.BEAT_BODIES if step_max is None else rank_sql.BEAT_BODIES_UPTO
        rows = self._on_ranks(lambda t: t.rows(sql, params))
        if rows is None:
            return None
        beats = [row_record(body) for _, body in rows]
        return [b for b in beats if isinstance(b, HeartbeatRecord)]


def _busy_query(
    tables: GpuTables, run: str, level: int | None, width: int, step_max: int | None
) -> tuple[str, tuple[str, ...]]:
    """:func:`dsmon.store.rank_sql.busy_read` and its parameters."""
    sql, n_params = rank_sql.busy_read(tables.DIALECT, level, width, step_max)
    return sql, (run,) * n_params


def _all_stats(tables: GpuTables, run: str, step_max: int) -> pd.DataFrame:
    """Every step's row, read a page at a time in one snapshot.

    A million steps fetched at once as tuples take gigabytes; a page of them, megabytes.
    """
    import pandas as pd

    parts, after = [], -1
    while True:
        rows = tables.rows(rank_sql.STATS_PAGE, (run, after, step_max, STATS_PAGE_ROWS))
        parts.append(_frame(rows, STAT_COLUMNS))
        if len(rows) < STATS_PAGE_ROWS:
            return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        after = int(rows[-1][0])


def _frame(rows: Sequence[Sequence[Any]], columns: Sequence[str]) -> pd.DataFrame:
    """Rows as a frame of float columns (integers with gaps would become floats anyway)."""
    import pandas as pd

    frame = pd.DataFrame([tuple(r) for r in rows], columns=list(columns))
    for col in columns:
        if col == "ts":
            frame[col] = pd.to_datetime(frame[col], errors="coerce", format="ISO8601")
        else:
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    return frame
