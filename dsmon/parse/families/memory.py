"""``see_memory_usage`` blocks (``memory_breakdown: true``): one :class:`MemoryRecord` per block.

A block is three lines written by rank 0: the caller's message (the label, e.g. ``Engine
before forward``), ``MA x GB  Max_MA x GB  CA x GB  Max_CA x GB`` and ``CPU Virtual Memory:
used = x GB, percent = p%``. Since v0.18 they are bare prints; older releases logged each one
with the logger header (``[utils.py:556:see_memory_usage] MA ...``), which the line cleaner
removes, so both read alike. The label is an arbitrary message no other parser claims, so the
parser remembers the last line it was offered and takes it as the label when the ``MA`` line
follows it directly. Figures are GiB (``/ 1024**3``) and are stored as bytes.

``Engine after step`` is printed after the global timer line of the step it describes, so it
asks the step clock to stamp it with that step (``StepClock.stamp_previous``).
"""

from __future__ import annotations

import re

from dsmon.model import units
from dsmon.model.records import MemoryRecord, Record
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine

_N = r"(\d+(?:\.\d+)?)"
_MA = re.compile(rf"MA {_N} GB\s+Max_MA {_N} GB\s+CA {_N} GB\s+Max_CA {_N} GB\s*$")
_MA_START = re.compile(r"MA \d")
_CPU = re.compile(rf"CPU Virtual Memory:\s+used = {_N} GB, percent = {_N}%\s*$")
_MA_CUT = re.compile(r"MA?$")
_CPU_START = "CPU Virtual Memory:"
_AFTER_STEP = "Engine after step"


class MemoryParser:
    """Collects the three lines of a memory block (``in_block`` between the 2nd and 3rd)."""

    def __init__(self) -> None:
        self.in_block = False
        self._label = ""
        self._figures: tuple[str, ...] = ()
        self._start: LogLine | None = None
        self._last: tuple[int, int, str] | None = None  # (line, sub, text) last offered

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """The record when a block completes; [] for its first lines; None otherwise."""
        text = line.text.strip()
        if self.in_block:
            return self._cpu_line(text, line, ctx)
        if text.startswith("MA ") and _MA_START.match(text):
            return self._ma_line(text, line, ctx)
        if len(text) < 3 and not ctx.final and _MA_CUT.match(text):
            return NEED_MORE  # ``MA``: maybe the figures line, wrapped right after its start
        self._last = (line.line, line.sub, text)
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """A block without its CPU line at the end of input is cut: counted, not stored."""
        if self.in_block and self._start is not None:
            ctx.cut_block("memory", self._start)
        self.in_block = False
        return []

    def _ma_line(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record]:
        """The GPU figures: remember them and the label that came just before."""
        m = _MA.match(text)
        if m is None:
            if not ctx.final:
                return NEED_MORE
            ctx.unparsed("memory", line)
            return []
        self._label = self._label_before(line)
        self._figures = m.groups()
        self._start = line
        self.in_block = True
        return []

    def _label_before(self, line: LogLine) -> str:
        """The message printed right before the ``MA`` line, or "" if that line is not known."""
        last, self._last = self._last, None
        if last is None:
            return ""
        adjacent = last[0] == line.line - 1 or (last[0] == line.line and last[1] < line.sub)
        return last[2] if adjacent else ""

    def _cpu_line(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """The CPU figures complete the block; any other line means the block was cut."""
        m = _CPU.match(text)
        if m is None and not text:
            return None  # a blank (wrapped trailing space) does not end the block
        if m is None:
            cut = text.startswith(_CPU_START) or (text and _CPU_START.startswith(text))
            if cut and not ctx.final:
                return NEED_MORE
            self.in_block = False
            ctx.cut_block("memory", line)
            return None
        self.in_block = False
        if self._label == _AFTER_STEP:
            ctx.clock.stamp_previous()
        return [self._record(m, line, ctx)]

    def _record(self, cpu: re.Match[str], line: LogLine, ctx: ParseContext) -> Record:
        """The block's record, with the GiB figures as bytes."""
        ma, max_ma, ca, max_ca = (units.parse_gb_bytes(v) for v in self._figures)
        return MemoryRecord(
            src=ctx.src(line, rank=line.rank if line.rank is not None else 0),
            ts=ctx.ts(line),
            label=self._label,
            allocated_bytes=ma,
            max_allocated_bytes=max_ma,
            cached_bytes=ca,
            max_cached_bytes=max_ca,
            cpu_used_bytes=units.parse_gb_bytes(cpu.group(1)),
            cpu_used_pct=float(cpu.group(2)),
        )
