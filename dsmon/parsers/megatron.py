"""Megatron-DeepSpeed / Megatron-LM per-iteration lines: loss, lr, throughput as the model saw them.

``training_log`` prints `` iteration      100/  500000 | name: value | name: value |`` on the
last rank. The set and order of fields changed across Megatron-LM, Megatron-DeepSpeed and their
forks (``consumed tokens``, ``TFLOPs``, ``throughput per GPU (TFLOP/s/GPU)``, ``tokens per gpu
per second (tgs)``, a ``[date time]`` prefix, extra named losses), so the line is read as
``name: value`` pairs and each known name is mapped to a field of :class:`IterationRecord`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dsmon.parsers.base import NEED_MORE, ParseContext
from dsmon.parsers.lines import LogLine
from dsmon.records import IterationRecord, Record

_LINE = re.compile(
    r"^\s*(?:\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)\]\s*)?iteration\s+(\d+)\s*/\s*(\d+)\s*\|(.*)$"
)
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf)", re.I)
_SPACES = re.compile(r"\s+")
_TERA = 1e12


def _int(v: float) -> int:
    return round(v)


def _tflops(v: float) -> float:
    return v * _TERA


# normalised name -> (field, conversion)
_FIELDS: dict[str, tuple[str, Callable[[float], Any]]] = {
    "consumed samples": ("consumed_samples", _int),
    "consumed tokens": ("consumed_tokens", _int),
    "elapsed time per iteration(ms)": ("elapsed_ms", float),
    "learning rate": ("lr", float),
    "global batch size": ("global_batch_size", _int),
    "gloabl batch size": ("global_batch_size", _int),  # AscendSpeed's spelling
    "loss scale": ("loss_scale", float),
    "grad norm": ("grad_norm", float),
    "total grad norm": ("grad_norm", float),
    "number of skipped iterations": ("skipped_iterations", _int),
    "number of nan iterations": ("nan_iterations", _int),
    "samples per second": ("samples_per_s", float),
    "tflops": ("flops_per_s_per_gpu", _tflops),
    "throughput per gpu(tflop/s/gpu)": ("flops_per_s_per_gpu", _tflops),
}
_NOT_LOSSES = frozenset({"loss scale"})
_MAIN_LOSSES = ("lm loss", "loss")


def _name(raw: str) -> str:
    """``elapsed time per iteration (ms)`` and ``...iteration(ms)`` name the same field."""
    return _SPACES.sub(" ", raw.strip().lower()).replace(" (", "(")


def _number(raw: str) -> float | None:
    m = _NUMBER.match(raw.strip())
    return float(m.group(0)) if m else None


def _is_loss(name: str) -> bool:
    return name not in _NOT_LOSSES and (name.endswith("loss") or name.endswith("_loss"))


def _main_loss(losses: dict[str, float]) -> float | None:
    """``lm loss`` (or ``loss``) when printed, else the first named loss."""
    for name in _MAIN_LOSSES:
        if name in losses:
            return losses[name]
    return next(iter(losses.values()), None)


class MegatronParser:
    """Turns iteration lines into :class:`IterationRecord` (``fmt="megatron"``)."""

    in_block = False

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """One record per iteration line; None for anything else."""
        m = _LINE.match(line.text)
        if m is None:
            return None
        parts = m.group(5).split("|")
        last = parts[-1].strip()
        if last and (":" not in last or last.endswith(":")):
            if not ctx.final:
                return NEED_MORE  # cut by terminal wrapping inside a field
            ctx.cut_block("megatron_iteration", line)  # cut for good: nothing half-stored
            return []
        fields, losses = self._fields(parts, line, ctx)
        if fields is None:
            return []
        ts = f"{m.group(1)}T{m.group(2)}.000" if m.group(1) else ctx.ts(line)
        iteration = int(m.group(3))
        rec = IterationRecord(
            src=ctx.src(line),
            ts=ts,
            step=iteration,
            fmt="megatron",
            iteration=iteration,
            total_iterations=int(m.group(4)),
            losses=losses,
            loss=_main_loss(losses),
            **fields,
        )
        return [rec]

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Nothing is held between lines."""
        return []

    def _fields(
        self, parts: list[str], line: LogLine, ctx: ParseContext
    ) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """Known fields and named losses; a known field without a number spoils the line."""
        fields: dict[str, Any] = {}
        losses: dict[str, float] = {}
        for part in parts:
            raw_name, sep, raw_value = part.partition(":")
            if not sep:
                continue
            name = _name(raw_name)
            value = _number(raw_value)
            known = name in _FIELDS or _is_loss(name)
            if value is None:
                if known:
                    ctx.unparsed("megatron_iteration", line)
                    return None, {}
                continue
            if name in _FIELDS:
                field, conv = _FIELDS[name]
                fields[field] = conv(value)
            elif _is_loss(name):
                losses[raw_name.strip()] = value
        return fields, losses
