"""Rows of the lines the vector path reads, written as the store keeps their records.

The vector path (:mod:`dsmon.load.vector`) finds a log's plain timer, step and throughput
lines in compiled code; a long run prints one to five of them a step. Each line's record is
made straight into the row the store keeps (:class:`~dsmon.store.records.rows.RecordRow`):
the JSON body from a template the record codec itself wrote for a sample record of the file
(:func:`codec_template`: field order and encoding are the codec's), filled per line with the
figures that differ, and the key :func:`~dsmon.store.records.keys.identity_digest` gives the
same identity (:func:`~dsmon.store.records.keys.place_key`, its source's parts made once). No
record object, no check, no encoder call per line: each figure such a line carries is one its
record holds as it is (the plain patterns of :mod:`dsmon.parse.families.timers` and
:mod:`~dsmon.parse.families.progress`), and what the line means beside its own figures (its
step, its time) the log parser says (``LogParser.take_timer``, ``take_progress_row``).
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

import orjson

from dsmon.model import wire
from dsmon.model.records import Record, Source, StepRecord, ThroughputRecord, TimerRecord
from dsmon.model.units import parse_gb_bytes
from dsmon.parse.families import timers
from dsmon.parse.families.progress import (
    PLAIN_COUNT_DIGITS,
    PLAIN_THROUGHPUT,
    STEP_MESSAGE,
    numbers,
    parse_mom,
    rate,
)
from dsmon.parse.log import LogParser
from dsmon.store.records.keys import MAX_PLACE, identity_digest, place_key, source_head
from dsmon.store.records.rows import RecordRow

#: Stand-ins written into a sample record, found again in its JSON (each prints once).
_INTS = {"line": 918273601, "offset": 918273602, "rank": 918273603, "step": 918273604}
_INTS |= {"micro_step": 918273605, "skipped": 918273606, "epoch": 918273607}
_INTS |= {"global_step": 918273608, "mem_allocated_bytes": 918273609}
_INTS |= {"max_mem_allocated_bytes": 918273610}
_TS = "\x01ts"
#: Distinct cached texts kept at most (``lr`` changes every step under a schedule).
MAX_CACHED = 4096
_STEP = re.compile(STEP_MESSAGE)
_THROUGHPUT = re.compile(PLAIN_THROUGHPUT)
#: The largest ``skipped`` count a record holds as it is (an int64).
_MAX_SKIPPED_DIGITS = 18


def _json(value: object) -> str:
    """A value as the record codec writes it."""
    return orjson.dumps(value).decode("utf-8")


def codec_template(sample: Record, filled: tuple[str, ...]) -> str:
    """The codec's JSON of ``sample`` as a :meth:`str.format` template.

    Each field named in ``filled`` (of the record or its source) becomes ``{i}``, ``i`` its
    place in ``filled``; the sample holds a stand-in in each that prints once in its JSON.
    """
    values = {**{f: getattr(sample.src, f) for f in ("line", "offset", "rank")}}
    text = wire.encode(sample).replace("{", "{{").replace("}", "}}")
    for i, name in enumerate(filled):
        value = values[name] if name in values else getattr(sample, name)
        json_text = f'"{name}":{_json(value)}'.replace("{", "{{").replace("}", "}}")
        if text.count(json_text) != 1:
            raise AssertionError(f"{sample.KIND} record JSON: {json_text} not found once in {text}")
        text = text.replace(json_text, f'"{name}":{{{i}}}')
    return text


class _Rows:
    """What the rows of one file's lines share: its source's parts, made once."""

    def __init__(self, parser: LogParser) -> None:
        ctx = parser.ctx
        self.run, self.file, self.node = ctx.run, ctx.file, ctx.node
        self._head = source_head(self.run, self.node or "", self.file or "")
        self._src = Source(
            run=ctx.run, file=ctx.file, line=_INTS["line"], offset=_INTS["offset"],
            node=ctx.node, rank=_INTS["rank"], sub=0,
        )  # fmt: skip

    def key(self, offset: int, kind: str) -> bytes:
        """The identity key of the record of the line at ``offset`` (its only record)."""
        if 0 <= offset < MAX_PLACE:
            return place_key(self._head, "o", offset, 0, kind)
        return identity_digest(self.run, self.node or "", self.file or "", f"o{offset}", 0, kind)


class TimerRows(_Rows):
    """Rows of one file's plain timer lines: each as the per-line path would store its record."""

    #: The fields filled per line, in the order :meth:`row` gives them to the template.
    _FILLED = ("line", "offset", "rank", "step", "micro_step", "ts", "group", "values_ms", "legacy")

    def __init__(self, parser: LogParser, file_rank: int | None) -> None:
        super().__init__(parser)
        self.file_rank = file_rank
        self._shapes: dict[str, tuple[timers.PlainShape, str, str] | None] = {}
        #: A whole body's template per values template, legacy flag and group (:meth:`_line_template`).
        self._lines: dict[tuple[str, str, str], tuple[str, Callable[[tuple[Any, ...]], Any]]] = {}
        sample = TimerRecord(
            src=self._src, ts=_TS, step=_INTS["step"], group="\x01group",
            values_ms={"\x01v": 0.5}, micro_step=_INTS["micro_step"], legacy=True,
        )  # fmt: skip
        self._template = codec_template(sample, self._FILLED)

    def shape(self, printed: str) -> tuple[timers.PlainShape, str, str] | None:
        """How the timer parser reads a line of this shape; its values' template and legacy flag."""
        if printed in self._shapes:
            return self._shapes[printed]
        known = timers.plain_shape(printed.replace(": #", ": 0.00"))
        made = None
        if known is not None:
            names = ",".join(f"{_json(n).replace('%', '%%')}:%s" for n in known.names)
            made = known, "{" + names + "}", "true" if known.legacy else "false"
        self._shapes[printed] = made
        return made

    def row(
        self,
        line: int,
        offset: int,
        facts: tuple[int | None, int | None, str, str | None],
        rank: int | None,
        values: str,
        shape: tuple[timers.PlainShape, str, str],
    ) -> RecordRow:
        """The stored row of one plain timer line (``facts``: ``LogParser.take_timer``'s)."""
        step, micro, group, ts = facts
        if rank is None:
            rank = self.file_rank
        made = self._lines.get((shape[1], shape[2], group))
        if made is None:
            made = self._line_template(shape, group)
        template, ordered = made
        body = template % ordered(
            (
                line,
                offset,
                "null" if rank is None else rank,
                "null" if step is None else step,
                "null" if micro is None else micro,
                "null" if ts is None else f'"{ts}"',
                *values.split(","),
            )
        )
        key = self.key(offset, "timer")
        return RecordRow(key, self.run, "timer", step, ts, self.node, rank, self.file, line, body)

    def _line_template(
        self, shape: tuple[timers.PlainShape, str, str], group: str
    ) -> tuple[str, Callable[[tuple[Any, ...]], Any]]:
        """The body of a line of ``shape`` and ``group`` as one ``%`` template, kept.

        Its group, timer names and legacy flag are written in; its line, offset, rank, step,
        micro-step, time and values are ``%s`` slots, in the order the record's JSON has
        them. Returned with what puts :meth:`row`'s figures (those six, then the values) in
        that order: one formatting a line, not three. Kept by the shape's values template
        and legacy flag (what it writes) and the group.
        """
        if len(self._lines) >= MAX_CACHED:
            self._lines.clear()
        count = len(shape[0].names)
        marks = [f"\x00{i}\x00" for i in range(6 + count)]  # no JSON holds a raw NUL
        pairs = zip(shape[0].names, marks[6:], strict=True)
        values = "{" + ",".join(f"{_json(n)}:{mark}" for n, mark in pairs) + "}"
        text = self._template.format(*marks[:6], f'"{group}"', values, shape[2])
        order = sorted(range(len(marks)), key=lambda i: text.index(marks[i]))
        text = text.replace("%", "%%")
        for mark in marks:
            text = text.replace(mark, "%s")
        made = text, operator.itemgetter(*order)
        self._lines[(shape[1], shape[2], group)] = made
        return made


