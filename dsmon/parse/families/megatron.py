"""Megatron-DeepSpeed / Megatron-LM per-iteration lines: loss, lr, throughput as the model saw them.

``training_log`` prints `` iteration      100/  500000 | name: value | name: value |`` on the
last rank. The set and order of fields changed across Megatron-LM, Megatron-DeepSpeed and their
forks (``consumed tokens``, ``TFLOPs``, ``throughput per GPU (TFLOP/s/GPU)``, ``tokens per gpu
per second (tgs)``, ``actual seqlen``, a ``[date time]`` prefix, extra named losses), and the
ALCF/ezpz fork prints ``key=value`` with underscores (``elapsed_time_per_iteration_ms=3415.3``).
So the line is read as name/value pairs, and each name is matched by meaning: case, spaces,
underscores and dashes do not matter, and a unit (``(ms)``, ``(s)``, ``_ms``) is read from the
name, never assumed.

Megatron also prints, per rank, ``[Rank N] (after N iterations) memory (MB) | allocated: ...``
(a :class:`MemoryRecord`) and its own timers as ``(min, max) time across ranks (ms):`` followed
by one ``name ....: (min, max)`` line per timer (a :class:`TimerRecord` of group ``megatron``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from dsmon.model.records import IterationRecord, MemoryRecord, Record, TimerRecord
from dsmon.model.schema import INT64_MAX, INT64_MIN
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine, valid_date, valid_time

_LINE = re.compile(
    r"^\s*(?:\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)\]\s*)?iteration\s*[=:]?\s*(\d+)\s*/\s*(\d+)\s*\|(.*)$"
)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.I)
_SEP = re.compile(r"[:=]")
_WORDS = re.compile(r"[\s_\-]+")
_SPLIT_WORD = re.compile(r"(?<=\w)\s{2,}(?=\w)")
_UNIT_IN_PARENS = re.compile(r"^(.*?)\s*\(([^()]*)\)$")
_MEMORY = re.compile(
    r"^\s*\((after|before) (\d+) iterations?\) memory \((B|KB|MB|GB)\)\s*\|(.*)$", re.I
)
_MINMAX_HEAD = re.compile(r"^\s*\(min, max\) time across ranks \((ms|s)\):\s*$")
_MINMAX_ROW = re.compile(rf"^\s*(\S.*?) \.*: \(({_NUMBER.pattern}), ({_NUMBER.pattern})\)\s*$")
_TERA = 1e12
#: Milliseconds per unit of a time read from a field name.
_TIME_UNITS = {"ms": 1.0, "s": 1000.0, "sec": 1000.0, "secs": 1000.0, "us": 0.001}
#: Bytes per unit of Megatron's memory report (it divides by 1024 * 1024 for "MB").
_BYTE_UNITS = {"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}
#: FLOP/s per unit of a rate read from a field name (``TFLOPs``, ``(TFLOP/s/GPU)``).
_FLOP_UNITS = {"t": _TERA, "g": 1e9, "p": 1e15}
_FLOP_PREFIX = re.compile(r"([tgp])flop")


def _int(v: float) -> int | None:
    """A byte figure as an integer; None for ``nan``, ``inf`` or past 64 bits.

    Megatron prints what its tensors hold: a corrupted run's memory line can read ``nan``,
    and a number that overflows a float (``1e400``) reads as ``inf``. Neither is a size.
    """
    if not math.isfinite(v) or not INT64_MIN <= v <= INT64_MAX:
        return None
    return round(v)


def _count(v: float) -> int | None:
    """A count as an integer; None for what :func:`_int` refuses, and for a fraction.

    Megatron prints counts whole (``num zeros`` as ``0.0``): a fraction is a figure of another
    field, such as a wrapped line's ``elapsed time per iteration (s)`` tail (``: 104.70``)
    joined after a ``consumed tokens`` cut short, and rounding it would invent a count.
    """
    return _int(v) if v.is_integer() else None


# meaning of a name (lower case, words joined by single spaces) -> (field, conversion)
_FIELDS: dict[str, tuple[str, Callable[[float], Any]]] = {
    "consumed samples": ("consumed_samples", _count),
    "consumed tokens": ("consumed_tokens", _count),
    "learning rate": ("lr", float),
    "global batch size": ("global_batch_size", _count),
    "gloabl batch size": ("global_batch_size", _count),  # AscendSpeed's spelling
    "loss scale": ("loss_scale", float),
    "grad norm": ("grad_norm", float),
    "total grad norm": ("grad_norm", float),
    "number of skipped iterations": ("skipped_iterations", _count),
    "number of nan iterations": ("nan_iterations", _count),
    "samples per second": ("samples_per_s", float),
    "tokens per gpu per second": ("tokens_per_gpu_per_s", float),
    "tokens per gpu per second tgs": ("tokens_per_gpu_per_s", float),
    "tgs": ("tokens_per_gpu_per_s", float),
    "actual seqlen": ("actual_seqlen", _count),
    "num zeros": ("num_zeros", _count),
    "number of zeros": ("num_zeros", _count),
}
_ELAPSED = "elapsed time per iteration"
_FLOPS = frozenset({"tflops", "throughput per gpu", "tflops per gpu"})
_NOT_LOSSES = frozenset({"loss scale"})
_MAIN_LOSSES = ("lm loss", "loss")


def meaning(raw: str) -> tuple[str, str | None]:
    """A printed name as words, and the unit it names (``Elapsed_time_per_iteration_ms``).

    ``elapsed time per iteration (ms)``, ``elapsed_time_per_iteration_ms`` and ``Elapsed Time
    Per Iteration(ms)`` all give ``("elapsed time per iteration", "ms")``.
    """
    text = raw.strip().lower()
    unit = None
    m = _UNIT_IN_PARENS.match(text)
    if m:
        text, unit = m.group(1), m.group(2).strip()
    words = _WORDS.sub(" ", text).strip()
    head, _, last = words.rpartition(" ")
    if unit is None and head and last in _TIME_UNITS:
        words, unit = head, last
    return words, unit


def _field_meaning(raw: str) -> tuple[str, str | None]:
    """:func:`meaning`, also for a name a terminal's re-wrapping split (``learning ra    te``)."""
    name, unit = meaning(raw)
    if not _known(name) and "  " in raw.strip():
        joined = meaning(_SPLIT_WORD.sub("", raw))
        if _known(joined[0]):
            return joined
    return name, unit


