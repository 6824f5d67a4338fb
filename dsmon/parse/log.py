"""The incremental log parser: physical lines in, records out, for replay and live tailing alike.

:class:`LogParser` cleans each physical line (``lines.LineCleaner``), offers the logical
lines to the sub-parsers, joins terminal-wrapped lines, and assigns optimizer steps to the
records that carry none (``base.StepClock``). It does no I/O: the caller feeds lines, so
``dsmon parse``, ``dsmon import`` and the live tailer share one code path and one result.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from dsmon.model.check import fit
from dsmon.model.records import Record, with_step
from dsmon.parse import signatures
from dsmon.parse.base import (
    NEED_MORE,
    OUT_OF_RANGE,
    PARSER_ERROR,
    STEPPED_KINDS,
    Diagnostics,
    DiagSnapshot,
    ParseContext,
    StepClock,
    SubParser,
)
from dsmon.parse.families.autotuner import AutotunerParser
from dsmon.parse.families.comms import CommsParser
from dsmon.parse.families.config_dump import ConfigDumpParser
from dsmon.parse.families.events import EventParser
from dsmon.parse.families.flops_profiler import FlopsProfilerParser
from dsmon.parse.families.loss_scale import LossScaleParser
from dsmon.parse.families.megatron import MegatronParser
from dsmon.parse.families.memory import MemoryParser
from dsmon.parse.families.progress import ProgressParser
from dsmon.parse.families.timers import PlainShape, TimerParser
from dsmon.parse.families.trainer import TrainerParser
from dsmon.parse.launches import is_relaunch, is_start
from dsmon.parse.lines import LineCleaner, LogLine, leading_bar
from dsmon.parse.unparsed import UnparsedReport

logger = logging.getLogger(__name__)

#: Records waiting for the step clock to learn its base, at most this many (then released
#: with ``step`` None, so a log that never anchors is not held back). In live mode, the number
#: of records sent without a step that are remembered to be sent again once it is known.
MAX_HELD = 5000
MAX_JOINS = 4


def default_parsers() -> list[SubParser]:
    """One instance of every DeepSpeed line parser, in the order lines are offered to them."""
    return [
        TimerParser(),
        ProgressParser(),
        CommsParser(),
        FlopsProfilerParser(),
        LossScaleParser(),
        ConfigDumpParser(),
        MemoryParser(),
        MegatronParser(),
        AutotunerParser(),
        TrainerParser(),
        EventParser(),
    ]


class LogParser:
    """Parses one log file (or stream) incrementally.

    Args:
        run: the run name every record is filed under.
        file: the file name recorded in each record's Source.
        node: the node (host) name, when the caller knows it.
        parsers: sub-parsers to use; :func:`default_parsers` when omitted. Only the whole
            set looks for known lines behind unknown prefixes and counts those none reads
            (a side file read by one parser holds nothing of the other kinds).
        live: never hold a record back waiting for its step number. A live view must show
            what the log says within a second, and a log may go on for hours before it
            names a step (DeepSpeed's default log level prints no ``step=`` lines). Records
            whose step is not known yet are emitted at once with ``step`` None and emitted
            *again*, with the step, when the clock learns it; the store fills the step of
            the copy it already has (same identity key). Offline (``dsmon parse``/``import``)
            each record is emitted once, with its step, after holding.
        from_start: the first line fed is the first the job printed (a file known by its
            path to hold a worker's whole output), whatever the lines say.
    """

    def __init__(
        self,
        run: str,
        file: str | None = None,
        node: str | None = None,
        parsers: Sequence[SubParser] | None = None,
        *,
        live: bool = False,
        from_start: bool = False,
    ) -> None:
        self.ctx = ParseContext(run, file, node)
        if from_start:
            self.ctx.clock.mark_start()
        self.live = live
        self._parsers = list(parsers) if parsers is not None else default_parsers()
        self._signatures = parsers is None
        first = self._parsers[0] if self._parsers else None
        #: The timer parser when it sees every line first: then the vector path may read
        #: plain timer lines for it (``take_timer``).
        self._timers = first if isinstance(first, TimerParser) else None
        second = self._parsers[1] if len(self._parsers) > 1 else None
        #: The progress parser when it sees every line second, after the timer parser (which
        #: reads no progress line): then the vector path may read plain progress lines for it
        #: (``take_progress_row``).
        self._progress = (
            second if self._timers is not None and isinstance(second, ProgressParser) else None
        )
        self._cleaner = LineCleaner()
        self._lineno = 0
        self._carry: LogLine | None = None
        self._chain: list[LogLine] = []
        self._saved: DiagSnapshot | None = None
        self._held: list[tuple[Record, int | None]] = []  # rel to stamp with, None: keep
        self._sent_unstamped: deque[tuple[Record, int]] = deque(maxlen=MAX_HELD)  # live mode
        self._gave_up = False
        self._at_start = True  # no line fed yet
        self._unparsed = UnparsedReport()
        self._last: LogLine | None = None  # the last line read: where an unparsed count is told
        #: The last line read when it was a plain timer line (``take_timer``): its LogLine is
        #: made only if the end needs it.
        self._plain_last: tuple[int, int, str | None, int | None] | None = None

    @property
    def diag(self) -> Diagnostics:
        """What could not be parsed so far."""
        return self.ctx.diag

    @property
    def file(self) -> str | None:
        """The file name in each record's Source."""
        return self.ctx.file

    def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list[Record]:
        """Parse one physical line (with or without its newline)."""
        self._lineno = line if line is not None else self._lineno + 1
        self.ctx.diag.lines += 1
        if self._at_start:
            self._at_start = False
            if offset == 0:
                self.ctx.clock.file_start()
        out: list[Record] = []
        cleaner = self._cleaner
        try:
            logicals = cleaner.clean(raw, self._lineno, offset)
        except Exception as exc:  # noqa: BLE001 - no line may stop a log (see _failed_on)
            self._failed_on(LogLine(text=raw.rstrip("\r\n"), line=self._lineno), "cleaning", exc)
            return []
        self.ctx.bar, self.ctx.last_bar = cleaner.bar, cleaner.last_bar
        for logical in logicals:
            if logical.bad_ts is not None:
                self.ctx.bad_timestamp(logical, logical.bad_ts)
            try:
                self._take(logical, out)
            except Exception as exc:  # noqa: BLE001 - a fault in joining: drop the join
                self._carry, self._chain = None, []
                self._failed_on(logical, "joining", exc)
        self._last = logicals[-1]
        # most lines make no record and release none held: nothing to number or fit
        held = self._held or self._sent_unstamped
        records = self._fitted(self._assign_steps(out)) if out or held else out
        if self.ctx.diag.unparsed and self._carry is None:  # a join on trial may be undone
            records += self._told(self._last, final=False)
        return records

    def _told(self, last: LogLine, final: bool) -> list[Record]:
        """The unparsed events due once the records before them were fitted (:meth:`_fitted`).

        Told after the fit, so a value it leaves out is told at its own line, as the vector
        path (``dsmon.load.vector``) tells it too, not at whichever line is read next.
        """
        told: list[Record] = []
        events = self._unparsed.events(self.ctx, last, final=final)
        self._stamp(events, self.ctx.clock.rel, told)
        return self._assign_steps(told)

    def quiet(self) -> bool:
        """Whether a plain timer line may now be given to :meth:`take_timer` instead of :meth:`feed`.

        It may while nothing the parser holds could make ``feed`` read the line otherwise: no
        line joined on trial, no block open or pending, no record held for its step and the
        steps known, no step to be read back; offline, with the default parsers (the timer
        parser, first among them, takes such a line).
        """
        ctx = self.ctx
        return (
            self._carry is None
            and not self._held
            and not ctx.pending
            and not self.live
            and self._timers is not None
            and ctx.clock.resolved()
            and not ctx.clock.retro
            and not any(p.in_block for p in self._parsers)
        )

    def take_timer(
        self, line: int, offset: int, ts: str | None, rank: int | None, shape: PlainShape
    ) -> tuple[int | None, int | None, str, str | None]:
        """A plain timer line the vector path read (``dsmon.load.vector``), while :meth:`quiet`.

        The parser moves as :meth:`feed` would move it for the line (the cleaner, the counts,
        the last time read, the step clock); returned is what the line's record holds beside
        the line's own fields: ``(step, micro_step, group, ts)``. Such a line has no launcher
        or paste about it and a valid time (the vector path leaves out every other), so it
        starts nothing and is counted nowhere.
        """
        ctx = self.ctx
        self._read_plain(line, offset)
        if ts is not None:
            ctx.last_ts = ts
        clock = ctx.clock
        rel = clock.rel
        assert self._timers is not None  # quiet() says so
        group, micro = self._timers.advance(shape.group, ctx)
        self._last = None
        self._plain_last = (line, offset, ts, rank)
        ctx.diag.records += 1
        return clock.stamp(rel), micro, group, ctx.last_ts

    def _read_plain(self, line: int, offset: int | None) -> None:
        """A line the vector path read whole is read: what :meth:`feed` does before the parsers.

        Such a line starts with a header, ``[Rank N]`` or a word, and holds no bar, paste or
        second line (``LineCleaner.plain_line``).
        """
        ctx = self.ctx
        self._lineno = line
        ctx.diag.lines += 1
        if self._at_start:
            self._at_start = False
            if offset == 0:
                ctx.clock.file_start()
        self._cleaner.plain_line()
        ctx.bar = None
        ctx.final = False

    def takes_progress(self) -> bool:
        """Whether :meth:`take_progress_row` may be used at all (the default parsers, offline)."""
        return self._progress is not None and not self.live

    def take_progress_row(
        self, line: int, offset: int, ts: str | None, rank: int | None, step: int, timed: bool
    ) -> tuple[int | None, str | None]:
        """A plain progress line whose row the vector path makes itself, while :meth:`quiet`.

        ``step`` is the ``step=N`` of a step line, or a throughput line's ``global_step``
        (``timed``). The parser moves as :meth:`feed` would move it (the cleaner, the counts,
        the last time read, the step clock, the progress parser's memory of the last
        ``step=``); returned is what the line's record holds beside the line's own figures:
        ``(step, ts)``. Such a line has no launcher or paste about it and a valid time (the
        vector path leaves out every other), so it starts nothing; its figures are ones the
        record holds as they are (``dsmon.load.plain_rows.ProgressRows`` gives every other to
        :meth:`feed`), so it is counted nowhere. The timer parser, offered such a line first
        by :meth:`feed`, takes none.
        """
        ctx = self.ctx
        self._read_plain(line, offset)
        if ts is not None:
            ctx.last_ts = ts
        progress = self._progress
        assert progress is not None  # takes_progress() says so
        if timed:
            own = progress.timed(step, ctx)
        else:
            progress.stepped(step, ctx)
            own = step
        self._last = None
        self._plain_last = (line, offset, ts, rank)
        ctx.diag.records += 1
        return own, ctx.last_ts

    def feed_lines(self, lines: Iterable[str]) -> Iterator[Record]:
        """Parse a whole stream, then finish it."""
        for raw in lines:
            yield from self.feed(raw)
        yield from self.finish()

    def finish(self) -> list[Record]:
        """End of input: flush wrapped lines and open blocks, release held records."""
        out: list[Record] = []
        if self._carry is not None:
            self._end_chain(out)
        rel = self.ctx.clock.rel
        for p in self._parsers:
            try:
                recs = p.finish(self.ctx)
            except Exception as exc:  # noqa: BLE001 - what it held is lost, nothing else
                self._failed_on(None, type(p).__name__, exc)
                continue
            self._stamp(recs, rel, out)  # behind held records, like any line's
        self.ctx.clock.settle()  # a log read from its start that never named a step
        last = self._last
        if last is None and self._plain_last is not None:
            at, offset, ts, rank = self._plain_last
            last = LogLine(text="", line=at, offset=offset, ts=ts, rank=rank)
        out = self._assign_steps(out)
        out.extend(rec for rec, _ in self._held)  # never numbered: no anchor, no count
        self.ctx.diag.records += len(self._held)
        self._held.clear()
        self._sent_unstamped.clear()
        out = self._fitted(out)
        return out + self._told(last, final=True) if last is not None else out

    def peek(self, partial: str) -> list[Record]:
        """Live: records held for the line being written, once its start decides them.

        A Trainer's dict waits for the bar tqdm draws right after it (``dsmon.parse.families.trainer``),
        which begins a line that ends only with the next dict, minutes later.
        """
        bar = leading_bar(partial)
        out: list[Record] = []
        for p in self._parsers if bar is not None else ():
            release = getattr(p, "release_on_bar", None)
            if release is None:
                continue
            try:
                recs = release(bar)
            except Exception as exc:  # noqa: BLE001 - the line is parsed whole when complete
                self._failed_on(None, type(p).__name__, exc)
                continue
            self._stamp(recs, self.ctx.clock.rel, out)
        return self._fitted(self._assign_steps(out)) if out else out

    def handover(self) -> dict[str, Any]:
        """After :meth:`finish`: the step clock and the last time read, for the next file.

        A collector starts a new parser for each file a rotated log goes on in; the job's
        output goes on too, so its steps and times carry over (``take_over``).
        """
        return {"clock": self.ctx.clock.state(), "last_ts": self.ctx.last_ts}

    def take_over(self, state: Mapping[str, Any]) -> None:
        """Go on counting steps from :meth:`handover`; ``ValueError`` on any other state."""
        clock, last_ts = state.get("clock"), state.get("last_ts")
        if not isinstance(clock, Mapping) or not (last_ts is None or isinstance(last_ts, str)):
            raise ValueError(f"parser state: not one a parser handed over: {dict(state)!r}")
        self.ctx.clock = StepClock.from_state(clock)
        self.ctx.last_ts = last_ts

    def _take(self, logical: LogLine, out: list[Record]) -> None:
        """One logical line: the continuation of a terminal-wrapped line, or a line of its own.

        A parser that finds a line cut short returns NEED_MORE; the line is then joined with the
        next ones while they carry no header of their own (at most MAX_JOINS). A join that no
        parser takes, or that a parser counts as unparsed, was no continuation after all (the
        line just happened to end early): it is undone, the first line is parsed as it is and
        the others are taken again as the lines they are.
        """
        if self._carry is None:
            self._dispatch(logical, out)
            if self._carry is not None:
                self._chain = [logical]
                self._saved = DiagSnapshot(self.ctx.diag)
            return
        if logical.prefixed or not logical.text or len(self._chain) > MAX_JOINS:
            self._end_chain(out)
            self._take(logical, out)
            return
        joined = dataclasses.replace(self._carry, text=self._carry.text + logical.text)
        self._carry = None
        mark = self._mark(out)
        taken = self._dispatch(joined, out, whole=False)
        if self._carry is not None:
            self._chain.append(logical)  # still cut: wait for the next piece
        elif self._failed(taken, mark, out):
            self._undo_chain(out, [logical])
        else:
            self._chain = []

    def _end_chain(self, out: list[Record]) -> None:
        """No continuation follows: parse the wrapped line as it is, or undo a failed join."""
        carry, self._carry = self._carry, None
        assert carry is not None
        mark = self._mark(out)
        self.ctx.joined = len(self._chain) > 1
        taken = self._dispatch(carry, out, final=True, whole=not self.ctx.joined)
        self.ctx.joined = False
        if len(self._chain) > 1 and self._failed(taken, mark, out):
            self._undo_chain(out, [])  # may leave a new wrapped line (and its chain) pending
        else:
            self._chain = []

    def _mark(self, out: list[Record]) -> tuple[int, int]:
        """Records made so far and unparsed lines counted so far, to judge a join."""
        return len(out) + len(self._held), sum(self.ctx.diag.unparsed.values())

    def _failed(self, taken: bool, mark: tuple[int, int], out: list[Record]) -> bool:
        """A join failed if no parser took it, or one counted it unparsed and made nothing.

        A parser that salvaged records from a broken join keeps them (undoing would count
        the step clock twice); only a join that produced nothing is undone.
        """
        made, unparsed = self._mark(out)
        return made == mark[0] and (not taken or unparsed != mark[1])

    def _undo_chain(self, out: list[Record], more: list[LogLine]) -> None:
        """Parse the first line of a failed join on its own, then take the others again."""
        chain, self._chain = self._chain, []
        if self._saved is not None:
            self._saved.restore(self.ctx.diag)
        self._dispatch(chain[0], out, final=True)
        for piece in chain[1:] + more:
            self._take(piece, out)

    def _dispatch(
        self, line: LogLine, out: list[Record], final: bool = False, whole: bool = True
    ) -> bool:
        """Offer a logical line to the parsers; behind an unknown prefix, offer its message.

        Returns whether a parser took the line. A line no parser takes that carries a known
        kind's signature (:mod:`dsmon.parse.signatures`) is offered again from where the
        signature starts; if still no parser takes it, it is counted as unparsed under that
        kind: a DeepSpeed line is never dropped without a word. Not so for lines joined on
        trial (``whole`` False): a join no parser takes is undone, and its lines are offered
        (and counted) one by one.
        """
        ctx = self.ctx
        ctx.final = final
        if self._offer(line, out):
            return True
        found = signatures.find(line.text) if self._signatures and whole else None
        if found is None:
            return False
        kind, at = found
        if at > 0:
            inner = signatures.behind(line, at)
            if inner.bad_ts is not None and line.bad_ts is None:
                ctx.bad_timestamp(inner, inner.bad_ts)
            if self._offer(inner, out):
                return True
        if signatures.counted(kind):
            ctx.unparsed(kind, line)
        return False

    def _offer(self, line: LogLine, out: list[Record]) -> bool:
        """Offer a line to the parser inside a block first, then to all in order.

        Returns whether a parser took the line.
        """
        ctx = self.ctx
        if line.yearless is not None:  # torchrun's glog header: no year printed
            line.date_in_year_of(ctx.last_ts)
        if line.ts is not None:
            ctx.last_ts = line.ts
        clock = ctx.clock
        if clock.counting:
            if is_relaunch(line):
                clock.relaunch()
        elif clock.base is None and clock.rel == 0 and is_start(line):
            clock.mark_start()
        rel = clock.rel
        for p in self._ordered():
            try:
                recs = p.feed(line, ctx)
            except Exception as exc:  # noqa: BLE001 - no line may stop a log (see _failed_on)
                self._failed_on(line, type(p).__name__, exc)
                recs = []
            if recs is None:
                continue
            if ctx.pending:
                self._drain(rel, out)
            if recs is NEED_MORE:
                if not ctx.final:
                    self._carry = line
                    return True
                recs = []
            if clock.retro and clock.take_retro():
                rel -= 1
            if recs:
                self._stamp(recs, rel, out)
            return True
        if ctx.pending:
            self._drain(rel, out)
        return False

    def _failed_on(self, line: LogLine | None, who: str, exc: Exception) -> None:
        """A parser raised on a line: count the line as not understood and go on with the next.

        Whatever a log holds, no line may stop it: a parser's exception that escaped here
        once made ``dsmon import`` store nothing of the file, and made a collector read the
        same line again at every poll, for ever, delivering nothing after it. The line is
        counted (``diag.unparsed``, kind :data:`PARSER_ERROR`) with the exception, and the
        first few are logged, since each is a fault of dsmon to report.
        """
        diag = self.ctx.diag
        where = self.ctx.where(line) if line is not None else f"{self.ctx.file or '-'}:end"
        text = f"{who} raised {type(exc).__name__}: {exc}"
        if line is not None:
            text += f" | {line.text}"
        diag.note(diag.unparsed, PARSER_ERROR, where, text)
        if diag.unparsed[PARSER_ERROR] <= 3:
            logger.warning("dsmon: %s: %s; the line is skipped", where, text[:300])

    def _fitted(self, out: list[Record]) -> list[Record]:
        """The records as the store takes them: a value no record can hold is left out, counted.

        See :func:`dsmon.model.check.fit`; almost every record passes one compiled check.
        """
        fitted: list[Record] | None = None
        for i, rec in enumerate(out):
            new, problems = fit(rec)
            if not problems:
                if fitted is not None:
                    fitted.append(rec)
                continue
            if fitted is None:
                fitted = out[:i]
            where = f"{self.ctx.file or '-'}:{rec.src.line}"
            for problem in problems:
                self.ctx.diag.note(self.ctx.diag.unparsed, OUT_OF_RANGE, where, problem)
            if new is None:
                self.ctx.diag.records -= 1
            else:
                fitted.append(new)
        return out if fitted is None else fitted

    def _drain(self, rel: int, out: list[Record]) -> None:
        """Records of a block that ended before this line (``ParseContext.pending``)."""
        pending, self.ctx.pending = self.ctx.pending, []
        self._stamp(pending, rel, out)

    def _ordered(self) -> Iterable[SubParser]:
        """Parsers in a block get the line before the others."""
        for p in self._parsers:
            if p.in_block:
                break
        else:  # no block open, the common case: no list built per line
            return self._parsers
        active = [p for p in self._parsers if p.in_block]
        return active + [p for p in self._parsers if not p.in_block]

    def _stamp(self, recs: list[Record], rel: int, out: list[Record]) -> None:
        """Give stepped records the step in progress when their line was read, or hold them.

        While records are held, the others wait behind them, so records leave in file order.
        """
        clock = self.ctx.clock
        resolved, step = clock.resolved(), clock.stamp(rel)  # the same for all of ``recs``
        for rec in recs:
            needs = rec.step is None and rec.KIND in STEPPED_KINDS
            if not resolved:
                if self.live and needs:
                    out.append(rec)
                    self._sent_unstamped.append((rec, rel))
                    continue
                if not self._gave_up and (needs or self._held):
                    self._held.append((rec, rel if needs else None))
                    continue
            out.append(_with_step(rec, step) if needs else rec)

    def _assign_steps(self, out: list[Record]) -> list[Record]:
        """Release held records once the clock can decide (or too many are held)."""
        if self._sent_unstamped and self.ctx.clock.resolved():
            out = self._restamped() + out
        if self._held:
            clock = self.ctx.clock
            if clock.resolved():
                fixed = [
                    rec if rel is None else _with_step(rec, clock.stamp(rel))
                    for rec, rel in self._held
                ]
                self._held.clear()
                out = fixed + out
            elif len(self._held) > MAX_HELD:
                out = [r for r, _ in self._held] + out
                self._held.clear()
                self._gave_up = True  # from now on unnumbered records are not held back
        self.ctx.diag.records += len(out)
        return out

    def _restamped(self) -> list[Record]:
        """Live mode: copies, now with their step, of records already sent without one.

        Not counted in ``diag.records``: they are the same records, sent again. A blind clock
        numbers nothing, so nothing is sent again then.
        """
        clock = self.ctx.clock
        again = [
            dataclasses.replace(rec, step=step)
            for rec, rel in self._sent_unstamped
            if (step := clock.stamp(rel)) is not None
        ]
        self._sent_unstamped.clear()
        self.ctx.diag.records -= len(again)
        return again


def _with_step(rec: Record, step: int | None) -> Record:
    """The record with its step (a new record), the same record when the step is unknown."""
    return rec if step is None else with_step(rec, step)


def parse_text(
    text: str, run: str = "run", file: str | None = None, node: str | None = None
) -> tuple[list[Record], Diagnostics]:
    """Parse a whole text at once (tests, small files)."""
    parser = LogParser(run, file, node)
    recs = list(parser.feed_lines(text.splitlines()))
    return recs, parser.diag


ParserFactory = Callable[[], Sequence[SubParser]]