class ProgressRows(_Rows):
    """Rows of one file's plain step and throughput lines, as the per-line path stores them.

    The lines are those of ``progress.STEP_MESSAGE`` and ``progress.PLAIN_THROUGHPUT``.
    A line some figure of which its record would not hold as printed (a learning rate that
    is not finite, a step past the largest a record names) has no row here: :meth:`row` says
    None before the parser moves, and the log parser reads the line (``LogParser.feed``).
    """

    _STEP_FILLED = ("line", "offset", "rank", "step", "ts", "skipped", "lr", "mom")
    _TPUT_FILLED = (
        "line", "offset", "rank", "step", "ts", "epoch", "micro_step", "global_step",
        "samples_per_s", "running_avg_samples_per_s", "mem_allocated_bytes",
        "max_mem_allocated_bytes",
    )  # fmt: skip

    def __init__(self, parser: LogParser) -> None:
        super().__init__(parser)
        self._parser = parser
        step = StepRecord(
            src=self._src, ts=_TS, step=_INTS["step"], skipped=_INTS["skipped"], lr=(0.5,),
            mom=((0.25,),),
        )  # fmt: skip
        self._step = codec_template(step, self._STEP_FILLED)
        tput = ThroughputRecord(
            src=self._src, ts=_TS, step=_INTS["step"], epoch=_INTS["epoch"],
            micro_step=_INTS["micro_step"], global_step=_INTS["global_step"],
            samples_per_s=0.125, running_avg_samples_per_s=0.375,
            mem_allocated_bytes=_INTS["mem_allocated_bytes"],
            max_mem_allocated_bytes=_INTS["max_mem_allocated_bytes"],
        )  # fmt: skip
        self._tput = codec_template(tput, self._TPUT_FILLED)
        self._lr: dict[str, str | None] = {}
        self._mom: dict[str, str | None] = {}
        self._gb: dict[str, str] = {}

    def row(
        self, line: int, offset: int, ts: str | None, rank: int | None, message: str
    ) -> RecordRow | None:
        """The stored row of a plain progress line's message, the parser moved past it.

        None, the parser untouched, for a line some figure of which its record would not hold
        as printed: the log parser reads it (``LogParser.feed``).
        """
        step = message.startswith("step=")
        m = (_STEP if step else _THROUGHPUT).match(message)
        if m is None:
            return None
        where = (line, offset, ts, rank)
        return self._step_row(where, m) if step else self._throughput_row(where, m)

    def _step_row(self, where: _Where, m: re.Match[str]) -> RecordRow | None:
        """The row of a step line (``m``: its message's match), or None before the parser moves."""
        line, offset, ts, rank = where
        step, skipped = m.group(1), m.group(2)
        if len(step) > PLAIN_COUNT_DIGITS or len(skipped) > _MAX_SKIPPED_DIGITS:
            return None
        lr = _cached(self._lr, m.group(3), _lr_json)
        mom = _cached(self._mom, m.group(4), _mom_json)
        if lr is None or mom is None:
            return None
        n = int(step)
        own, ts = self._parser.take_progress_row(line, offset, ts, rank, n, timed=False)
        rank = 0 if rank is None else rank  # written by global rank 0 only
        body = self._step.format(
            line, offset, rank, own, "null" if ts is None else f'"{ts}"', int(skipped), lr, mom
        )
        return RecordRow(self.key(offset, "step"), self.run, "step", own, ts, self.node, rank,
                         self.file, line, body)  # fmt: skip

    def _throughput_row(self, where: _Where, m: re.Match[str]) -> RecordRow:
        """The row of a throughput line (``m``: its message's match), the parser moved past it."""
        line, offset, ts, rank = where
        epoch, micro, global_step, running, current, mem, peak = m.groups()
        own, ts = self._parser.take_progress_row(
            line, offset, ts, rank, int(global_step), timed=True
        )
        rank = 0 if rank is None else rank
        body = self._tput.format(
            line, offset, rank, "null" if own is None else own,
            "null" if ts is None else f'"{ts}"', int(epoch), int(micro), int(global_step),
            _json(rate(current)), _json(rate(running)), self._bytes(mem), self._bytes(peak),
        )  # fmt: skip
        return RecordRow(self.key(offset, "throughput"), self.run, "throughput", own, ts,
                         self.node, rank, self.file, line, body)  # fmt: skip

    def _bytes(self, gb: str) -> str:
        """A memory figure's bytes as the record holds them (``parse_gb_bytes``), as JSON."""
        got = self._gb.get(gb)
        if got is None:
            if len(self._gb) >= MAX_CACHED:
                self._gb.clear()
            got = self._gb[gb] = _json(parse_gb_bytes(gb))
        return got


_Missing = object()
#: A line's number, offset, time and ``[Rank N]``.
_Where = tuple[int, int, str | None, int | None]


def _cached(
    cache: dict[str, str | None], text: str, make: Callable[[str], str | None]
) -> str | None:
    """``make(text)``, kept for the next line that prints the same text."""
    got = cache.get(text, _Missing)
    if got is _Missing:
        if len(cache) >= MAX_CACHED:
            cache.clear()
        got = cache[text] = make(text)
    return got  # type: ignore[return-value]


def _lr_json(text: str) -> str | None:
    """A step line's learning rates as its record's JSON; None unless each is finite."""
    values = numbers(text)
    return _json(values) if all(math.isfinite(v) for v in values) else None


def _mom_json(text: str) -> str | None:
    """A step line's momentum as its record's JSON; None unless the parser reads it finite."""
    try:
        groups = parse_mom(text)
    except Exception:  # noqa: BLE001 - the parser's own reading counts it
        return None
    return _json(groups) if all(math.isfinite(v) for g in groups for v in g) else None
