"""Lines dsmon could not read, told as records: what the Health page shows of a parse's losses.

``Diagnostics`` counts unparsed lines by kind, but only ``dsmon parse`` and ``dsmon import``
print it; a live collector and the dashboard would never know that every iteration line of a
run went unread. So the log parser turns the counts into :class:`EventRecord` s named
:data:`UNPARSED` that travel and are stored like any record: one when a kind's first line is
counted (with that line as the example), again each time its count gains a digit (10, 100,
...), and the final count when the input ends. The newest event of a kind holds its count.
"""

from __future__ import annotations

from dsmon.model.records import EventRecord, Record
from dsmon.parse.base import OUT_OF_RANGE, ParseContext
from dsmon.parse.lines import LogLine

#: The event's name (``records.EVENT_NAMES``).
UNPARSED = "unparsed"
#: Kinds counted as unparsed that lose no fact: a timestamp that names no moment is dropped,
#: and the line's record is kept without it.
NOT_LOST = frozenset({"timestamp"})
#: ``src.sub`` of these events: after every record a line can make (``k`` counts up from 0).
_SUB_TOLD, _SUB_FINAL = 900, 950


class UnparsedReport:
    """Turns a parser's unparsed counts into events, each kind's as its count grows."""

    def __init__(self) -> None:
        self._told: dict[str, int] = {}
        self._order: dict[str, int] = {}

    def events(self, ctx: ParseContext, line: LogLine, final: bool = False) -> list[Record]:
        """Events for the kinds whose count gained a digit since last told (any gain if final).

        ``line`` is the line just read (the last one, at the end): the events' place in the
        log, so each is stored apart from the others of its kind.
        """
        out: list[Record] = []
        for kind, count in ctx.diag.unparsed.items():
            told = self._told.get(kind, 0)
            if kind in NOT_LOST or count <= told:
                continue
            if not final and len(str(count)) == len(str(told)) and told > 0:
                continue
            self._told[kind] = count
            order = self._order.setdefault(kind, len(self._order))
            out.append(self._event(ctx, line, kind, count, order, final))
        return out

    @staticmethod
    def _event(
        ctx: ParseContext, line: LogLine, kind: str, count: int, order: int, final: bool
    ) -> EventRecord:
        examples = ctx.diag.examples.get(kind, [])
        first = examples[0] if examples else ""
        k = (_SUB_FINAL if final else _SUB_TOLD) + order
        return EventRecord(
            src=ctx.src(line, k),
            ts=ctx.ts(line),
            name=UNPARSED,
            message=_message(kind, count, first),
            detail={"kind": kind, "count": count, "first": first},
        )


def _message(kind: str, count: int, first: str) -> str:
    """What the event says: lines not read, or values read but left out of their records."""
    if kind == OUT_OF_RANGE:
        return f"{count} value(s) out of range left out of their records; the first: {first}"
    return f"{count} {kind} line(s) not read; the first: {first}"
