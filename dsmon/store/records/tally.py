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
from collections.abc import Iterable, Sequence
from itertools import compress, groupby, repeat
from operator import is_not
from typing import Any

from dsmon.store.records.rows import RecordRow

#: A ``run_kinds`` row: run, kind, n, first ts, last ts, last step, last id.
KindRow = tuple[str, str, int, str | None, str | None, int | None, int]


def kind_rows(rows: Sequence[RecordRow], first_id: int) -> list[KindRow]:
    """Per (run, kind) of ``rows``, stored as ids ``first_id`` on: what ``run_kinds`` adds.

    The same as SQL's ``COUNT(*), MIN(ts), MAX(ts), MAX(step), MAX(id)``: NULLs are skipped,
    and times compare as text (Python compares code points, SQLite UTF-8 bytes: one order).
    Worked out column by column in compiled code (the rows' indices sorted by (run, kind),
    each group's times and steps picked out by ``map`` and ``compress``), not by a Python
    loop over the rows: that loop cost the ingest server about 3,000 instructions a record.
    """
    key_of = list(map(_RUN_KIND, rows)).__getitem__
    time_of, step_of = list(map(_TS, rows)).__getitem__, list(map(_STEP, rows)).__getitem__
    out: list[KindRow] = []
    for (run, kind), group in groupby(sorted(range(len(rows)), key=key_of), key_of):
        at = list(group)  # in row order: the sort is stable
        ts, steps = _known(map(time_of, at)), _known(map(step_of, at))
        first, last = min(ts, default=None), max(ts, default=None)
        out.append((run, kind, len(at), first, last, max(steps, default=None), first_id + at[-1]))
    return out


def source_rows(rows: Sequence[RecordRow]) -> list[tuple[str, str, int]]:
    """The (run, node, rank) of ``rows``, sorted: ``run_sources`` keys ('' and -1: unknown).

    The distinct (run, node, rank) are found in compiled code; only those few are looked at.
    """
    found = set(map(_SOURCE, rows))
    return sorted({(run, node or "", -1 if rank is None else rank) for run, node, rank in found})


def _known(values: Iterable[Any]) -> list[Any]:
    """The values that are not None (NULL), picked in compiled code."""
    got = list(values)
    return list(compress(got, map(is_not, got, repeat(None))))


_RUN_KIND = operator.itemgetter(1, 2)
_STEP, _TS = operator.itemgetter(3), operator.itemgetter(4)
_SOURCE = operator.itemgetter(1, 5, 6)  # run, node, rank