def _number(raw: str) -> float | None:
    m = _NUMBER.match(raw.strip())
    return float(m.group(0)) if m else None


def _is_loss(name: str) -> bool:
    return name not in _NOT_LOSSES and name.endswith("loss")


def _main_loss(losses: dict[str, float]) -> float | None:
    """``lm loss`` (or ``loss``, in any spelling) when printed, else the first named loss."""
    by_meaning = {meaning(k)[0]: v for k, v in losses.items()}
    for name in _MAIN_LOSSES:
        if name in by_meaning:
            return by_meaning[name]
    return next(iter(losses.values()), None)


def _convert(name: str, unit: str | None, value: float) -> tuple[str, Any] | None:
    """The record field and value for a name, with its unit applied; None if not known.

    The value is None when the field cannot hold what was printed (``nan`` for a count).
    """
    if name in _FIELDS:
        field, conv = _FIELDS[name]
        return field, conv(value)
    if name == _ELAPSED:
        scale = _TIME_UNITS.get(unit or "")
        return None if scale is None else ("elapsed_ms", value * scale)
    if name in _FLOPS:
        m = _FLOP_PREFIX.match(unit or name)  # "TFLOPs", "(TFLOP/s/GPU)"; no unit: not read
        scale = _FLOP_UNITS.get(m.group(1)) if m else None
        return None if scale is None else ("flops_per_s_per_gpu", value * scale)
    return None


def _known(name: str) -> bool:
    return name in _FIELDS or name == _ELAPSED or name in _FLOPS or _is_loss(name)


