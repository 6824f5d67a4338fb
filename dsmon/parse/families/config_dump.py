"""The startup config dump: the effective DeepSpeed configuration and the user's JSON, from a log.

Rank 0 prints ``DeepSpeedEngine configuration:`` (``DeepSpeedLight configuration:`` in 2020), one
``  name ...... value`` line per attribute (the value as Python ``str()``: scalars, ``k=v k=v``
pydantic reprs, dict reprs, multi-line JSON closed by ``}`` at column 0, ``<... object at
0x...>``), then ``  json = {`` and the user's dict as multi-line JSON. This is the only place a
log tells what DeepSpeed actually ran with (defaults applied, batch sizes resolved), so the health
checks read it.

Real logs rarely hold a clean dump: other ranks' lines land inside it, a paste starts or ends in
the middle, a run dies while printing it. What was read is kept: a dump cut short, or one whose
header is missing (attribute lines of ``config.py`` in the dump's own column layout start it),
yields its records with ``partial`` set, and a JSON value cut short keeps its complete lines.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from dsmon.model.records import ConfigRecord, Record
from dsmon.parse.base import ParseContext
from dsmon.parse.lines import LogLine
from dsmon.parse.pyrepr import parse_value

_HEADER = re.compile(r"^DeepSpeed\w* configuration:\s*$")
# "  {name} {dots} {value}": dots fill the name to column 29; 29+ chars get none (two spaces).
_ATTR = re.compile(r"^  ([A-Za-z_]\w*) \.*(?: (.*))?$")
_NAME_DOTS = 29
_SHAPED = re.compile(r"^  (?P<name>[A-Za-z_]\w*) (?P<dots>\.*)(?: |$)")
_USER_JSON = re.compile(r"^  json = (.*)$")
#: Lines of other processes tolerated inside a dump before it is given up as cut.
MAX_FOREIGN = 200
#: Continuation lines of one JSON value before it is given up as cut.
MAX_JSON_LINES = 5000
#: Trailing lines a cut JSON value may lose before what is left is read.
MAX_SALVAGE_DROPS = 8
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


def printed_words(value: Any) -> Any:
    """The value with non-finite numbers as the word DeepSpeed printed: ``inf``, ``-inf``, ``nan``.

    JSON, and so a record's wire form and the store, has no inf or nan: as numbers they would
    arrive as null, as if the dump had printed nothing there.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: printed_words(v) for k, v in value.items()}
    if isinstance(value, list):
        return [printed_words(v) for v in value]
    return value


