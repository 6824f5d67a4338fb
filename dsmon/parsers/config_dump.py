"""The startup config dump: the effective DeepSpeed configuration and the user's JSON, from a log.

Rank 0 prints ``DeepSpeedEngine configuration:``, one ``  name ...... value`` line per attribute
(the value as Python ``str()``: scalars, ``k=v k=v`` pydantic reprs, dict reprs, multi-line JSON
closed by ``}`` at column 0, ``<... object at 0x...>``), then ``  json = {`` and the user's dict as
multi-line JSON. This is the only place a log tells what DeepSpeed actually ran with (defaults
applied, batch sizes resolved), so the health checks read it. A dump cut short yields nothing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from dsmon.parsers.base import ParseContext
from dsmon.parsers.lines import LogLine
from dsmon.parsers.pyrepr import parse_value
from dsmon.records import ConfigRecord, Record

_HEADER = "DeepSpeedEngine configuration:"
# "  {name} {dots} {value}": dots fill the name to column 29; 29+ chars get none (two spaces).
_ATTR = re.compile(r"^  ([A-Za-z_]\w*) \.*(?: (.*))?$")
_USER_JSON = re.compile(r"^  json = (.*)$")
#: Lines of other processes tolerated inside a dump before it is given up as cut.
MAX_FOREIGN = 200
#: Continuation lines of one JSON value before it is given up as cut.
MAX_JSON_LINES = 5000
_JSON_FIX = re.compile(r'"(?:[^"\\]|\\.)*"|(-?)\binf(?:inity)?\b|\bnan\b|,(\s*[}\]])', re.I)


def _fix_json_token(m: re.Match[str]) -> str:
    """Rewrite one token of almost-JSON: Python's ``inf``/``nan``, a trailing comma."""
    tok = m.group(0)
    if tok.startswith('"'):
        return tok
    if m.group(2) is not None:
        return m.group(2)
    if tok.lower().lstrip("-").startswith("inf"):
        return f"{m.group(1)}Infinity"
    return "NaN"


def loads_lenient(text: str) -> Any:
    """Parse the JSON DeepSpeed prints, which is not always strict JSON.

    ``ScientificNotationEncoder`` writes ``inf`` for an infinite float, and some versions leave
    a comma before a closing brace. Raises ``ValueError`` when the text is not even that.
    """
    try:
        try:
            return json.loads(text)
        except ValueError:
            return json.loads(_JSON_FIX.sub(_fix_json_token, text))
    except RecursionError:
        raise ValueError("nested too deeply") from None


@dataclass(slots=True)
class _Dump:
    """One dump being read: the attributes so far and any multi-line value in progress."""

    header: LogLine
    attrs: dict[str, Any] = field(default_factory=dict)
    value_name: str | None = None  # attribute (or "json") whose JSON lines are being collected
    value_line: LogLine | None = None
    value_lines: list[str] = field(default_factory=list)
    foreign: int = 0


class ConfigDumpParser:
    """Collects the dump into two :class:`ConfigRecord`s: ``effective`` and ``user_json``.

    While a dump is open the parser is ``in_block`` so it sees the JSON continuation lines
    first; lines of other processes interleaved with the dump are passed on untouched.
    """

    def __init__(self) -> None:
        self.in_block = False
        self._dump: _Dump | None = None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Claim the dump's lines; emit both records when the user JSON closes."""
        if line.text.rstrip() == _HEADER:
            self._start(line, ctx)
            return []
        dump = self._dump
        if dump is None:
            return None
        if dump.value_name is not None:
            return self._continue_value(dump, line, ctx)
        if line.ts is not None:
            recs = self._dump_line(dump, line, ctx)
            if recs is not None:
                return recs
        self._foreign(dump, ctx)
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """A dump still open at the end of input is cut: count it, store nothing."""
        if self._dump is not None:
            ctx.cut_block("config_dump", self._dump.header)
            self._reset()
        return []

    def _start(self, line: LogLine, ctx: ParseContext) -> None:
        """A header: begin a dump (a previous unfinished one was cut)."""
        if self._dump is not None:
            ctx.cut_block("config_dump", self._dump.header)
        self._dump = _Dump(header=line)
        self.in_block = True

    def _reset(self) -> None:
        self._dump = None
        self.in_block = False

    def _dump_line(self, dump: _Dump, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """An attribute line or the ``json = {`` line; None for a line of someone else."""
        m = _USER_JSON.match(line.text)
        if m:
            return self._open_value(dump, "json", m.group(1), line, ctx)
        m = _ATTR.match(line.text)
        if m is None:
            return None
        return self._open_value(dump, m.group(1), m.group(2) or "", line, ctx)

    def _open_value(
        self, dump: _Dump, name: str, value: str, line: LogLine, ctx: ParseContext
    ) -> list[Record]:
        """Store a one-line value, or start collecting a multi-line JSON one."""
        dump.foreign = 0
        if value.strip() == "{":
            dump.value_name, dump.value_line, dump.value_lines = name, line, [value]
            return []
        if name == "json":
            return self._close(dump, line, value, ctx)
        dump.attrs[name] = parse_value(value)
        return []

    def _continue_value(self, dump: _Dump, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """A header-less line of a multi-line JSON value; ``}`` at column 0 ends it."""
        if line.prefixed:
            self._foreign(dump, ctx)
            return None
        dump.value_lines.append(line.text)
        if line.text.rstrip() != "}":
            if len(dump.value_lines) > MAX_JSON_LINES:
                ctx.cut_block("config_dump", dump.header)
                self._reset()
            return []
        name, start = dump.value_name, dump.value_line
        assert name is not None and start is not None
        text = "\n".join(dump.value_lines)
        dump.value_name, dump.value_line, dump.value_lines = None, None, []
        if name == "json":
            return self._close(dump, start, text, ctx)
        try:
            dump.attrs[name] = loads_lenient(text)
        except ValueError:
            dump.attrs[name] = text
        return []

    def _foreign(self, dump: _Dump, ctx: ParseContext) -> None:
        """Another process's line inside the dump (passed on); give up after too many."""
        dump.foreign += 1
        if dump.foreign > MAX_FOREIGN:
            ctx.cut_block("config_dump", dump.header)
            self._reset()

    def _close(self, dump: _Dump, json_line: LogLine, text: str, ctx: ParseContext) -> list[Record]:
        """The user JSON is complete: the dump is, too."""
        self._reset()
        rank = dump.attrs.get("global_rank")
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        out: list[Record] = [
            ConfigRecord(
                src=ctx.src(dump.header, rank=rank),
                ts=ctx.ts(dump.header),
                origin="effective",
                config=dump.attrs,
            )
        ]
        try:
            user = loads_lenient(text)
        except ValueError:
            user = None
        if not isinstance(user, dict):
            ctx.unparsed("config_json", json_line)
            return out
        out.append(
            ConfigRecord(
                src=ctx.src(json_line, rank=rank),
                ts=ctx.ts(json_line),
                origin="user_json",
                config=user,
            )
        )
        return out