class MegatronParser:
    """Iteration lines, per-rank memory lines and ``(min, max)`` timer blocks."""

    def __init__(self) -> None:
        self.in_block = False
        self._iteration: int | None = None  # the last iteration line's number
        self._block: _MinMaxBlock | None = None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records of one line; None for a line that is not Megatron's."""
        if self._block is not None:
            if self._block.add(line.text):
                return []
            ctx.pending.extend(self._end_block(ctx))  # the line that ended it is not ours
        text = line.text
        if "iteration" in text:
            m = _LINE.match(text)
            if m is not None:
                return self._iteration_line(m, line, ctx)
            m = _MEMORY.match(text)
            if m is not None:
                return _memory_line(m, line, ctx)
        head = _MINMAX_HEAD.match(text) if text.endswith(":") else None
        if head is not None:
            scale = _TIME_UNITS[head.group(1)]
            self._block = _MinMaxBlock(line, ctx.ts(line), scale, self._iteration)
            self.in_block = True
            return []
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """A timer block open at the end of input is complete as far as it goes."""
        return self._end_block(ctx)

    def _end_block(self, ctx: ParseContext) -> list[Record]:
        """The record of the open timer block (none when no row came)."""
        block, self._block = self._block, None
        self.in_block = False
        return [] if block is None else block.record(ctx)

    def _iteration_line(self, m: re.Match[str], line: LogLine, ctx: ParseContext) -> list[Record]:
        """One record per iteration line (joined first when terminal wrapping cut it)."""
        parts = m.group(5).split("|")
        last = parts[-1].strip()
        if last and (not _SEP.search(last) or last.endswith((":", "="))):
            if not ctx.final:
                return NEED_MORE  # cut by terminal wrapping inside a field
            ctx.cut_block("megatron_iteration", line)  # cut for good: nothing half-stored
            return []
        fields, losses = self._fields(parts, line, ctx)
        if fields is None:
            return []
        iteration = int(m.group(3))
        self._iteration = iteration
        rec = IterationRecord(
            src=ctx.src(line),
            ts=_own_ts(m, line, ctx),
            step=iteration,
            fmt="megatron",
            iteration=iteration,
            total_iterations=int(m.group(4)),
            # A diverged run prints ``lm loss: nan``: the main loss keeps it (a gap where it is
            # drawn), the named losses only the finite ones (JSON has no NaN to put in a map).
            losses={k: v for k, v in losses.items() if math.isfinite(v)},
            loss=_main_loss(losses),
            **fields,
        )
        return [rec]

    def _fields(
        self, parts: list[str], line: LogLine, ctx: ParseContext
    ) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """Known fields and named losses; a known field without a number spoils the line."""
        fields: dict[str, Any] = {}
        losses: dict[str, float] = {}
        for part in parts:
            sep = _SEP.search(part)
            if sep is None:
                continue
            raw_name, raw_value = part[: sep.start()], part[sep.end() :]
            name, unit = _field_meaning(raw_name)
            value = _number(raw_value)
            if value is None:
                if _known(name):
                    ctx.unparsed("megatron_iteration", line)
                    return None, {}
                continue
            converted = _convert(name, unit, value)
            if converted is not None and converted[1] is None:
                ctx.bad_value(line, converted[0], raw_value)
            elif converted is not None:
                fields[converted[0]] = converted[1]
            elif _is_loss(name):
                losses[raw_name.strip()] = value
        return fields, losses


def _own_ts(m: re.Match[str], line: LogLine, ctx: ParseContext) -> str | None:
    """The line's ``[date time]`` when it has a real one, else the context's timestamp."""
    date, time = m.group(1), m.group(2)
    if date is None:
        return ctx.ts(line)
    if valid_date(date) and valid_time(time):
        return f"{date}T{time}.000"
    ctx.bad_timestamp(line, f"{date} {time}")
    return ctx.ts(line)


def _memory_line(m: re.Match[str], line: LogLine, ctx: ParseContext) -> list[Record]:
    """``(after N iterations) memory (MB) | allocated: X | max allocated: X | reserved: ...``."""
    scale = _BYTE_UNITS[m.group(3).lower()]
    figures: dict[str, int] = {}
    for part in m.group(4).split("|"):
        raw_name, sep, raw_value = part.partition(":")
        field = _MEMORY_FIELDS.get(meaning(raw_name)[0])
        value = _number(raw_value) if sep else None
        if field is None or value is None:
            continue
        size = _int(value * scale)
        if size is None:
            ctx.bad_value(line, field, raw_value)  # nan, inf: not a size; the others are kept
        else:
            figures[field] = size
    if not figures:
        ctx.unparsed("memory", line)
        return []
    iterations = int(m.group(2))
    rec = MemoryRecord(
        src=ctx.src(line),
        ts=ctx.ts(line),
        step=iterations if m.group(1).lower() == "after" and iterations > 0 else None,
        label=f"{m.group(1).lower()} {iterations} iterations",
        **figures,
    )
    return [rec]


_MEMORY_FIELDS = {
    "allocated": "allocated_bytes",
    "max allocated": "max_allocated_bytes",
    "reserved": "cached_bytes",
    "max reserved": "max_cached_bytes",
    "cached": "cached_bytes",  # Megatron-LM 2019-2020 (torch.cuda.memory_cached)
    "max cached": "max_cached_bytes",
}


class _MinMaxBlock:
    """The rows of one ``(min, max) time across ranks (ms):`` block, as they arrive."""

    def __init__(self, head: LogLine, ts: str | None, scale: float, iteration: int | None) -> None:
        self.head = head
        self.ts = ts
        self.scale = scale
        self.iteration = iteration
        self.low: dict[str, float] = {}
        self.high: dict[str, float] = {}

    def add(self, text: str) -> bool:
        """Take a ``name ....: (min, max)`` row; False for any other line (the block ended)."""
        m = _MINMAX_ROW.match(text)
        if m is None:
            return False
        name = m.group(1).strip()
        self.low[name] = float(m.group(2)) * self.scale
        self.high[name] = float(m.group(3)) * self.scale
        return True

    def record(self, ctx: ParseContext) -> list[Record]:
        """A megatron TimerRecord: the maximum over ranks in ``values_ms``, the minimum too."""
        if not self.high:
            return []
        rec = TimerRecord(
            src=ctx.src(self.head),
            ts=self.ts,
            step=self.iteration,
            group="megatron",
            values_ms=self.high,
            min_values_ms=self.low,
        )
        return [rec]
