"""The timer tables' rows of a write's timer records, made in Python from their bodies.

Each body is decoded once, by msgspec in compiled code, for the two fields the tables keep
(``group`` and ``values_ms``); the step and rank come from the record's columns, which a
restamp fills in (:mod:`dsmon.store.timers.sql`). A timer a line lacks is NULL, as the
breakdown has it NaN.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from dsmon.store.timers.sql import GLOBAL, NO_RANK, TABLES


class _TimerBody(msgspec.Struct, gc=False):
    """What the tables read of a timer record's body (other fields skipped)."""

    group: Any = None
    values_ms: dict[str, Any] | None = None


class _TypedBody(msgspec.Struct, gc=False):
    """The same, typed as a checked record's body is: a name, and every timer a number.

    A JSON integer is read as a float, as a float column holds it. A body that is not of
    this form (a timer ``null``) is read again as :class:`_TimerBody`, field by field.
    """

    group: str | None = None
    values_ms: dict[str, float] | None = None


_decode = msgspec.json.Decoder(_TimerBody).decode
#: A body as stored (a tuple: ``str | bytes | memoryview`` in the loop builds that union anew
#: for every timer record a write takes in).
_STORED = (str, bytes, memoryview)
_decode_typed = msgspec.json.Decoder(_TypedBody).decode


@dataclasses.dataclass
class TimerRows:
    """What some timer records bring to the timer tables."""

    #: Per group of :data:`dsmon.store.timers.sql.TABLES`: its table's rows (run, step, rank,
    #: id, timers...), in id order.
    steps: dict[str, list[tuple[Any, ...]]] = dataclasses.field(default_factory=dict)
    #: ``timer_names`` rows (run, group, name), each once; name "" for each group seen.
    names: set[tuple[str, str, str]] = dataclasses.field(default_factory=set)
    #: ``timer_unplaced`` rows (run, id): global timer records without a step.
    unplaced: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    #: (run, id) of the records placed: none of them is unplaced any more.
    placed: list[tuple[str, int]] = dataclasses.field(default_factory=list)

    def touched(self) -> dict[str, list[int]]:
        """The steps of each run whose rows these change.

        A write's rows are nearly always of one run: their steps are then taken in compiled
        code, not row by row.
        """
        out: dict[str, list[int]] = {}
        for rows in self.steps.values():
            runs = set(map(_RUN, rows))
            if len(runs) == 1:
                out.setdefault(runs.pop(), []).extend(map(_STEP, rows))
                continue
            for row in rows:
                out.setdefault(row[0], []).append(row[1])
        return out


_RUN, _STEP = operator.itemgetter(0), operator.itemgetter(1)


def timer_rows(records: Iterable[Sequence[Any]], placed: bool = True) -> TimerRows:
    """The rows of ``records``: (id, run, step, rank, body) each, in id order.

    A body is the stored JSON, or the line as the ingest server decoded and checked it
    (:mod:`dsmon.model.wire_types`: ``group`` a string, ``values_ms`` floats).
    ``placed``: note the records placed (:attr:`TimerRows.placed`); records never stored
    before were never unplaced, and need not be.

    Per record, only what differs from one to the next is done in Python: the names a
    group printed are gathered per (run, group) as sets of its timers' names, and a row's
    timers are looked up in one ``map``.
    """
    out = TimerRows()
    names: dict[tuple[str, str], set[str]] = {}
    for rec_id, run, step, rank, body in records:
        if isinstance(body, _STORED):
            raw = body if isinstance(body, bytes | str) else bytes(body)
            try:
                typed = _decode_typed(raw)
                group, values, floats = typed.group, typed.values_ms or {}, True
            except msgspec.ValidationError:
                decoded = _decode(raw)
                group = decoded.group if isinstance(decoded.group, str) else None
                values, floats = decoded.values_ms or {}, False
        else:  # a checked timer line as the server decoded it: a name, every timer a float
            group, values, floats = body.group, body.values_ms or {}, True
        if group is None:
            continue
        seen = names.get((run, group))
        if seen is None:
            seen = names[(run, group)] = {""}  # "": the group printed a line
        seen.update(values)
        table = TABLES.get(group)
        if table is None:
            continue
        if step is None:
            if group == GLOBAL:
                out.unplaced.append((run, rec_id))
            continue
        if rank is None:
            rank = NO_RANK
        if floats:
            row = (run, step, rank, rec_id, *map(values.get, table[1]))
        else:
            row = (run, step, rank, rec_id, *(_ms(values, t) for t in table[1]))
        got = out.steps.get(group)
        if got is None:
            out.steps[group] = [row]
        else:
            got.append(row)
        if placed:
            out.placed.append((run, rec_id))
    out.names = {(run, group, name) for (run, group), seen in names.items() for name in seen}
    return out


def _ms(values: dict[str, Any], timer: str) -> float | None:
    """One timer's value as a float column holds it (None: the line lacks it)."""
    value = values.get(timer)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
