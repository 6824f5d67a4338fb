"""Hugging Face Trainer's log dicts: the loss, learning rate and grad norm of a run it drives.

Most DeepSpeed jobs are driven by ``transformers.Trainer`` (``--deepspeed ds_config.json``),
whose own output is the only place their loss is printed: every ``logging_steps`` a dict,
``{'loss': 2.0491, 'learning_rate': 0.000196, 'epoch': 0.28}``, at each evaluation one of
``eval_*`` figures, and at the end ``{'train_runtime': ..., 'train_loss': ..., 'epoch': ...}``.
transformers 5 prints the values as strings (``{'loss': '6.052', ...}``); both are read. Every
such dict has ``epoch``, which tells it from other dicts a script prints.

The dict names no step. Its progress bar does: ``tqdm.write`` clears the bar, prints the dict
and draws the bar again, so the first bar drawn after the dict counts the optimizer steps done
(the bar drawn before it may lag: tqdm redraws at most ten times a second). The record waits
for the next line that is not blank; a bar there gives the step, else the last bar before the
dict does, if it was drawn since the previous dict and is the training bar (evaluation draws a
bar of its own, whose total differs). Without a progress bar (``disable_tqdm``) the engine's
timer lines number it, if ``wall_clock_breakdown`` prints them; else its step is unknown.
Live, the line after the dict is tqdm's redraws until the next dict; the collector shows the
parser its start as it is written (``LogParser.peek``), so the record leaves at once.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from dsmon.model.records import IterationRecord, Record
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import Bar, LogLine
from dsmon.parse.pyrepr import parse_value

#: ``fmt`` of the records: a training log dict, an evaluation dict, the end-of-training dict.
TRAIN, EVAL, SUMMARY = "trainer", "trainer_eval", "trainer_summary"
_HEAD = "{'"
#: Figures whose NaN or inf means the training went wrong.
_WATCHED = ("loss", "eval_loss", "train_loss", "grad_norm")
#: A figure printed as a tensor: ``tensor(0.5, device='cuda:0')``.
_TENSOR = re.compile(r"tensor\(\s*([-+\w.]+)")


class TrainerParser:
    """Turns Trainer log dicts into :class:`IterationRecord`, each once its step is known."""

    def __init__(self) -> None:
        self.in_block = False  # a record waits for the line after its dict
        self._waiting: IterationRecord | None = None
        self._bar_before: Bar | None = None
        self._train_total: int | None = None  # the training bar's total, once seen after a dict
        self._bar_at_dict: Bar | None = None  # the last bar when the previous dict was read
        self._bar_after: Bar | None = None  # the bar drawn again after the previous dict
        self._clock_step: int | None = None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """[] for a Trainer dict (its record follows with the next line); None otherwise."""
        if self.in_block and (ctx.bar is not None or line.text.strip()):
            ctx.pending.append(self._release(ctx.bar))  # a blank line: wait for the next one
        if _HEAD not in line.text:
            return None  # most lines: one search, no copy
        text = line.text.strip()
        if text[:2] != _HEAD or "'epoch': " not in text:
            return None
        if not text.endswith("}"):
            return NEED_MORE if not ctx.final else self._unparsed(line, ctx)
        figures = _figures(text)
        if figures is None:
            return self._unparsed(line, ctx)
        rec = _record(figures, line, ctx)
        if rec is None:
            return None  # a dict of the script's own, not a Trainer log
        # drawn since the previous dict (each drawing is a tuple of its own) and its redraw
        fresh = ctx.last_bar is not self._bar_at_dict and ctx.last_bar != self._bar_after
        self._bar_before = ctx.last_bar if fresh else None
        self._bar_at_dict = ctx.last_bar
        self._clock_step = _finished_step(ctx)
        self._waiting, self.in_block = rec, True
        return []

    def release_on_bar(self, bar: Bar) -> list[Record]:
        """Live: the waiting record, now that the line after its dict begins with ``bar``."""
        return [self._release(bar)] if self.in_block else []

    def finish(self, ctx: ParseContext) -> list[Record]:
        """The last dict's record: no line follows it, the bar before it or the clock numbers it."""
        return [self._release(None)] if self.in_block else []

    def _release(self, after: Bar | None) -> Record:
        """The waiting record, with the step the bar after it (or the training bar before) gave."""
        rec, self._waiting, self.in_block = self._waiting, None, False
        assert rec is not None
        step = None
        self._bar_after = after
        if after is not None:
            step, self._train_total = after
        elif self._bar_before is not None and self._bar_before[1] == self._train_total:
            step = self._bar_before[0]
        total = self._train_total if step is not None else None
        step = self._clock_step if step is None else step
        if step is None:
            return rec
        return dataclasses.replace(rec, step=step, iteration=step, total_iterations=total)

    def _unparsed(self, line: LogLine, ctx: ParseContext) -> list[Record]:
        ctx.unparsed("trainer", line)
        return []


