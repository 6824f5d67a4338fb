"""What every line parser shares: the parse context, the step clock and the diagnostics.

A sub-parser is a small object with ``feed(line, ctx)`` and ``finish(ctx)``. ``feed`` returns
the records made from one logical line, ``[]`` for a line it consumed without a record (a
block header, a continuation), ``None`` for a line that is not its own, or :data:`NEED_MORE`
when the line looks cut by terminal wrapping and should be fed again joined with the next one.
Parsers of multi-line blocks set ``in_block`` while inside one, so they see the next line first.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from dsmon.parsers.lines import LogLine
from dsmon.records import Record, Source

#: Returned by ``feed`` for a line that is the first part of a terminal-wrapped line.
NEED_MORE: list[Record] = []

#: Kinds whose records belong to an optimizer step that the context assigns.
STEPPED_KINDS = frozenset(
    {"timer", "coordinator_event", "loss_scale", "comm_op", "memory", "flops_profile"}
)


@dataclass(slots=True)
class Diagnostics:
    """Counts of what could not be used, per kind, with the first few examples.

    ``unparsed`` counts lines that look like DeepSpeed output of a kind but did not parse;
    ``cut`` counts multi-line blocks that ended before they were complete.
    """

    lines: int = 0
    records: int = 0
    unparsed: Counter[str] = field(default_factory=Counter)
    cut: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def note(self, bucket: Counter[str], kind: str, where: str, text: str) -> None:
        """Count one problem and keep its first three examples as ``file:line: text``."""
        bucket[kind] += 1
        ex = self.examples.setdefault(kind, [])
        if len(ex) < 3:
            ex.append(f"{where}: {text[:200]}")

    def merge(self, other: Diagnostics) -> None:
        """Add another file's diagnostics to these."""
        self.lines += other.lines
        self.records += other.records
        self.unparsed.update(other.unparsed)
        self.cut.update(other.cut)
        for kind, ex in other.examples.items():
            mine = self.examples.setdefault(kind, [])
            mine.extend(ex[: max(0, 3 - len(mine))])


class StepClock:
    """Assigns optimizer steps to lines that carry none (timer lines, overflow messages, ...).

    Each engine global timer line closes one optimizer step, so the clock counts them in
    ``rel``. ``base`` maps that count to DeepSpeed's step number: it is set by an anchor (a
    ``step=N`` or ``global_step=N`` line, which are printed inside step N) or by the start of
    the run (launcher or engine-init lines before any step). Until then step numbers are
    unknown; the log parser holds those records and fixes them when ``base`` is found.
    """

    def __init__(self) -> None:
        self.rel = 0
        self.micro = 0
        self.base: int | None = None

    def current(self) -> int | None:
        """The step now in progress, if known."""
        return None if self.base is None else self.base + self.rel

    def mark_start(self) -> None:
        """The log shows the run starting: the first step is step 1."""
        if self.base is None and self.rel == 0:
            self.base = 1

    def anchor(self, step_in_progress: int) -> None:
        """A line tells the number of the step in progress (``step=N`` is printed in step N)."""
        self.base = step_in_progress - self.rel

    def end_step(self) -> None:
        """An engine global timer line: the step in progress is complete."""
        self.rel += 1
        self.micro = 0

    def next_micro(self) -> int:
        """Index of the micro-batch whose micro timer line is being read."""
        m = self.micro
        self.micro += 1
        return m


class ParseContext:
    """Per-file state shared by the sub-parsers: identity, clock, timestamps, diagnostics."""

    def __init__(self, run: str, file: str | None = None, node: str | None = None) -> None:
        self.run = run
        self.file = file
        self.node = node
        self.clock = StepClock()
        self.last_ts: str | None = None
        self.diag = Diagnostics()

    def src(self, line: LogLine, k: int = 0, rank: int | None = None) -> Source:
        """The Source of the ``k``-th record made from ``line``."""
        return Source(
            run=self.run,
            file=self.file,
            line=line.line,
            offset=line.offset,
            node=line.host or self.node,
            rank=line.rank if rank is None else rank,
            sub=line.sub * 1000 + k,
        )

    def ts(self, line: LogLine) -> str | None:
        """The line's own timestamp, else the nearest preceding one."""
        return line.ts or self.last_ts

    def where(self, line: LogLine) -> str:
        """``file:line`` for messages."""
        return f"{self.file or '-'}:{line.line}"

    def unparsed(self, kind: str, line: LogLine) -> None:
        """A line that looks like ``kind`` but did not parse: count it, keep going."""
        self.diag.note(self.diag.unparsed, kind, self.where(line), line.text)

    def cut_block(self, kind: str, line: LogLine) -> None:
        """A multi-line block ended early: count it; its partial content is not stored."""
        self.diag.note(self.diag.cut, kind, self.where(line), line.text)


class SubParser(Protocol):
    """One family of DeepSpeed output."""

    in_block: bool

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records from one logical line; see the module docstring for the return values."""
        ...

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: flush a complete pending block, count a cut one."""
        ...
