"""The timer tables, kept as timer records arrive, so no checklist folds every timer record.

A run of a million steps with ``wall_clock_breakdown`` stores three million timer records.
The health checklist reads them as the step breakdown (one row per step and rank), and
folding the records into it cost a first look most of its time, growing with the run: 70 s
for the first reader of a million steps, against 9 s at 100k (``bench/README.md``). So every
write brings its timer records into the tables of :mod:`dsmon.store.timers.sql`, in its own
transaction, and a reader asks for those rows: one per step and rank, a few numbers each.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dsmon.store import blocks
from dsmon.store.backend import Backend, Db
from dsmon.store.records.added import Added
from dsmon.store.records.rows import BODY_AT, RANK_AT, RUN_AT, STEP_AT
from dsmon.store.timers import sql
from dsmon.store.timers.rows import TimerRows, timer_rows

if TYPE_CHECKING:  # pandas loads with the first read: the stores' writers never need it
    import pandas as pd

#: Breakdown rows read per query.
PAGE_ROWS = 50_000
#: How :mod:`dsmon.store.blocks` packs a block's rows (:data:`sql.READ_COLUMNS`).
_KINDS = blocks.INT * 3 + blocks.FLOAT * (len(sql.READ_COLUMNS) - 3)
#: Keys of stored records asked for per query (a restamp's records).
KEYS_PER_QUERY = 500


class TimerTables:
    """The timer tables of a store: a write's share, and what the checklist reads."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @staticmethod
    def update(db: Db, added: Added) -> None:
        """Bring the timer records a write ``added`` in; a batch without any costs nothing.

        New records were never unplaced: only a restamp's can leave ``timer_unplaced``.
        """
        if sql.TIMER_KIND not in added.kinds:
            return
        found = added.of_kind(sql.TIMER_KIND)
        if found is None:
            records = db.rows(sql.new_timer_records(db.dialect), (added.after_id,))
        else:  # as new_timer_records reads them; a line the server decoded, as it decoded it
            first, get = added.first_id, added.decoded.get
            records = [
                (i, r[RUN_AT], r[STEP_AT], r[RANK_AT], get(i - first, r[BODY_AT])) for i, r in found
            ]
        _write(db, timer_rows(records, placed=False), placed=False)

    @staticmethod
    def restamped(db: Db, keys: Sequence[bytes]) -> None:
        """Place the stored timer records of ``keys`` that have a step now.

        A write calls it with the keys of its timer records that have a step but were stored
        before: a restamp (the step filled in now) is placed here; a record sent twice
        changes nothing (its own id, or a newer one, holds its step and rank already).
        """
        for start in range(0, len(keys), KEYS_PER_QUERY):
            part = keys[start : start + KEYS_PER_QUERY]
            _write(db, timer_rows(db.rows(sql.stored_timer_records(len(part)), part)))

    def names(self, run: str) -> dict[str, set[str]]:
        """The timer names each group of ``run`` printed, in any of its records.

        Each group the run printed a line of holds "" too (a line may hold no timer).
        """
        rows = self._backend.read(lambda db: db.rows(sql.NAMES, (run,)))
        out: dict[str, set[str]] = {}
        for group, name in rows:
            out.setdefault(str(group), set()).add(str(name))
        return out

    def placed(self, run: str) -> bool:
        """Whether every global timer record of ``run`` has a step (the tables hold them all)."""
        return not self._backend.read(lambda db: db.rows(sql.ANY_UNPLACED, (run,)))

    def last_id(self, run: str) -> int:
        """The newest record id the tables took in for ``run`` (0: none)."""
        found = self._backend.read(lambda db: db.rows(sql.LAST_ID, (run, run)))
        return int(found[0][0] or 0) if found else 0

    def changed_from(self, run: str, after_id: int) -> int | None:
        """The lowest step a record after ``after_id`` changed (None: none changed)."""
        params = (run, after_id, run, after_id)
        found = self._backend.read(lambda db: db.rows(sql.CHANGED_FROM, params))
        return None if not found or found[0][0] is None else int(found[0][0])

    def rows(self, run: str, step_min: int | None = None) -> pd.DataFrame:
        """The breakdown's rows from ``step_min`` on (all: None), in step and rank order.

        Columns :data:`dsmon.store.timers.sql.READ_COLUMNS`: each (step, rank) of a global
        timer line with its newest record's ``id``, its phase timers, and the ZeRO
        optimizer's timers of the same step and rank (NaN without such a line). The whole
        run is read from its packed blocks and the rows between them; ``step_min`` (a live
        reader's changed steps) from the rows. Read a page at a time in one snapshot: a
        million steps fetched at once as tuples take gigabytes.
        """
        if step_min is not None:
            return self._backend.snapshot(lambda db: _joined(_pages(db, run, step_min, _END)))
        return self._backend.snapshot(lambda db: _joined(_whole(db, run)))