def _closers(text: str) -> str | None:
    """The brackets that close every ``{``/``[`` still open in ``text`` (None: unbalanced)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            escaped = ch == "\\" and not escaped
            in_string = escaped or ch != '"'
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]" and (not stack or stack.pop() != ch):
            return None  # a closer with no opener, or the wrong one
    return None if in_string else "".join(reversed(stack))


def salvage_json(lines: list[str]) -> dict[str, Any] | None:
    """The keys of a JSON object cut short, from its complete lines only.

    A trailing line that opens a value or was cut mid-way is dropped (its value was never
    printed whole); what stays is closed and read. None when nothing readable is left within
    :data:`MAX_SALVAGE_DROPS` dropped lines (each try reads the whole text again).
    """
    keep = list(lines)
    while keep and len(lines) - len(keep) <= MAX_SALVAGE_DROPS:
        text = "\n".join(keep).rstrip().rstrip(",")
        closers = _closers(text)
        if (closers is not None and not text.endswith(("{", "[", ":"))) or len(keep) == 1:
            try:
                value = loads_lenient(text + (closers or ""))
            except ValueError:
                value = None
            if isinstance(value, dict):
                return value
        keep.pop()
    return None


def _read_json(lines: list[str]) -> Any:
    """A whole multi-line JSON value; lines of other processes inside it are left out."""
    try:
        return loads_lenient("\n".join(lines))
    except ValueError:
        own = [t for t in lines if t[:1] in ("", " ", "\t", "{", "}", "[", "]")]
        if len(own) == len(lines):
            raise
        return loads_lenient("\n".join(own))


def printed_attributes(printed: dict[str, str]) -> tuple[dict[str, Any], bool]:
    """Attribute values as the dump prints them (``str()`` of each), read as the dump's are.

    dsmon's probe writes the engine's attributes in this form, so that they are read by the
    same rules as a dump in a log. Returns the values and whether one did not read whole (it
    is kept as far as it reads, as a cut dump's would be).
    """
    out: dict[str, Any] = {}
    damaged = False
    for name, text in printed.items():
        if "\n" not in text:
            out[name] = parse_value(text)
            continue
        try:
            out[name] = _read_json(text.splitlines())
        except ValueError:
            damaged = True
            salvaged = salvage_json(text.splitlines())
            if salvaged is not None:
                out[name] = salvaged
    return printed_words(out), damaged


def _dump_shaped(text: str) -> bool:
    """An attribute line in the dump's exact layout: name and dots fill 29 columns."""
    m = _SHAPED.match(text)
    if m is None:
        return False
    width = len(m.group("name")) + len(m.group("dots"))
    return width == _NAME_DOTS if m.group("dots") else width >= _NAME_DOTS


@dataclass(slots=True)
class _Dump:
    """One dump being read: the attributes so far and any multi-line value in progress.

    ``stamped``: the header carried a logger timestamp, so the dump's own lines do too (a 2020
    dump printed none). ``headless``: the dump was met without its header line.
    """

    header: LogLine
    stamped: bool = True
    headless: bool = False
    damaged: bool = False  # a value was only partly readable
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
        #: Records of a dump given up amid other processes' lines: the line that ended it was
        #: theirs, so they leave with the next line this parser claims, or at the end.
        self._held: list[Record] = []

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Claim the dump's lines; emit both records when the user JSON closes."""
        if _HEADER.match(line.text):
            out = self._take_held() + self._cut(ctx)
            self._open(_Dump(header=line, stamped=line.ts is not None))
            return out
        dump = self._dump
        if dump is None:
            if not self._headless_start(line):
                return None
            dump = _Dump(header=line, headless=True)
            self._open(dump)
            return self._take_held() + (self._dump_line(dump, line, ctx) or [])
        if dump.value_name is not None:
            return self._continue_value(dump, line, ctx)
        if line.ts is not None or not dump.stamped:
            recs = self._dump_line(dump, line, ctx)
            if recs is not None:
                return recs
        self._foreign(dump, ctx)
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """A dump still open at the end of input is cut: what it holds is kept as partial."""
        return self._take_held() + self._cut(ctx)

    def _take_held(self) -> list[Record]:
        held, self._held = self._held, []
        return held

    @staticmethod
    def _headless_start(line: LogLine) -> bool:
        """An attribute line of ``config.py`` with no header before it: a dump seen mid-way."""
        return line.ts is not None and line.logger == "config.py" and _dump_shaped(line.text)

    def _open(self, dump: _Dump) -> None:
        self._dump = dump
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
            return self._close(dump, ctx, line, value)
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
                return self._cut(ctx)
            return []
        name, start = dump.value_name, dump.value_line
        assert name is not None and start is not None
        lines = dump.value_lines
        dump.value_name, dump.value_line, dump.value_lines = None, None, []
        if name == "json":
            return self._close(dump, ctx, start, "\n".join(lines))
        try:
            dump.attrs[name] = _read_json(lines)
        except ValueError:
            self._damaged_value(dump, name, lines, start, ctx)
        return []

    @staticmethod
    def _damaged_value(
        dump: _Dump, name: str, lines: list[str], start: LogLine, ctx: ParseContext
    ) -> None:
        """A JSON value that does not read: counted, and its readable first lines kept."""
        where = f"{ctx.where(start)}: field {name!r}"
        ctx.diag.note(ctx.diag.unparsed, "config_dump", where, start.text)
        salvaged = salvage_json(lines)
        if salvaged is not None:
            dump.attrs[name] = salvaged
            dump.damaged = True

    def _foreign(self, dump: _Dump, ctx: ParseContext) -> None:
        """Another process's line inside the dump (passed on); give up after too many."""
        dump.foreign += 1
        if dump.foreign > MAX_FOREIGN:
            self._held.extend(self._cut(ctx))

    def _cut(self, ctx: ParseContext) -> list[Record]:
        """The open dump ends early (end of input, a new header, too many foreign lines).

        It is counted as cut, and whatever it printed is kept with ``partial`` set; a JSON
        value cut short keeps its complete lines.
        """
        dump = self._dump
        if dump is None:
            return []
        ctx.cut_block("config_dump", dump.header)
        name, start = dump.value_name, dump.value_line
        if name is None or start is None:
            return self._records(dump, ctx, None)
        salvaged = salvage_json(dump.value_lines)
        if name == "json":
            return self._records(dump, ctx, (start, salvaged, True))
        if salvaged is not None:
            dump.attrs[name] = salvaged
        return self._records(dump, ctx, None)

    def _close(self, dump: _Dump, ctx: ParseContext, json_line: LogLine, text: str) -> list[Record]:
        """The user JSON is complete: the dump is, too."""
        try:
            user = loads_lenient(text)
        except ValueError:
            user = None
        if not isinstance(user, dict):
            ctx.unparsed("config_json", json_line)
            user = None
        return self._records(dump, ctx, (json_line, user, False))

    def _records(
        self,
        dump: _Dump,
        ctx: ParseContext,
        user: tuple[LogLine, dict[str, Any] | None, bool] | None,
    ) -> list[Record]:
        """The effective record (unless empty) and the user-JSON one (when it was read).

        The effective dump is whole only if its header was seen and the ``json = {`` line that
        follows its last attribute arrived.
        """
        self._reset()
        rank = dump.attrs.get("global_rank")
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        out: list[Record] = []
        if dump.attrs:
            out.append(
                ConfigRecord(
                    src=ctx.src(dump.header, rank=rank),
                    ts=ctx.ts(dump.header),
                    origin="effective",
                    config=printed_words(dump.attrs),
                    partial=dump.headless or dump.damaged or user is None,
                )
            )
        json_line, config, cut = user if user is not None else (dump.header, None, False)
        if config is not None:
            out.append(
                ConfigRecord(
                    src=ctx.src(json_line, rank=rank),
                    ts=ctx.ts(json_line),
                    origin="user_json",
                    config=printed_words(config),
                    partial=cut,
                )
            )
        return out
