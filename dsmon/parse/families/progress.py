"""Progress lines: ``step=N, skipped=S, lr=[...], mom=[...]``, ThroughputTimer, pipeline ``steps:``.

These are the lines that carry a step number of their own, so besides their records they
anchor the step clock. ``step=N`` is printed inside step N (and ``step=0`` at engine init,
before step 1). The ThroughputTimer line follows it in the same step; its ``global_step``
is the timer's own count, which restarts at 0 when a run resumes from a checkpoint, so a
``step=`` number read just before it wins and the timer's count only anchors weakly. The
pipeline engine's ``steps: N`` line is printed after step N is complete.

Every form since v0.3 is read: ``E/M, SamplesPerSec=X`` (v0.3-0.6, sometimes with memory),
``E/M, RunningAvgSamplesPerSec=...`` (v0.7) and ``epoch=E/micro_step=M/global_step=G, ...``
(v0.8+, values may be ``-inf`` before timing starts: stored as None).
"""

from __future__ import annotations

import math
import re

from dsmon.model import units
from dsmon.model.records import IterationRecord, Record, StepRecord, ThroughputRecord
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine

#: The step line's message (``mom`` holds numbers, tuples and lists only: a wrapped line joined
#: with the next line's header, ``mom=`` + ``[`` + ``[2023-04-18 01:47:43,854] [INFO]``, must not
#: read as momentum). A pattern text, also matched in compiled code by the vector path
#: (``dsmon.load.vector``), there with ASCII digits and spaces only.
STEP_MESSAGE = (
    r"step=(\d+), skipped=(\d+), lr=(\[[-+.\deEinfa\s,]*\]), mom=(\[[-+.\deE\s,()\[\]]*\])\s*$"
)
_STEP = re.compile(STEP_MESSAGE)
_STEP_HEAD = re.compile(r"step=\d+, skipped=\d+, ")
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)")
_GROUP = re.compile(r"[(\[]([^()\[\]]*)[)\]]")
_TPUT_NEW = re.compile(r"epoch=(\d+)/micro_step=(\d+)/global_step=(\d+), (.*)$")
_TPUT_OLD = re.compile(r"(\d+)/(\d+), ((?:SamplesPerSec|RunningAvgSamplesPerSec)=.*)$")
#: Keys read from a throughput line. Before v0.7 ``SamplesPerSec`` was the running average.
_RATES = ("CurrSamplesPerSec", "RunningAvgSamplesPerSec", "SamplesPerSec")
_MEMORY = ("MemAllocated", "MaxMemAllocated")
_N = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)"
_PIPE = re.compile(
    rf"steps: (\d+) loss: ({_N}) (.*?)iter time \(s\): ({_N}) samples/sec: (\d+\.\d{{3}}|inf)\s*$"
)
_PIPE_LOSS = re.compile(rf"([^:]+?): ({_N}) ")
_DIGITS = re.compile(r"\d*")
_TPUT_END = re.compile(r"MaxMemAllocated=\d+(?:\.\d+)?GB\s*$")
_PLAIN_RATE = r"([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)"
#: A memory figure whose bytes an int64 holds.
_PLAIN_GB = r"([0-9]{1,9}(?:\.[0-9]+)?)GB"
#: Digits of a count that is a step a record may name (below ``schema.MAX_STEP``).
PLAIN_COUNT_DIGITS = 15
_PLAIN_COUNT = rf"([0-9]{{1,{PLAIN_COUNT_DIGITS}}})"
#: The ThroughputTimer line of v0.8+ as it almost always is: every figure a plain number that
#: its record holds as it is, the four keys in DeepSpeed's order. A subset of what
#: :class:`ProgressParser` reads whole, matched in compiled code by the vector path
#: (``dsmon.load.vector``); groups: epoch, micro_step, global_step, the running and the
#: current rate, memory and peak memory in GB.
PLAIN_THROUGHPUT = (
    rf"epoch={_PLAIN_COUNT}/micro_step={_PLAIN_COUNT}/global_step={_PLAIN_COUNT}, "
    rf"RunningAvgSamplesPerSec={_PLAIN_RATE}, CurrSamplesPerSec={_PLAIN_RATE}, "
    rf"MemAllocated={_PLAIN_GB}, MaxMemAllocated={_PLAIN_GB}"
)
#: How each line begins, up to where its own regex can tell a cut line (``#`` = digits).
_STEP_START = ("step=", "#", ", skipped=", "#", ", lr=[")
_TPUT_START = ("epoch=", "#", "/micro_step=", "#", "/global_step=", "#", ", ")
_PIPE_START = ("steps: ", "#", " loss: ")
_STARTS = ("step=", "epoch=", "steps: ")


