"""The query every read of the records shares: a run, a kind, step, time and id ranges."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar


def _iso(value: str | datetime | None) -> str | None:
    """Timestamps compare as the ISO strings records carry (millisecond precision, no zone)."""
    if value is None or isinstance(value, str):
        return value
    return value.replace(tzinfo=None).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """The query every read shares: one run, optionally one kind, step/time/id ranges.

    Ranges are inclusive; ``after_id`` is exclusive (records newer than one already seen).
    """

    run: str
    kind: str | None = None
    step_min: int | None = None
    step_max: int | None = None
    ts_min: str | datetime | None = None
    ts_max: str | datetime | None = None
    after_id: int | None = None
    limit: int | None = None

    def whole_kind(self) -> bool:
        """Whether this reads a kind's records by id alone (no step or time range)."""
        ranges = (self.step_min, self.step_max, self.ts_min, self.ts_max)
        return self.kind is not None and all(v is None for v in ranges)

    def where(self, ph: str = "?") -> tuple[str, list[Any]]:
        """The SQL WHERE clause and its parameters, with ``ph`` as the placeholder."""
        conds: list[tuple[str, Any]] = [("run = {}", self.run)]
        optional = (
            ("kind = {}", self.kind),
            ("step >= {}", self.step_min),
            ("step <= {}", self.step_max),
            ("ts >= {}", _iso(self.ts_min)),
            ("ts <= {}", _iso(self.ts_max)),
            ("id > {}", self.after_id),
        )
        conds += [(sql, v) for sql, v in optional if v is not None]
        return " AND ".join(sql.format(ph) for sql, _ in conds), [v for _, v in conds]

    def select(self, ph: str = "?", body: str = "body") -> tuple[str, list[Any]]:
        """``SELECT id, <body>`` of the matching records-table rows in id order, and parameters.

        ``body``: the SQL the body is read as (``CAST(body AS BLOB)`` for its bytes).
        """
        where, params = self.where(ph)
        sql = f"SELECT id, {body} FROM records WHERE {where} ORDER BY id"
        if self.limit is not None:
            sql += f" LIMIT {ph}"
            params.append(self.limit)
        return sql, params


T = TypeVar("T")


def paged(
    select: Callable[[RecordFilter], list[tuple[int, T]]], run: str, kind: str, chunk: int
) -> Iterator[T]:
    """What ``select`` gives for every row of one kind of a run, ``chunk`` rows a query.

    For passes over a whole big run that must not hold it all: each query starts after the
    last id the one before gave.
    """
    after = 0
    while True:
        rows = select(RecordFilter(run, kind, after_id=after, limit=chunk))
        for _, item in rows:
            yield item
        if len(rows) < chunk:
            return
        after = rows[-1][0]
