"""The incremental log parser: physical lines in, records out, for replay and live tailing alike.

:class:`LogParser` cleans each physical line (``lines.LineCleaner``), offers the logical
lines to the sub-parsers, joins terminal-wrapped lines, and assigns optimizer steps to the
records that carry none (``base.StepClock``). It does no I/O: the caller feeds lines, so
``dsmon parse``, ``dsmon import`` and the live tailer share one code path and one result.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence

from dsmon.parsers.base import NEED_MORE, STEPPED_KINDS, Diagnostics, ParseContext, SubParser
from dsmon.parsers.lines import LineCleaner, LogLine
from dsmon.records import Record

#: Records waiting for the step clock to learn its base, at most this many (then released
#: with ``step`` None, so a live log that never anchors is not held back).
MAX_HELD = 5000
MAX_JOINS = 4
_START_LOGGERS = frozenset({"runner.py", "launch.py"})
_START_TEXTS = ("DeepSpeed info:", "Initializing TorchBackend", "DeepSpeedEngine configuration")


def default_parsers() -> list[SubParser]:
    """One instance of every DeepSpeed line parser, in the order lines are offered to them."""
    from dsmon.parsers.comms import CommsParser
    from dsmon.parsers.config_dump import ConfigDumpParser
    from dsmon.parsers.events import EventParser
    from dsmon.parsers.flops_profiler import FlopsProfilerParser
    from dsmon.parsers.loss_scale import LossScaleParser
    from dsmon.parsers.megatron import MegatronParser
    from dsmon.parsers.memory import MemoryParser
    from dsmon.parsers.progress import ProgressParser
    from dsmon.parsers.timers import TimerParser

    return [
        TimerParser(),
        ProgressParser(),
        CommsParser(),
        FlopsProfilerParser(),
        LossScaleParser(),
        ConfigDumpParser(),
        MemoryParser(),
        MegatronParser(),
        EventParser(),
    ]


class LogParser:
    """Parses one log file (or stream) incrementally.

    Args:
        run: the run name every record is filed under.
        file: the file name recorded in each record's Source.
        node: the node (host) name, when the caller knows it.
        parsers: sub-parsers to use; :func:`default_parsers` when omitted.
    """

    def __init__(
        self,
        run: str,
        file: str | None = None,
        node: str | None = None,
        parsers: Sequence[SubParser] | None = None,
    ) -> None:
        self.ctx = ParseContext(run, file, node)
        self._parsers = list(parsers) if parsers is not None else default_parsers()
        self._cleaner = LineCleaner()
        self._lineno = 0
        self._carry: LogLine | None = None
        self._joins = 0
        self._held: list[tuple[Record, int]] = []

    @property
    def diag(self) -> Diagnostics:
        """What could not be parsed so far."""
        return self.ctx.diag

    def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list[Record]:
        """Parse one physical line (with or without its newline)."""
        self._lineno = line if line is not None else self._lineno + 1
        self.ctx.diag.lines += 1
        out: list[Record] = []
        for logical in self._cleaner.clean(raw, self._lineno, offset):
            rest = self._join_carry(logical, out) if self._carry is not None else logical
            if rest is not None:
                self._dispatch(rest, out)
        return self._assign_steps(out)

    def feed_lines(self, lines: Iterable[str]) -> Iterator[Record]:
        """Parse a whole stream, then finish it."""
        for raw in lines:
            yield from self.feed(raw)
        yield from self.finish()

    def finish(self) -> list[Record]:
        """End of input: flush wrapped lines and open blocks, release held records."""
        out: list[Record] = []
        if self._carry is not None:
            carry, self._carry = self._carry, None
            self._dispatch(carry, out, final=True)
        for p in self._parsers:
            out.extend(p.finish(self.ctx))
        out = self._assign_steps(out)
        out.extend(rec for rec, _ in self._held)
        self.ctx.diag.records += len(self._held)
        self._held.clear()
        return out

    def _join_carry(self, logical: LogLine, out: list[Record]) -> LogLine | None:
        """Join a terminal-wrapped line with its continuation, or give up on the join."""
        carry = self._carry
        assert carry is not None
        self._carry = None
        if logical.prefixed or not logical.text or self._joins >= MAX_JOINS:
            self._dispatch(carry, out, final=True)
            return logical
        carry.text += logical.text
        self._dispatch(carry, out, final=self._joins + 1 >= MAX_JOINS)
        return None

    def _dispatch(self, line: LogLine, out: list[Record], final: bool = False) -> None:
        """Offer a logical line to the parser inside a block first, then to all in order."""
        ctx = self.ctx
        if line.ts is not None:
            ctx.last_ts = line.ts
        clock = ctx.clock
        if clock.base is None and clock.rel == 0 and _is_start(line):
            clock.mark_start()
        rel = clock.rel
        for p in self._ordered():
            recs = p.feed(line, ctx)
            if recs is None:
                continue
            if recs is NEED_MORE:
                if not final:
                    self._carry = line
                    self._joins += 1
                    return
                recs = []
            self._joins = 0
            self._stamp(recs, rel, out)
            return
        self._joins = 0

    def _ordered(self) -> Iterable[SubParser]:
        """Parsers in a block get the line before the others."""
        active = [p for p in self._parsers if p.in_block]
        if not active:
            return self._parsers
        return active + [p for p in self._parsers if not p.in_block]

    def _stamp(self, recs: list[Record], rel: int, out: list[Record]) -> None:
        """Give stepped records the step in progress when their line was read."""
        base = self.ctx.clock.base
        for rec in recs:
            if rec.step is None and rec.KIND in STEPPED_KINDS:
                if base is None:
                    self._held.append((rec, rel))
                    continue
                rec = dataclasses.replace(rec, step=base + rel)
            out.append(rec)

    def _assign_steps(self, out: list[Record]) -> list[Record]:
        """Release held records once the clock has a base (or too many are held)."""
        if self._held:
            base = self.ctx.clock.base
            if base is not None:
                fixed = [dataclasses.replace(r, step=base + rel) for r, rel in self._held]
                self._held.clear()
                out = fixed + out
            elif len(self._held) > MAX_HELD:
                out = [r for r, _ in self._held] + out
                self._held.clear()
        self.ctx.diag.records += len(out)
        return out


def _is_start(line: LogLine) -> bool:
    """Launcher or engine-init output: the log begins with the run, not in the middle."""
    return line.logger in _START_LOGGERS or line.text.startswith(_START_TEXTS)


def parse_text(
    text: str, run: str = "run", file: str | None = None, node: str | None = None
) -> tuple[list[Record], Diagnostics]:
    """Parse a whole text at once (tests, small files)."""
    parser = LogParser(run, file, node)
    recs = list(parser.feed_lines(text.splitlines()))
    return recs, parser.diag


ParserFactory = Callable[[], Sequence[SubParser]]
