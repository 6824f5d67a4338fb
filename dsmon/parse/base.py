"""What every line parser shares: the parse context, the step clock and the diagnostics.

A sub-parser is a small object with ``feed(line, ctx)`` and ``finish(ctx)``. ``feed`` returns
the records made from one logical line, ``[]`` for a line it consumed without a record (a
block header, a continuation), ``None`` for a line that is not its own, or :data:`NEED_MORE`
when the line looks cut by terminal wrapping and should be fed again joined with the next one.
Parsers of multi-line blocks set ``in_block`` while inside one, so they see the next line first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dsmon.model.records import Record, Source
from dsmon.model.schema import MAX_STEP
from dsmon.parse.lines import Bar, LogLine

#: Returned by ``feed`` for a line that is the first part of a terminal-wrapped line.
NEED_MORE: list[Record] = []

#: ``Diagnostics.unparsed`` kind of a line a parser raised on (a fault of dsmon's): the line
#: is skipped, the log read on.
PARSER_ERROR = "parser error"
#: ``Diagnostics.unparsed`` kind of a value printed that no record can hold (a step past
#: ``MAX_STEP``, a negative duration): left out of its record (``dsmon.model.check.fit``).
OUT_OF_RANGE = "value out of range"
#: Global timer lines a log read from its first byte may count without a line naming its
#: step before its first line is taken for the job's start (:meth:`StepClock.file_start`).
#: DeepSpeed's default ``steps_per_print`` is 10: at INFO level a ``step=N`` line comes
#: before the 11th global line of any stretch of the log.
WEAK_START_STEPS = 10

#: Kinds whose records belong to an optimizer step that the context assigns.
STEPPED_KINDS = frozenset(
    {"timer", "coordinator_event", "loss_scale", "comm_op", "memory", "flops_profile", "throughput"}
)


def contains_any(text: str, words: tuple[str, ...]) -> bool:
    """Whether ``text`` holds one of ``words``: the quick test parsers run on every line.

    Twice as fast as a regex of the words joined by ``|``, which Python's engine tries at
    every position of the line; and than ``any()`` over a generator, which costs half again.
    """
    for word in words:  # noqa: SIM110 (see above)
        if word in text:
            return True
    return False


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


class DiagSnapshot:
    """The unparsed/cut counts before a tentative join, to undo a join that failed."""

    def __init__(self, diag: Diagnostics) -> None:
        self.unparsed = diag.unparsed.copy()
        self.cut = diag.cut.copy()
        self.examples = {kind: list(ex) for kind, ex in diag.examples.items()}

    def restore(self, diag: Diagnostics) -> None:
        """Put the counts back as they were."""
        diag.unparsed = self.unparsed
        diag.cut = self.cut
        diag.examples = self.examples


class StepClock:
    """Tells which optimizer step a line without a step number belongs to.

    DeepSpeed prints exactly one engine global timer line per optimizer step (at the gradient
    accumulation boundary, overflow steps included), so the clock counts them in ``rel``.
    ``base`` turns that count into DeepSpeed's step number; it comes from an anchor (``step=N``,
    ``global_step=N``: printed inside step N) or from the run's start (step 1 is next).

    Until the count is known to advance (``counting``: a global timer line was seen) a stamp
    would be a guess, so none is given: the log parser holds such records. ``blind`` records
    that the count cannot work: two anchors named different steps while ``rel`` stood still,
    which is a log without wall_clock_breakdown. ``weak_start`` records that the log was read
    from its first byte (:meth:`file_start`). A stamp is a step DeepSpeed can print: 1 to
    :data:`~dsmon.model.schema.MAX_STEP`; a count that would give another (a count that
    began before the step an anchor names) gives no step. docs/step-assignment.md has the
    whole story.
    """

    def __init__(self) -> None:
        self.rel = 0
        self.weak_start = False
        self.micro: int | None = None
        self.base: int | None = None
        self.counting = False
        self.blind = False
        self.rebased = 0
        self.at_boundary = False
        self.retro = False
        self._anchored: tuple[int, int] | None = None
        self._strong = False

    def resolved(self) -> bool:
        """Whether a stamp can be decided now (a number, or known to be unknowable)."""
        return self.blind or (self.base is not None and self.counting)

    def stamp(self, rel: int) -> int | None:
        """The step of a record read while ``rel`` global lines had been seen, if knowable."""
        if self.blind or self.base is None or not self.counting:
            return None
        step = self.base + rel
        return step if 1 <= step <= MAX_STEP else None

    def current(self) -> int | None:
        """The step now in progress, if knowable."""
        return self.stamp(self.rel)

    def mark_start(self) -> None:
        """The log shows the run starting (launcher, engine init): step 1 is next."""
        if self.base is None and self.rel == 0:
            self.relaunch()

    def file_start(self) -> None:
        """The first line read is the first line of its file: perhaps the job's first.

        A job started as ``python train.py`` or ``srun python ...`` prints no launcher line,
        and at DeepSpeed's default log level no line names a step: only the file's start
        can say where step 1 is. It may also be a later part of the job's output (a rotated
        log read on its own), so the start is only taken (:meth:`settle`) once more than
        :data:`WEAK_START_STEPS` global lines went by with no line naming a step, or at the
        end of the log: at INFO level a ``step=N`` line comes before that, and numbers the
        steps as usual. Its micro-batches are counted from 0 on the same assumption: left
        unknown, a first window's two micro lines shared one index and one of them was lost
        from the per-micro breakdown.
        """
        if self.base is None and self.rel == 0 and not self.counting:
            self.weak_start = True
            self.micro = 0

    def settle(self) -> None:
        """Take the file's start for the job's start, if nothing better came (see file_start)."""
        if self.weak_start and self.base is None and self.counting and not self.blind:
            self.base = 1
            self._anchored = (0, 1)

    def relaunch(self) -> None:
        """The launcher starts the job again in the same log: step 1 is next again.

        A job retried after a crash, or started again with ``>> train.log``, writes its second
        launch after the first one's timer lines. At DeepSpeed's default log level no
        ``step=`` line says that the count restarted, so without this the second launch's
        steps would be numbered on from the first's. A launch that resumes from a checkpoint
        and prints ``step=N`` moves the count as any anchor does.
        """
        self.base = 1 - self.rel
        self.micro = 0
        self.at_boundary = False
        self._anchored = (self.rel, 1)
        self._strong = False

    def anchor(self, step_in_progress: int, weak: bool = False) -> None:
        """A line names the step in progress (``step=N`` is printed inside step N).

        Args:
            step_in_progress: the step number the line names.
            weak: the ThroughputTimer's own count, which restarts at 0 when a run resumes
                from a checkpoint; it only counts until a ``step=`` line has been seen.
        """
        if weak and self._strong:
            return
        if not 0 <= step_in_progress <= MAX_STEP:
            return  # no step DeepSpeed prints (step=9007199254740993): the count goes on
        self._strong = self._strong or not weak
        if not self.counting and self._anchored is not None:
            last_rel, last_step = self._anchored
            if last_rel == self.rel and last_step != step_in_progress:
                self.blind = True  # steps went by without a global timer line
        base = step_in_progress - self.rel
        if self.counting and self.base is not None and base != self.base:
            self.rebased += 1  # resumed run, lost lines: later stamps follow the anchor
        self.base = base
        self._anchored = (self.rel, step_in_progress)

    def end_step(self) -> None:
        """An engine global timer line: the step in progress is complete."""
        self.rel += 1
        self.micro = 0
        self.counting = True
        self.blind = False
        self.at_boundary = True
        if self.weak_start and self.base is None and self.rel > WEAK_START_STEPS:
            self.settle()

    def next_micro(self) -> int | None:
        """0-based index of the micro-batch whose timer line is being read (None mid-window)."""
        self.at_boundary = False
        m = self.micro
        if m is not None:
            self.micro = m + 1
        return m

    def stamp_previous(self) -> None:
        """The line being read reports on the step that just ended (``Engine after step``).

        Only right after a global timer line; the log parser then stamps this line's records
        with the previous count.
        """
        if self.at_boundary and self.rel > 0:
            self.retro = True

    def take_retro(self) -> bool:
        """Whether the last line asked for :meth:`stamp_previous` (and forget it)."""
        retro, self.retro = self.retro, False
        return retro

    def state(self) -> dict[str, Any]:
        """The count and its base as JSON values, for the next file of the same output.

        A log rotated while the job writes on (copytruncate, rename) goes on in a new file
        that does not start with the run: without this its timer lines could not be
        numbered at DeepSpeed's default log level, which prints no ``step=`` anchor.
        """
        anchored = list(self._anchored) if self._anchored is not None else None
        return {
            "rel": self.rel, "micro": self.micro, "base": self.base, "counting": self.counting,
            "blind": self.blind, "rebased": self.rebased, "at_boundary": self.at_boundary,
            "anchored": anchored, "strong": self._strong, "weak_start": self.weak_start,
        }  # fmt: skip

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> StepClock:
        """The clock :meth:`state` describes; ``ValueError`` when it describes none."""
        clock = cls()
        ints = {"rel": False, "micro": True, "base": True, "rebased": False}
        for name, optional in ints.items():
            value = state.get(name)
            if not (type(value) is int or (optional and value is None)):
                raise ValueError(f"step clock state: '{name}' is {value!r}")
            setattr(clock, name, value)
        for name in ("counting", "blind", "at_boundary", "strong", "weak_start"):
            if type(state.get(name)) is not bool:
                raise ValueError(f"step clock state: '{name}' is {state.get(name)!r}")
        clock.counting, clock.blind = state["counting"], state["blind"]
        clock.at_boundary, clock._strong = state["at_boundary"], state["strong"]
        clock.weak_start = state["weak_start"]
        anchored = state.get("anchored")
        if anchored is not None:
            if not (isinstance(anchored, list) and [type(v) for v in anchored] == [int, int]):
                raise ValueError(f"step clock state: 'anchored' is {anchored!r}")
            clock._anchored = (anchored[0], anchored[1])
        return clock


class ParseContext:
    """Per-file state shared by the sub-parsers: identity, clock, timestamps, diagnostics."""

    def __init__(self, run: str, file: str | None = None, node: str | None = None) -> None:
        self.run = run
        self.file = file
        self.node = node
        self.clock = StepClock()
        self.last_ts: str | None = None
        self.diag = Diagnostics()
        #: True while a line is offered for the last time (no continuation will be joined), so
        #: a parser parses what it has instead of returning NEED_MORE.
        self.final = False
        #: True while the line offered is several physical lines joined (terminal wrapping):
        #: a parser must not salvage part of it, as the join point may fall inside a number.
        self.joined = False
        #: Records of a block that ended on a line of someone else's: the parser that saw the
        #: end returns None for that line and leaves the block's records here.
        self.pending: list[Record] = []
        #: The progress bar the physical line being read begins with, and the last one drawn
        #: (``LineCleaner.bar``, ``last_bar``): the step a Trainer's log dict belongs to.
        self.bar: Bar | None = None
        self.last_bar: Bar | None = None

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

    def bad_timestamp(self, line: LogLine, printed: str) -> None:
        """A timestamp that names no real moment: dropped from the records, counted here."""
        self.diag.note(self.diag.unparsed, "timestamp", f"{self.where(line)}: field 'ts'", printed)

    def bad_value(self, line: LogLine, name: str, printed: str) -> None:
        """A value no record field can hold (``nan`` bytes, a count past 64 bits): left out."""
        where = f"{self.where(line)}: field {name!r}"
        self.diag.note(self.diag.unparsed, OUT_OF_RANGE, where, printed.strip())

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


class LineParser(Protocol):
    """A whole file's parser, fed line by line: ``LogParser`` or ``ProbeParser``.

    The collector and ``dsmon import`` read a log and a probe file the same way.
    """

    @property
    def diag(self) -> Diagnostics:
        """What could not be parsed so far."""

    @property
    def file(self) -> str | None:
        """The file name the records carry (for ``file:line`` in diagnostics)."""

    def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list[Record]:
        """The records of one physical line."""

    def finish(self) -> list[Record]:
        """End of input: what the parser still holds."""

    def peek(self, partial: str) -> list[Record]:
        """Live: records held for the line being written that its start (so far) decides."""

    def handover(self) -> dict[str, Any]:
        """After :meth:`finish`: what the parser of the output's next file starts from.

        JSON values, kept in the collector's saved position; empty when nothing carries.
        """

    def take_over(self, state: Mapping[str, Any]) -> None:
        """Go on from what :meth:`handover` gave; ``ValueError`` on a state it did not give."""