class ProgressParser:
    """Turns progress lines into Step/Throughput/Iteration records and anchors the clock."""

    in_block = False

    def __init__(self) -> None:
        self._last_step: tuple[int, int] | None = None  # (clock rel, N) of the last step=N

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records of one progress line; None for any other line."""
        text = line.text.strip()
        if text.startswith("step="):
            return self._step_line(text, line, ctx)
        if text.startswith("epoch=") or ("/" in text[:12] and "SamplesPerSec=" in text):
            return self._throughput_line(text, line, ctx)
        if text.startswith("steps: "):
            return _pipeline_line(text, line, ctx)
        if not ctx.final and text and len(text) < 7 and any(s.startswith(text) for s in _STARTS):
            return NEED_MORE  # ``ste``: maybe a progress line wrapped right after its start
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Nothing is held between lines."""
        return []

    def _step_line(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """``step=N, skipped=S, lr=[...], mom=[...]`` -> StepRecord; anchors the clock."""
        m = _STEP.match(text)
        if m is None:
            if _STEP_HEAD.match(text) is None and not is_prefix(text, _STEP_START):
                return None  # some other ``step=`` text, not DeepSpeed's progress line
            return _cut("step", line, ctx)
        step = int(m.group(1))
        rec = StepRecord(
            src=ctx.src(line, rank=_rank0(line)),
            ts=ctx.ts(line),
            step=step,
            skipped=int(m.group(2)),
            lr=tuple(numbers(m.group(3))),
            mom=parse_mom(m.group(4)),
        )
        self.stepped(step, ctx)
        return [rec]

    def stepped(self, step: int, ctx: ParseContext) -> None:
        """A ``step=N`` line read, here or by the vector path: N anchors the clock.

        ``step=0`` is printed at init: step 1 is next. The throughput line that follows in
        the same step takes N as its own (:meth:`timed`).
        """
        ctx.clock.anchor(max(step, 1))
        self._last_step = (ctx.clock.rel, step)

    def timed(self, global_step: int | None, ctx: ParseContext) -> int | None:
        """A throughput line read, here or by the vector path: its engine step.

        Its ``global_step`` anchors weakly; its step is the ``step=`` read just before it,
        else that count (:meth:`_own_step`).
        """
        if global_step is not None:
            ctx.clock.anchor(global_step, weak=True)
        return self._own_step(ctx, global_step)

    def _throughput_line(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """A ThroughputTimer line of any version -> ThroughputRecord."""
        new = _TPUT_NEW.match(text)
        m = new or _TPUT_OLD.match(text)
        if m is None:
            return _cut("throughput", line, ctx) if is_prefix(text, _TPUT_START) else None
        rest = m.group(4) if new else m.group(3)
        if new and "vm %" in rest:
            return None  # monitor_memory form: no throughput figures
        cut = bool(new) and _looks_cut(rest)
        if cut:
            if not ctx.final:
                return NEED_MORE
            ctx.unparsed("throughput", line)
            if ctx.joined:
                return []  # ``=1`` + ``0.9, ...`` would read 10.9: the join is undone
            rest = rest.rpartition(", ")[0]  # the figure cut in the middle is not stored
        kv = _key_values(rest)
        if kv is None:
            if not cut:
                ctx.unparsed("throughput", line)
            return []
        return [self._tput_record(m, bool(new), kv, line, ctx)]

    def _tput_record(
        self, m: re.Match[str], new: bool, kv: dict[str, str], line: LogLine, ctx: ParseContext
    ) -> Record:
        """The record of a parsed throughput line; its ``global_step`` anchors weakly."""
        global_step = int(m.group(3)) if new else None
        step = self.timed(global_step, ctx)
        running = kv.get("RunningAvgSamplesPerSec", kv.get("SamplesPerSec"))
        return ThroughputRecord(
            src=ctx.src(line, rank=_rank0(line)),
            ts=ctx.ts(line),
            step=step,
            epoch=int(m.group(1)),
            micro_step=int(m.group(2)),
            global_step=global_step,
            samples_per_s=rate(kv.get("CurrSamplesPerSec")),
            running_avg_samples_per_s=rate(running),
            mem_allocated_bytes=units.parse_gb_bytes(kv.get("MemAllocated")),
            max_mem_allocated_bytes=units.parse_gb_bytes(kv.get("MaxMemAllocated")),
        )

    def _own_step(self, ctx: ParseContext, global_step: int | None) -> int | None:
        """The engine step of a throughput line: the ``step=`` just before it, else its count."""
        last, self._last_step = self._last_step, None
        if last is not None and last[0] == ctx.clock.rel:
            return last[1]
        return global_step


def is_prefix(text: str, start: tuple[str, ...]) -> bool:
    """Whether ``text`` stops inside ``start`` (literals, ``#`` for digits): cut by wrapping."""
    pos = 0
    for tok in start:
        if tok == "#":
            m = _DIGITS.match(text, pos)
            assert m is not None
            if m.end() == len(text):
                return True
            if m.end() == pos:
                return False
            pos = m.end()
            continue
        piece = text[pos : pos + len(tok)]
        if not tok.startswith(piece):
            return False
        if pos + len(tok) >= len(text):
            return True
        pos += len(tok)
    return False


def _cut(kind: str, line: LogLine, ctx: ParseContext) -> list[Record]:
    """A progress line that stops short: join it with the next line, or count it at the end."""
    if not ctx.final:
        return NEED_MORE
    ctx.unparsed(kind, line)
    return []


def parse_mom(text: str) -> tuple[tuple[float, ...], ...]:
    """``[(0.9, 0.999)]``, ``[[0.9, 0.95], [0.9, 0.95]]`` or ``[0.0, 0.0]`` -> one tuple per group.

    Adam-family optimizers print ``betas`` (a tuple, or a list in older versions); SGD and
    RMSprop print ``momentum`` floats, which become 1-tuples.
    """
    inner = text.strip()[1:-1]
    if "(" in inner or "[" in inner:
        return tuple(tuple(numbers(g)) for g in _GROUP.findall(inner))
    return tuple((v,) for v in numbers(inner))


def numbers(text: str) -> list[float]:
    """Every number in a printed list (``0``, ``5e-05``, ``0.0009000000000000001``)."""
    return [float(x) for x in _NUM.findall(text)]


def _key_values(rest: str) -> dict[str, str] | None:
    """The known ``Key=value`` pairs of a throughput line; None if one is malformed."""
    out: dict[str, str] = {}
    for part in rest.split(", "):
        key, sep, value = part.strip().partition("=")
        if not sep:
            if ":" in part:
                continue  # monitor_memory form: ``vm %: 12.0, swap %: 0.0``
            return None
        if key in _RATES or key in _MEMORY:
            if not _valid(key, value):
                return None
            out[key] = value
    return out if any(k in out for k in _RATES) else None


def _valid(key: str, value: str) -> bool:
    """A rate is a plain number (``-inf`` too); memory is a GiB figure ending in ``GB``."""
    if key in _MEMORY:
        return value.endswith("GB") and units.parse_gb_bytes(value) is not None
    return _NUM.fullmatch(value) is not None


def rate(value: str | None) -> float | None:
    """Samples per second; ``-inf`` (no step timed yet) is unknown."""
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _looks_cut(rest: str) -> bool:
    """A v0.8+ line ends with its ``MaxMemAllocated=...GB`` figure; anything shorter was cut."""
    return _TPUT_END.search(rest) is None


def _pipeline_line(text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
    """``steps: N loss: L [name: v ...] iter time (s): T samples/sec: S`` (pipeline engine)."""
    m = _PIPE.match(text)
    if m is None or _spans_lines(m.group(3)):
        if "loss: " in text or is_prefix(text, _PIPE_START):
            return _cut("iteration", line, ctx)
        return None
    n = int(m.group(1))
    losses = {"loss": float(m.group(2))}
    for name, value in _PIPE_LOSS.findall(m.group(3)):
        losses[name.strip()] = float(value)
    rec = IterationRecord(
        src=ctx.src(line, rank=_rank0(line)),
        ts=ctx.ts(line),
        step=n,
        fmt="pipeline",
        iteration=n,
        loss=losses["loss"],
        losses=losses,
        elapsed_ms=float(m.group(4)) * 1000.0,
        samples_per_s=float(m.group(5)),
    )
    ctx.clock.anchor(n + 1)  # printed after step N completed: N+1 is next
    return [rec]


def _spans_lines(losses: str) -> bool:
    """Whether the named losses hold another line's fields: a cut line joined to what followed.

    ``samples/sec: 441.545`` cut, then a damaged header ``03 08:58:01,996] ...`` and the next
    ``steps:`` line joined to it would read ``441.54503`` as a loss nobody printed.
    """
    return "steps: " in losses or "samples/sec" in losses or "iter time" in losses


def _rank0(line: LogLine) -> int:
    """These lines are written by global rank 0 only (``ranks=[0]`` or a rank-0 check)."""
    return line.rank if line.rank is not None else 0