#: A step past every step.
_END = 2**62


def _write(db: Db, made: TimerRows, placed: bool = True) -> None:
    """Upsert what ``made`` holds into the tables; pack the blocks the run went past.

    ``placed``: take the placed records out of ``timer_unplaced`` (records stored before).
    """
    for group, rows in made.steps.items():
        db.insert_many(sql.upsert(group), rows)
    if made.names:
        db.insert_many(sql.INSERT_NAMES, sorted(made.names))
    if made.unplaced:
        db.insert_many(sql.INSERT_UNPLACED, made.unplaced)
    if placed and made.placed:
        db.execute_many(sql.DELETE_UNPLACED, made.placed)
    for run, steps in made.touched().items():
        rows_of = functools.partial(_block_rows, db, run)
        blocks.repack(db, sql.BLOCKS_TABLE, run, steps, rows_of, _KINDS)


def _block_rows(db: Db, run: str, first: int, end: int) -> list[Any]:
    """The rows of steps ``first`` to ``end`` (not included), to pack them."""
    return db.rows(sql.PAGE, (run, first - 1, sql.NO_RANK, end, _END))


def _whole(db: Db, run: str) -> list[dict[str, Any]]:
    """Every row of ``run``: its packed blocks, and the rows before, between and after them."""
    parts: list[dict[str, Any]] = []
    start = -_END  # the first step not read yet
    for low, data in blocks.packed_blocks(db, sql.BLOCKS_TABLE, run, _END):
        if low > start:
            parts += _pages(db, run, start, low)
        parts.append(dict(zip(sql.READ_COLUMNS, blocks.unpack(data, _KINDS), strict=True)))
        start = low + blocks.BLOCK_STEPS
    return parts + _pages(db, run, start, _END)


def _pages(db: Db, run: str, step_min: int, step_end: int) -> list[dict[str, Any]]:
    """The rows of steps ``step_min`` to ``step_end`` (not included), a page at a time."""
    parts: list[dict[str, Any]] = []
    after: tuple[int, int] = (step_min - 1, sql.NO_RANK)
    while True:
        rows = db.rows(sql.PAGE, (run, *after, step_end, PAGE_ROWS))
        if rows:
            parts.append(_columns(rows))
        if len(rows) < PAGE_ROWS:
            return parts
        after = (int(rows[-1][0]), int(rows[-1][1]))


def _joined(parts: list[dict[str, Any]]) -> pd.DataFrame:
    """The parts' rows as one frame (:func:`dsmon.store.blocks.joined`; none: no rows)."""
    return blocks.joined(parts or [_columns([])], sql.READ_COLUMNS)


def _columns(rows: list[Any]) -> dict[str, Any]:
    """Rows of :data:`sql.READ_COLUMNS` as columns: integer keys, float timers (NULL: NaN)."""
    import numpy as np

    keys = np.array([r[:3] for r in rows], dtype=np.int64).reshape(len(rows), 3)
    values = np.array([r[3:] for r in rows], dtype=np.float64)
    values = values.reshape(len(rows), len(sql.READ_COLUMNS) - 3)
    cols: dict[str, Any] = {name: keys[:, i] for i, name in enumerate(sql.READ_COLUMNS[:3])}
    for i, name in enumerate(sql.READ_COLUMNS[3:]):
        cols[name] = values[:, i]
    return cols
