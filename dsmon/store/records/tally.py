"""The bookkeeping of a batch whose every row was new, added up from the rows in hand.

After an insert, SQLite's ``run_kinds`` and ``run_sources`` rows were added up by two
statements that read the batch back from ``records`` by its id range (a GROUP BY run, kind
and a DISTINCT run, node, rank): about a microsecond of each record the ingest server
stores. When every row of a batch was new, the ids they got are the ``len(rows)`` numbers
up to the newest, in row order (AUTOINCREMENT numbers the rows of a statement in order, and
the write lock keeps anyone else from taking one), so the same sums come from the rows
themselves. A batch with rows stored before is added up by the statements, as before.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from dsmon.store.records.rows import KIND_AT, RUN_AT, STEP_AT, TS_AT, Row

#: A ``run_kinds`` row: run, kind, n, first ts, last ts, last step, last id.
KindRow = tuple[str, str, int, str | None, str | None, int | None, int]


def kind_rows(rows: Sequence[Row], first_id: int) -> list[KindRow]:
    """Per (run, kind) of ``rows``, stored as ids ``first_id`` on: what ``run_kinds`` adds.

    The same as SQL's ``COUNT(*), MIN(ts), MAX(ts), MAX(step), MAX(id)``: NULLs are skipped,
    and times compare as text (Python compares code points, SQLite UTF-8 bytes: one order).
    """
    acc: dict[tuple[str, str], list[Any]] = {}
    for i, row in enumerate(rows):
        ts, step, key = row[TS_AT], row[STEP_AT], (row[RUN_AT], row[KIND_AT])
        found = acc.get(key)
        if found is None:
            acc[key] = [1, ts, ts, step, i]
            continue
        found[0] += 1
        found[4] = i
        if ts is not None:  # first and last are None together; a log's times mostly grow
            last = found[2]
            if last is None:
                found[1] = found[2] = ts
            elif ts > last:
                found[2] = ts
            elif ts < found[1]:
                found[1] = ts
        if step is not None and (found[3] is None or step > found[3]):
            found[3] = step
    return [
        (run, kind, n, first, last, step, first_id + i)
        for (run, kind), (n, first, last, step, i) in acc.items()
    ]


def source_rows(rows: Sequence[Row]) -> list[tuple[str, str, int]]:
    """The (run, node, rank) of ``rows``, sorted: ``run_sources`` keys ('' and -1: unknown).

    The distinct (run, node, rank) are found in compiled code; only those few are looked at.
    """
    found = set(map(_SOURCE, rows))
    return sorted({(run, node or "", -1 if rank is None else rank) for run, node, rank in found})


_SOURCE = operator.itemgetter(1, 5, 6)  # run, node, rank
