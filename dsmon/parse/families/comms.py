"""The comms logger: one line per collective (``verbose``) and the ``log_summary()`` tables.

With ``comms_logger.verbose`` every profiled collective is logged as it completes::

    comm op: all_reduce | [Caller Func: allreduce_bucket] | time (ms): 61.08 | msg size: 3.56 MB |
    algbw (Gbps): 1.01 | busbw (Gbps): 0.50

(the caller part only with ``debug``; before v0.10.1 the line began ``rank=0 | `` and had two spaces
before the pipes after the bandwidths). Each becomes a :class:`~dsmon.model.records.CommOpRecord`.

``deepspeed.comm.log_summary()`` prints a table: a header row, then for each op (``op`` or, with
debug, ``op | [Caller Func: f]``) one row per message size in 20-character columns. Each row becomes a
:class:`~dsmon.model.records.CommSummaryRecord`. ``show_straggler=True`` adds a second table with the
straggler columns. A table ends at the first line that is neither an op line nor a row.

Message sizes are DeepSpeed's rounded 1024-based figures; see :mod:`dsmon.model.units` for how they map
to bytes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsmon.model import units
from dsmon.model.records import CommOpRecord, CommSummaryRecord, Record
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine

_VERBOSE = re.compile(r"^(?:rank=(?P<rank>\d+)\s*\|\s*)?comm op: (?P<rest>.*)$")
_CALLER = re.compile(r"^\[Caller Func: (?P<caller>[^\]]*)\]$")
_HEADER = re.compile(r"^(?P<indent>\s*)Comm\. Op\s+Message Size\s+Count\s+(?P<columns>.*\S)\s*$")
#: One column label after ``Count``: words and a unit in parentheses (``Total Latency(ms)``,
#: ``tput_avg (Gbps)``). A 19-character label leaves one space before the next one.
_COLUMN = re.compile(r"\s*([^()]*?)\s*\(([^()]*)\)")
_OP = re.compile(r"^(?P<op>[A-Za-z_][\w.]*)(?:\s*\|\s*\[Caller Func: (?P<caller>[^\]]*)\])?\s*$")
#: A line shaped like a table row (blank first column) even if its figures do not parse.
_ROWISH = re.compile(r"^ {8,}\S")
_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
_ROW = re.compile(
    r"^\s+(?P<size>\d+(?:\.\d+)?\s?[KMGTPEZY]?B)\s+(?P<count>\d+)\s+(?P<figures>.*?)\s*$"
)
_FIGURE = re.compile(_NUM)
#: Units of a column, per quantity: factor to the record's unit (ms, Gbps).
_TIME_UNITS = {"ms": 1.0, "s": 1000.0, "us": 0.001}
_RATE_UNITS = {"gbps": 1.0, "mbps": 0.001, "tbps": 1000.0}

#: DeepSpeed prints every verbose figure with ``:.2f``: fewer decimals means a cut line.
_TWO_DECIMALS = re.compile(r"\s*(?:[-+]?\d+\.\d\d|[-+]?(?:inf|nan))\s*$")

#: Verbose-line keys, without spaces and in lower case -> CommOpRecord fields and readers.
_OP_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "time(ms)": ("latency_ms", units.parse_float),
    "msgsize": ("msg_size_bytes", units.parse_size_bytes),
    "algbw(gbps)": ("algbw_gbps", units.parse_float),
    "busbw(gbps)": ("busbw_gbps", units.parse_float),
}


def column_field(label: str, unit: str) -> tuple[str, float] | None:
    """The record field a summary-table column fills, and the factor its unit needs.

    Columns are known by meaning, not by their exact label, so the straggler table
    (``Total comm lat(ms)``), the PR variant with ``Total straggler(ms)`` beside ``Total
    Latency(ms)`` and a ``busbw_avg (Gbps)`` all find their field; a unit that is not
    known leaves the column unread.
    """
    words = label.lower().replace("_", " ")
    unit = unit.strip().lower()
    total = "total" in words
    if "straggler" in words:
        field = "total_straggler_ms" if total else "avg_straggler_ms"
    elif "lat" in words:
        field = "total_latency_ms" if total else "avg_latency_ms"
    elif "busbw" in words:
        field = "busbw_avg_gbps"
    elif "tput" in words or "algbw" in words:
        field = "algbw_avg_gbps"
    else:
        return None
    factor = (_TIME_UNITS if field.endswith("_ms") else _RATE_UNITS).get(unit)
    return None if factor is None else (field, factor)


def _bad(ctx: ParseContext, kind: str, line: LogLine, what: str) -> None:
    """Count an unreadable value, naming file, line and field."""
    ctx.diag.note(ctx.diag.unparsed, kind, f"{ctx.where(line)}: field {what!r}", line.text)


class CommsParser:
    """Reads verbose comm-op lines and ``log_summary()`` tables."""

    def __init__(self) -> None:
        self.in_block = False
        self._table = "summary"
        self._columns: list[tuple[str, float] | None] = []
        self._indent = 0
        self._summaries = 0
        self._op: str | None = None
        self._caller: str | None = None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records from one logical line; see :mod:`dsmon.parse.base`."""
        text = line.text
        m = _HEADER.match(text) if "Comm. Op" in text else None
        if m:
            self._start_table(m)
            return []
        if self.in_block:
            out = self._table_line(line, ctx)
            if out is not None:
                return out
            self.in_block = False  # neither an op nor a row: the table is complete
        m = _VERBOSE.match(text)
        if m:
            return self._verbose(m, line, ctx)
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: every row was emitted when read, nothing is pending."""
        self.in_block = False
        return []

    # --- verbose lines ------------------------------------------------------------------

    def _verbose(self, m: re.Match[str], line: LogLine, ctx: ParseContext) -> list[Record]:
        """One ``comm op: NAME | ... | busbw (Gbps): B`` line."""
        parts = [p.strip() for p in m.group("rest").split("|")]
        op, caller, fields = parts[0], None, parts[1:]
        if fields and (c := _CALLER.match(fields[0])):
            caller, fields = c.group("caller"), fields[1:]
        values, complete = self._op_values(fields, line, ctx)
        if not complete and not ctx.final:
            return NEED_MORE  # the line stops before its last field: cut by terminal wrapping
        if not complete and ctx.joined:
            # still cut after joining the next lines: they were no continuation (``): 1`` +
            # ``0.22|...`` would read 10.22); the join is undone and the first line kept alone
            ctx.unparsed(CommOpRecord.KIND, line)
            return []
        if not complete and fields:
            # a cut line's last field may stop mid-number (``time (ms): 1`` of ``1.23``): keep
            # only the fields a separator closed, never a number that may be cut
            values, _ = self._op_values(fields[:-1], line, ctx)
        if not op or values.get("latency_ms") is None:
            ctx.unparsed(CommOpRecord.KIND, line)
            return []
        if not complete:
            _bad(ctx, CommOpRecord.KIND, line, "busbw (Gbps)")  # cut short: keep what is there
        rank = int(m.group("rank")) if m.group("rank") else None
        rec = CommOpRecord(
            src=ctx.src(line, rank=rank), ts=ctx.ts(line), op=op, caller=caller, **values
        )
        return [rec]

    @staticmethod
    def _op_values(
        fields: list[str], line: LogLine, ctx: ParseContext
    ) -> tuple[dict[str, Any], bool]:
        """The named figures of a verbose line, and whether its last one (busbw) was there."""
        values: dict[str, Any] = {}
        complete = False
        for part in fields:
            key, sep, raw = part.partition(":")
            known = _OP_FIELDS.get("".join(key.split()).lower())  # any spacing
            if known is None or not sep:
                continue
            name, parse = known
            value = parse(raw)
            if value is None and raw.strip():
                _bad(ctx, CommOpRecord.KIND, line, key.strip())
            values[name] = value
            complete = complete or (name == "busbw_gbps" and _TWO_DECIMALS.match(raw) is not None)
        return values, complete

    # --- summary tables -----------------------------------------------------------------

    def _start_table(self, header: re.Match[str]) -> None:
        """A table header: ``summary`` tables are counted, a straggler one joins the last.

        The columns after ``Count`` are read from the header itself, and its indentation
        (a table pasted into notes) is taken off the rows.
        """
        columns = header.group("columns")
        kind = "straggler" if "comm lat" in columns.lower() else "summary"
        if kind == "summary":
            self._summaries += 1
        self._table = kind
        self._columns = [column_field(label, unit) for label, unit in _COLUMN.findall(columns)]
        self._indent = len(header.group("indent"))
        self._op = self._caller = None
        self.in_block = True

    def _table_line(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """An op line or a row of the current table; None for anything else."""
        if line.ts is not None:
            return None
        text = line.text
        if self._indent and text[: self._indent].isspace():
            text = text[self._indent :]
        m = _ROW.match(text)
        if m:
            return self._row(m, line, ctx)
        m = _OP.match(text)
        if m:
            self._op, self._caller = m.group("op"), m.group("caller")
            return []
        if _ROWISH.match(text):
            ctx.unparsed(CommSummaryRecord.KIND, line)  # a row, but unreadable: skip it
            return []
        return None

    def _row(self, m: re.Match[str], line: LogLine, ctx: ParseContext) -> list[Record]:
        """One message-size row under the current op."""
        kind = CommSummaryRecord.KIND
        if self._op is None:
            _bad(ctx, kind, line, "op")
            return []
        figures = self._figures(m.group("figures"))
        if figures is None:
            _bad(ctx, kind, line, "figures")
            return []
        size = units.parse_size_bytes(m.group("size"))
        rec = CommSummaryRecord(
            src=ctx.src(line),
            ts=ctx.ts(line),
            table=self._table,
            table_index=max(self._summaries - 1, 0),
            op=self._op,
            caller=self._caller,
            msg_size_bytes=size,
            count=int(m.group("count")),
            **figures,
        )
        return [rec]

    def _figures(self, text: str) -> dict[str, Any] | None:
        """The row's figures by the header's columns; None if they do not match one to one."""
        values = text.split()
        if len(values) != len(self._columns) or not all(_FIGURE.fullmatch(v) for v in values):
            return None
        out: dict[str, Any] = {}
        for column, value in zip(self._columns, values, strict=True):
            if column is not None:
                number = units.parse_float(value)
                out[column[0]] = None if number is None else number * column[1]
        return out