def _finished_step(ctx: ParseContext) -> int | None:
    """The step that just ended, when the dict follows the engine's global timer line.

    With ``wall_clock_breakdown`` and no progress bar (``disable_tqdm``), Trainer logs right
    after the step whose timer line DeepSpeed printed last.
    """
    clock = ctx.clock
    return clock.stamp(clock.rel - 1) if clock.at_boundary and clock.rel > 0 else None


def _figures(text: str) -> dict[str, float | None] | None:
    """The dict's numbers (``'6.052'`` read as 6.052), None if it is not a dict.

    Read as printed, not evaluated: a diverged run prints ``'loss': nan``, and some
    transformers releases ``'grad_norm': tensor(0.5, device='cuda:0')``, which
    ``ast.literal_eval`` refuses, losing the whole dict.
    """
    value = parse_value(text)
    if not isinstance(value, dict):
        return None
    out: dict[str, float | None] = {}
    for key, item in value.items():
        if not isinstance(key, str):
            return None
        out[key] = _number(item)
    return out


def _number(item: object) -> float | None:
    """A figure as a float (NaN and inf too); None for what is not a number."""
    if isinstance(item, str) and (m := _TENSOR.match(item)):
        item = m.group(1)
    if isinstance(item, bool) or not isinstance(item, int | float | str):
        return None
    try:
        number = float(item)
    except ValueError:
        return None
    return number


def _record(
    figures: Mapping[str, float | None], line: LogLine, ctx: ParseContext
) -> IterationRecord | None:
    """The record of one dict, by what it holds; None for a dict that is no Trainer log.

    A NaN or inf loss or grad norm has no point to draw (JSON has no such number): it is
    left out, and ``nan_iterations`` is 1, as Megatron counts the NaN iterations of its log
    interval (the dict's loss is the mean over ``logging_steps`` steps: one NaN makes it NaN).
    It is 0 when a loss or grad norm was printed and finite, and None when the dict printed
    neither (a run summary without ``train_loss``): there was nothing to count.
    """
    watched = [v for k in _WATCHED if (v := figures.get(k)) is not None]
    bad = [v for v in watched if not math.isfinite(v)]
    finite = {k: v for k, v in figures.items() if v is not None and math.isfinite(v)}
    losses = {k: v for k, v in finite.items() if "loss" in k}
    if "train_runtime" in figures:
        fmt, loss = SUMMARY, None
    elif "eval_loss" in figures or any(k.startswith("eval_") for k in figures):
        fmt, loss = EVAL, finite.get("eval_loss")
    elif "loss" in figures or "learning_rate" in figures:
        fmt, loss = TRAIN, finite.get("loss")
    else:
        return None
    return IterationRecord(
        src=ctx.src(line),
        ts=ctx.ts(line),
        fmt=fmt,
        loss=loss,
        losses=losses,
        lr=finite.get("learning_rate"),
        grad_norm=finite.get("grad_norm"),
        nan_iterations=(1 if bad else 0) if watched else None,
    )
