"""The log's event sub-parser: one-line events, and worker tracebacks assembled per rank.

The patterns and the records they make are in :mod:`dsmon.parse.events`; this module holds the
state across lines. Worker tracebacks span many lines, per rank and interleaved, so one is kept
open per rank and becomes one ``traceback`` event, named after its exception line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsmon.model.records import Record
from dsmon.parse.base import NEED_MORE, ParseContext, contains_any
from dsmon.parse.events import (
    EVENT_WORDS,
    INIT_BACKEND,
    LINE_EVENTS,
    TERMINATE,
    WATCHDOG,
    WORK,
    event,
    failure_events,
)
from dsmon.parse.lines import LogLine

_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_EXC_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
_TB_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
#: Lines after an exception line still taken as its message (``Last error:`` ...).
MAX_TAIL = 10
#: Lines a traceback may run without reaching its exception line before it counts as cut.
MAX_TRACEBACK_LINES = 2000


_Key = tuple[bool, int | None]  # (torch ``[rankN]:`` prefix?, rank)


@dataclass(slots=True)
class _Traceback:
    """One traceback being read: frames so far, then its exception line."""

    start: LogLine
    chained: bool = False
    frames: int = 0
    last_frame: tuple[str, int, str] | None = None
    exc: LogLine | None = None
    lines: int = 0
    tail: int = 0
    chain_marker: bool = False


class TracebackAssembler:
    """Turns tracebacks into one ``traceback`` event each, per rank.

    torch prefixes each line of a worker's traceback with ``[rankN]:`` (the cleaner sets
    ``line.traceback`` and ``line.rank``), and ranks' tracebacks interleave, so one is kept open
    per rank; unprefixed tracebacks (older torch, single process) share one key. The event
    is emitted at the exception line, so a live tail shows a crash at once; a chained exception
    (``During handling of ...``) yields a second event with ``chained`` set.
    """

    def __init__(self) -> None:
        self._open: dict[_Key, _Traceback] = {}

    @property
    def open(self) -> bool:
        """A traceback is waiting for its exception line."""
        return any(tb.exc is None for tb in self._open.values())

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Events for a traceback line, [] for a claimed one, None for any other line."""
        if line.ts is not None:
            return None
        key = (line.traceback, line.rank)
        tb = self._open.get(key)
        if line.text.rstrip().endswith(_TB_HEADER):
            if tb is not None and tb.exc is None:
                ctx.cut_block("traceback", tb.start)
            chained = tb is not None and tb.chain_marker
            self._open[key] = _Traceback(start=line, chained=chained)
            return []
        if tb is None:
            if not (line.traceback and _FRAME.match(line.text)):
                return None
            tb = self._open[key] = _Traceback(start=line)  # a fragment without its header
        return self._body(tb, key, line, ctx)

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: a traceback without its exception line is cut."""
        for tb in self._open.values():
            if tb.exc is None:
                ctx.cut_block("traceback", tb.start)
        self._open.clear()
        return []

    def _body(
        self, tb: _Traceback, key: _Key, line: LogLine, ctx: ParseContext
    ) -> list[Record] | None:
        text = line.text
        if text.strip() in _CHAIN_MARKERS:
            tb.chain_marker = True
            return []
        if tb.exc is not None:
            return self._tail(tb, key, line)
        tb.lines += 1
        if text.startswith(" ") or not text.strip():
            m = _FRAME.match(text)
            if m:
                tb.frames += 1
                tb.last_frame = (m.group(1), int(m.group(2)), m.group(3))
            elif tb.lines > MAX_TRACEBACK_LINES:
                ctx.cut_block("traceback", tb.start)
                del self._open[key]
            return []
        tb.exc = line
        return self._emit(tb, line, ctx)

    def _tail(self, tb: _Traceback, key: _Key, line: LogLine) -> list[Record] | None:
        """A line after the exception: more of its message, or the traceback is over."""
        text = line.text
        more = not text.startswith("[") if key[0] else not text.strip()
        if more and tb.tail < MAX_TAIL:
            tb.tail += 1
            return []
        del self._open[key]
        return None

    def _emit(self, tb: _Traceback, line: LogLine, ctx: ParseContext) -> list[Record]:
        text = line.text.strip()
        m = _EXC_TYPE.match(text)
        file, lineno, func = tb.last_frame or (None, None, None)
        detail = {
            "exception": m.group(1) if m else None,
            "frames": tb.frames,
            "file": file,
            "line": lineno,
            "function": func,
            "chained": tb.chained,
            "first_line": tb.start.line,
        }
        out: list[Record] = [event(ctx, line, 0, "traceback", text, detail)]
        return out + failure_events(line, ctx, k0=1)


class EventParser:
    """One-line events plus per-rank traceback assembly.

    ``in_block`` is set while a traceback is open, so its frame lines reach this parser first.
    """

    def __init__(self) -> None:
        self._tracebacks = TracebackAssembler()
        self.in_block = False

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records for one line, or None when the line is no event."""
        recs = self._tracebacks.feed(line, ctx)
        self.in_block = self._tracebacks.open
        if recs is not None:
            return recs
        return self._line_event(line, ctx)

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Tracebacks still open at the end: complete ones are emitted, cut ones counted."""
        recs = self._tracebacks.finish(ctx)
        self.in_block = False
        return recs

    def _line_event(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        text = line.text
        if contains_any(text, EVENT_WORDS) or (
            "Initialize " in text and INIT_BACKEND.search(text) is not None
        ):
            if not ctx.final and TERMINATE.match(text):
                return NEED_MORE  # joined with the next line, kept only if that is ``what():``
            for name, rx, detail in LINE_EVENTS:
                m = rx.search(text)
                if m:
                    return [event(ctx, line, 0, name, text, detail(m))]
        if WATCHDOG in text and WORK.search(text) is None and not ctx.final:
            return NEED_MORE  # terminal-wrapped: the work item continues on the next line
        return failure_events(line, ctx) or None
