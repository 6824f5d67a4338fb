"""fp16 loss-scaler and bf16 overflow messages of every DeepSpeed generation.

Each message becomes one :class:`LossScaleRecord` with an event from
``records.LOSS_SCALE_EVENTS``. One skipped step can produce several records: the fused and
unfused fp16 optimizers log ``Grad overflow on iteration N`` and ``Reducing dynamic loss scale``
from every rank, and the fused one adds a rank-0 ``Overflow detected`` line. Records stay one
per line (with the rank when the line names it); consumers count skipped steps per distinct
step (or ``iteration``), never per record: docs/step-assignment.md, "Counting skipped steps".

Forms read (the messages of DeepSpeed's loss scalers, across versions):

- ``[deepspeed] OVERFLOW! Rank R Skipping step. Attempted loss scale: S, reducing to T``
  (v0.8.3+ ints; before: floats; v0.5 ZeRO-3 says ``[deepscale]``; v0.3's ZeRO-1 and -2 name no
  rank), the hysteresis variant
  ``... Attempted loss scale: S, but hysteresis is H. Reducing hysteresis to H-1``, and the
  bare ``... Skipping step.`` of a non-fp16 dynamic scaler;
- fused / unfused FP16_Optimizer: ``Overflow detected. Skipping step. ...``, ``[deepspeed] fp16
  dynamic loss scale overflow! [Rank R] Skipping step. ...``, ``Grad overflow on iteration[:] N``,
  ``Reducing dynamic loss scale from X to Y``, ``No Grad overflow for N iterations`` (read, no
  record: the next line carries the values), ``Increasing dynamic loss scale from X to Y``,
  ``Using static loss scale of[:] X``;
- ``Consecutive hysteresis is enabled. Restoring hysteresis to N``, ``[deepspeed] setting loss
  scale from A -> B``, bf16 ``[deepspeed] OVERFLOW! Skipping step. Gradients are non-finite,
  weights were not updated.`` and ``Current loss scale already at minimum - cannot decrease
  scale anymore. Exiting run.``
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dsmon.model.records import LossScaleRecord, Record
from dsmon.parse.base import NEED_MORE, ParseContext, contains_any
from dsmon.parse.lines import LogLine

_S = r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|inf|nan)"
_ATTEMPT = rf"Attempted loss scale: {_S}, reducing to {_S}"

_OVERFLOW = re.compile(
    rf"\[(?:deepspeed|deepscale)\] OVERFLOW! (?:Rank (\d+) )?Skipping step\."
    rf"(?: Attempted loss scale: {_S}, (?:reducing to {_S}|but hysteresis is (\d+)\. "
    r"Reducing hysteresis to (\d+)))?\s*$"
)
_BF16 = re.compile(
    r"\[deepspeed\] OVERFLOW! Skipping step\. Gradients are non-finite, weights were not updated\.\s*$"
)
_MIN_SCALE = re.compile(
    r"Current loss scale already at minimum - cannot decrease scale anymore\. Exiting run\.\s*$"
)
_FUSED = re.compile(rf"Overflow detected\. Skipping step\. {_ATTEMPT}\s*$")
_LEGACY = re.compile(
    r"\[deepspeed\] fp16 dynamic loss scale overflow! (?:Rank \d+ )?"
    rf"Skipping step\. {_ATTEMPT}\s*$"
)
_GRAD_OVERFLOW = re.compile(r"Grad overflow on iteration:? (\d+)\s*$")
_REDUCING = re.compile(rf"Reducing dynamic loss scale from {_S} to {_S}\s*$")
_INCREASING = re.compile(rf"Increasing dynamic loss scale from {_S} to {_S}\s*$")
_NO_OVERFLOW = re.compile(r"No Grad overflow for (\d+) iterations\s*$")
_STATIC = re.compile(rf"Using static loss scale of:? {_S}\s*$")
_RESTORED = re.compile(r"Consecutive hysteresis is enabled\. Restoring hysteresis to (\d+)\s*$")
_SET = re.compile(rf"\[deepspeed\] setting loss scale from {_S} -> {_S}\s*$")

#: Message starts that are certainly loss-scale messages: a line starting so that does not
#: parse is counted (or joined with its continuation when it looks cut).
_KNOWN_STARTS: tuple[str, ...] = (
    "[deepspeed] OVERFLOW!",
    "[deepscale] OVERFLOW!",
    "Overflow detected.",
    "[deepspeed] fp16 dynamic loss scale overflow!",
    "Grad overflow on iteration",
    "Reducing dynamic loss scale",
    "Increasing dynamic loss scale",
    "[deepspeed] setting loss scale",
)


@dataclass(frozen=True, slots=True)
class _Msg:
    """What one message says, before it becomes a record."""

    event: str
    rank: int | None = None
    iteration: int | None = None
    attempted_scale: float | None = None
    new_scale: float | None = None
    hysteresis: int | None = None


_FRAGMENT_MAX = max(len(s) for s in _KNOWN_STARTS)
#: Largest factor between two consecutive loss scales (DeepSpeed's scale_factor is 2).
_MAX_FACTOR = 8.0
#: Events an fp16 optimizer prints in the step of its last ``Grad overflow on iteration``.
_SAME_STEP = frozenset({"scale_down", "static", "overflow"})
_GAP = re.compile(r"[ \t]{2,}")
_WORD_GAP = re.compile(r"(?<=[A-Za-z])[ \t]{2,}(?=[a-z])")
_KEYWORDS = ("verflow", "OVERFLOW", "oss scal", "ysteresis", "dynamic loss")


def _fragment(text: str, ctx: ParseContext) -> list[Record] | None:
    """A line that stops inside the first words of a message (``[deepspee``): wait for more."""
    if not text or len(text) > _FRAGMENT_MAX or text[0] not in "[OGRI" or ctx.final:
        return None  # the quick test first: this runs for nearly every line of a log
    return NEED_MORE if any(s.startswith(text) for s in _KNOWN_STARTS) else None


_Matcher = Callable[[str], _Msg | None]


class LossScaleParser:
    """Turns loss-scale and overflow messages into :class:`LossScaleRecord`."""

    in_block = False

    def __init__(self) -> None:
        self._iteration_step: tuple[int, int] | None = None  # (step, clock rel) of the last
        # ``Grad overflow on iteration N``

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """One record per message; ``[]`` for a message that carries nothing new."""
        text = line.text.strip()
        if not contains_any(text, _KEYWORDS):
            return _fragment(text, ctx)
        if _NO_OVERFLOW.match(text):
            return []
        msg = _match(text)
        if msg is not None:
            if not ctx.final:
                return NEED_MORE  # a wrapped message goes on on the next line: wait for it
            return [_record(msg, text, line, ctx, self._own_step(msg, ctx.clock.rel))]
        return self._unknown(text, line, ctx)

    def _own_step(self, msg: _Msg, rel: int) -> int | None:
        """The step an fp16-optimizer message names, for the clock cannot place it.

        Every rank prints ``Grad overflow on iteration N``, and a rank's line may come after
        rank 0 has already closed the step. ``N`` is the optimizer's ``cur_iter``: it counts
        steps from 0 and is saved in checkpoints, so the step is N+1. The ``Reducing dynamic
        loss scale`` / ``Using static loss scale`` line that each rank prints right after it,
        and rank 0's ``Overflow detected``, belong to the same step (while at most one global
        timer line came in between).
        """
        if msg.iteration is not None:
            self._iteration_step = (msg.iteration + 1, rel)
            return msg.iteration + 1
        last = self._iteration_step
        if msg.event in _SAME_STEP and last is not None and rel - last[1] <= 1:
            return last[0]
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Nothing is held between lines."""
        return []

    def _unknown(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """A loss-scale message that did not parse: maybe cut, maybe a variant; else not ours."""
        if not text.startswith(_KNOWN_STARTS):
            return _fragment(text, ctx)
        if not ctx.final:
            return NEED_MORE
        ctx.unparsed("loss_scale", line)
        return []


def _match(text: str) -> _Msg | None:
    """What a message says, however a terminal re-spaced it.

    Copying a wrapped line from a terminal can leave a run of spaces where the line broke,
    inside a word (``loss scal      e: 8192``) or between words: the text is tried as it is,
    then with such runs made one space, then with runs between letters removed.
    """
    variants = [text]
    if "  " in text:
        single = _GAP.sub(" ", text)
        variants += [single, _GAP.sub(" ", _WORD_GAP.sub("", text))]
    for variant in variants:
        for matcher in _MATCHERS:
            msg = matcher(variant)
            if msg is not None:
                return msg
    return None


def _record(msg: _Msg, text: str, line: LogLine, ctx: ParseContext, step: int | None) -> Record:
    """The record of one parsed message; a rank named in the text wins over the prefix."""
    return LossScaleRecord(
        src=ctx.src(line, rank=msg.rank),
        ts=ctx.ts(line),
        step=step,
        event=msg.event,
        iteration=msg.iteration,
        attempted_scale=msg.attempted_scale,
        new_scale=msg.new_scale,
        hysteresis=msg.hysteresis,
        message=text,
    )


def _scale(text: str | None) -> float | None:
    return None if text is None else float(text)


def _overflow(text: str) -> _Msg | None:
    """DynamicLossScaler / ZeRO ``OVERFLOW!``: a skipped step, or one absorbed by hysteresis."""
    m = _OVERFLOW.match(text)
    if m is None:
        return None
    printed_rank, attempted, reduced, hyst_from, hyst_to = m.groups()
    rank = None if printed_rank is None else int(printed_rank)  # 0.3's ZeRO names none
    if hyst_from is not None:
        # DeepSpeed prints h, then h - 1: anything else is a line cut inside its number, or
        # one joined with the next line's digits (``... to 1`` + ``32768``), not a wrap
        if int(hyst_to) != int(hyst_from) - 1:
            return None
        return _Msg("hysteresis", rank, attempted_scale=_scale(attempted), hysteresis=int(hyst_to))
    before, after = _scale(attempted), _scale(reduced)
    if not _plausible("overflow", before, after):
        return None
    return _Msg("overflow", rank, attempted_scale=before, new_scale=after)


def _bf16(text: str) -> _Msg | None:
    return _Msg("bf16_overflow") if _BF16.match(text) else None


def _min_scale(text: str) -> _Msg | None:
    """The scaler's exception, bare or inside a traceback line (``Exception: Current ...``)."""
    return _Msg("min_scale") if _MIN_SCALE.search(text) else None


def _plausible(event: str, before: float | None, after: float | None) -> bool:
    """Whether a scale change is one DeepSpeed makes (factor 2, clamped at the minimum).

    A line cut inside its last number and not continued (a damaged log) reads as a scale ten
    or more times too small: such a line is counted as unparsed instead of stored.
    """
    if before is None or after is None or event not in ("overflow", "scale_down", "scale_up"):
        return True
    if event == "scale_up":
        return before < after <= before * _MAX_FACTOR
    return before / _MAX_FACTOR <= after <= before


def _attempt(pattern: re.Pattern[str]) -> _Matcher:
    """Messages with ``Attempted loss scale: S, reducing to T``: an overflow (skipped step)."""

    def match(text: str) -> _Msg | None:
        m = pattern.match(text)
        if m is None:
            return None
        before, after = _scale(m[1]), _scale(m[2])
        if not _plausible("overflow", before, after):
            return None
        return _Msg("overflow", attempted_scale=before, new_scale=after)

    return match


def _grad_overflow(text: str) -> _Msg | None:
    m = _GRAD_OVERFLOW.match(text)
    return None if m is None else _Msg("overflow", iteration=int(m[1]))


def _change(pattern: re.Pattern[str], event: str) -> _Matcher:
    """``... from X to Y`` / ``from A -> B``: the scale before and after."""

    def match(text: str) -> _Msg | None:
        m = pattern.match(text)
        if m is None:
            return None
        before, after = _scale(m[1]), _scale(m[2])
        if not _plausible(event, before, after):
            return None
        return _Msg(event, attempted_scale=before, new_scale=after)

    return match


def _static(text: str) -> _Msg | None:
    m = _STATIC.match(text)
    return None if m is None else _Msg("static", new_scale=_scale(m[1]))


def _restored(text: str) -> _Msg | None:
    m = _RESTORED.match(text)
    return None if m is None else _Msg("hysteresis_restored", hysteresis=int(m[1]))


_MATCHERS: tuple[_Matcher, ...] = (
    _overflow,
    _bf16,
    _attempt(_FUSED),
    _attempt(_LEGACY),
    _grad_overflow,
    _change(_REDUCING, "scale_down"),
    _change(_INCREASING, "scale_up"),
    _static,
    _restored,
    _change(_SET, "set"),
    _min_scale,
)
