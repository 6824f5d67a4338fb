"""The timer tables' rows of a write's timer records, made in Python from their bodies.

Each body is decoded once, by msgspec in compiled code, for the two fields the tables keep
(``group`` and ``values_ms``); the step and rank come from the record's columns, which a
restamp fills in (:mod:`dsmon.store.timers.sql`). A timer a line lacks is NULL, as the
breakdown has it NaN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from dsmon.store.timers.sql import GLOBAL, NO_RANK, TABLES


class _TimerBody(msgspec.Struct, gc=False):
    """What the tables read of a timer record's body (other fields skipped)."""

    group: Any = None
    values_ms: dict[str, Any] | None = None


_decode = msgspec.json.Decoder(_TimerBody).decode


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
        """The steps of each run whose rows these change."""
        out: dict[str, list[int]] = {}
        for rows in self.steps.values():
            for row in rows:
                out.setdefault(row[0], []).append(row[1])
        return out


def timer_rows(records: Iterable[Sequence[Any]]) -> TimerRows:
    """The rows of ``records``: (id, run, step, rank, body) each, in id order."""
    out = TimerRows()
    for rec_id, run, step, rank, body in records:
        decoded = _decode(body if isinstance(body, bytes | str) else bytes(body))
        group = decoded.group if isinstance(decoded.group, str) else None
        values = decoded.values_ms or {}
        if group is not None:  # "": the group printed a line (with or without timers)
            out.names.update((run, group, name) for name in ("", *values))
        table = TABLES.get(group) if group is not None else None
        if table is None:
            continue
        if step is None:
            if group == GLOBAL:
                out.unplaced.append((run, rec_id))
            continue
        row = (run, step, NO_RANK if rank is None else rank, rec_id)
        out.steps.setdefault(str(group), []).append(row + tuple(_ms(values, t) for t in table[1]))
        out.placed.append((run, rec_id))
    return out


def _ms(values: dict[str, Any], timer: str) -> float | None:
    """One timer's value as a float column holds it (None: the line lacks it)."""
    value = values.get(timer)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
