"""``time (ms) | name: value | ...`` lines: wall_clock_breakdown and every timer group like it.

DeepSpeed prints many timer groups in one format, so the name set decides what a line is.
Only the engine's global line (``fwd | bwd | bwd_inner | bwd_allreduce | step``) closes an
optimizer step for the step clock; look-alikes must not: activation checkpointing prints
one-field ``fwd`` / ``backward`` lines, GPT-NeoX and Megatron print their own ``forward |
backward-backward | ...`` lines, and the pipeline engine prints the global line only every
``steps_per_print`` steps (after a pipeline timer line such lines are stored in group
``pipeline``). Names before v0.10.1 (``forward_microstep``, ``backward``...) and the
``rank=0`` prefix are read as the canonical names with ``legacy=True``, so every version charts
alike. The ZeRO-3 coordinator's ``name: count = N, numel = M`` lines (v0.10.0) live here too.
"""

from __future__ import annotations

import functools
import re
from typing import NamedTuple

from dsmon.model.records import CoordinatorEventRecord, Record, TimerRecord
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine

# ------------------------------------------------------------------------------------------
# Timer lines already seen, matched whole: a long run prints the same few at every step.
#
# A timer line's body is split on ``|`` and each field matched on its own
# (``timers._fields``), which took 4 us of a timer line's 11 in ``dsmon parse``. Yet a run
# prints the same lines with the same names, in the same order and spacing, step after step.
# Once a body's names are known, one regex built from them matches the next such body whole
# and gives its values: 1.3 to 1.6 us. A body that matches no known shape takes the field-by-field
# path, which then teaches its shape.
#
# The shape regex is the field regex itself with each name written out as printed: it matches
# a body exactly when splitting it on ``|`` and matching each field gives those names, since
# neither a name nor a value holds a ``|`` or a ``:``.

#: Shapes kept at most; a log with more distinct timer lines takes the field-by-field path
#: for the ones seen after (names that vary every line, which DeepSpeed never prints).
MAX_SHAPES = 256
#: Shapes kept at most under one first field name, since a body is tried against each of
#: them: DeepSpeed prints one or two (a ``fwd`` line alone, and with ``bwd`` after it).
MAX_PER_HEAD = 8


class Shape(NamedTuple):
    """One line shape: the regex for its body and the names its fields are stored under."""

    pattern: re.Pattern[str]
    names: tuple[str, ...]


class ShapeCache:
    """Known timer-line shapes, found by the body's first field name.

    Args:
        field: the regex of one ``name: value`` field (name in group 1, value in group 2),
            the same one the field-by-field path matches.
        value: the regex of one value, put in each shape as its capturing group.
    """

    def __init__(self, field: re.Pattern[str], value: str) -> None:
        self._field = field
        self._value = value
        self._by_head: dict[str, list[Shape]] = {}
        self._count = 0

    def match(self, body: str) -> tuple[tuple[str, ...], list[float]] | None:
        """Names and values of a body of a known shape, else None."""
        shapes = self._by_head.get(body[: body.find(":")])
        if shapes is None:
            return None
        for shape in shapes:
            m = shape.pattern.fullmatch(body)
            if m is not None:
                return shape.names, [float(v) for v in m.groups()]
        return None

    def learn(self, body: str, names: tuple[str, ...]) -> None:
        """Keep the shape of a body the field-by-field path parsed into ``names``."""
        key = body[: body.find(":")]
        if self._count >= MAX_SHAPES or len(self._by_head.get(key, ())) >= MAX_PER_HEAD:
            return
        printed: list[str] = []
        for part in body.split("|"):
            m = self._field.fullmatch(part)
            if m is None:
                return
            printed.append(m.group(1))
        fields = (rf"\s*{re.escape(name)}: ({self._value})\s*" for name in printed)
        self._by_head.setdefault(key, []).append(Shape(re.compile(r"\|".join(fields)), names))
        self._count += 1


MICRO = (
    "fwd_microstep",
    "bwd_microstep",
    "bwd_inner_microstep",
    "bwd_allreduce_microstep",
    "step_microstep",
)
GLOBAL = ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step")
LEGACY_NAMES = {
    "forward_microstep": "fwd_microstep",
    "backward_microstep": "bwd_microstep",
    "backward_inner_microstep": "bwd_inner_microstep",
    "backward_allreduce_microstep": "bwd_allreduce_microstep",
    "forward": "fwd",
    "backward": "bwd",
    "backward_inner": "bwd_inner",
    "backward_allreduce": "bwd_allreduce",
}
_MOE_NAMES = {
    "forward": "fwd",
    "forward_moe": "fwd_moe",
    "1st alltoall": "1st_a2a",
    "2nd alltoall": "2nd_a2a",
    "top-k": "top_k",
}
COORDINATOR = frozenset(
    {
        "forward_fetch_submit",
        "forward_fetch_wait",
        "forward_prefetch_submit",
        "backward_fetch_submit",
        "backward_fetch_wait",
        "backward_prefetch_submit",
        "forward_all_gather",
        "backward_all_gather",
    }
)
SWAP = frozenset(
    {
        "swap_in_param",
        "swap_out_param",
        "swap_in_gradient",
        "swap_submit_write",
        "swap_submit_read_param",
        "swap_wait_read_param",
        "swap_in_state",
        "swap_out_state",
        "swap_out_gradient",
        "async_swap_in_state",
        "async_swap_gradient_wait",
        "swap_init_write",
        "unswapped_read_gradients",
    }
)
PIPELINE = frozenset(
    {"batch_input", "train_batch", "pipe_send_output", "pipe_send_grad"}
    | {"pipe_recv_input", "pipe_recv_grad"}
)
ZERO_OPTIMIZER = frozenset(
    {"optimizer_allgather", "optimizer_gradients", "optimizer_step"}
    # 0.17.6+ (ZeRO-1/2 CPU offload's overlapped step, ZenFlow)
    | {"optimizer_transmit_time", "optimizer_calc_time", "optimizer_receive_params_time"}
    | {"optimizer_update_model_time"}
)
ZERO3_OPTIMIZER = frozenset(
    {"optimizer_step", "init_optimizer_state", "optimizer_swap_in_state"}
    | {"optimizer_swap_out_state"}
    | {"optimizer_fp16_update", "optimizer_fp32_gradient"}  # 0.3.12-0.3.14
)
FP16_OPTIMIZER = frozenset(
    {"compute_norm", "overflow_check", "unscale_and_clip", "basic_step", "update_fp16"}
)
#: Every name DeepSpeed itself prints on a timer line, old and new.
KNOWN_NAMES = (
    frozenset(
        MICRO + GLOBAL + tuple(LEGACY_NAMES) + tuple(COORDINATOR) + tuple(SWAP) + tuple(PIPELINE)
    )
    | ZERO_OPTIMIZER
    | ZERO3_OPTIMIZER
    | FP16_OPTIMIZER
)
_GAP = re.compile(r"\s{2,}")
#: Megatron / GPT-NeoX timer names that are plain words (most carry a dash: ``forward-compute``).
MEGATRON_WORDS = frozenset({"optimizer", "interval_time"})
#: Lines always printed with all these fields in this order (ZeRO-1/2's since v0.10.1).
_FIXED_ORDER = (MICRO, GLOBAL, ("optimizer_allgather", "optimizer_gradients", "optimizer_step"))
#: Names printed as a single-field line by activation checkpointing's own timers.
ACT_CKPT = frozenset({"fwd", "forward", "backward"})

_HEAD = re.compile(r"(?:rank=(\d+) )?time \(ms\)(?: \|(.*)|\s*)$")
_RANK_PREFIX = re.compile(r"rank=\d*")
_VAL = r"-?\d+\.\d\d|-?(?:inf|nan)"
_NAME = r"[A-Za-z0-9_][\w .\-/]*?"
#: One field between ``|``s (neither a name nor a value holds a ``|``).
_FIELD = re.compile(rf"\s*({_NAME}): ({_VAL})\s*")
_VALUE = re.compile(_VAL)
_CUT_FIELD = re.compile(r"\s*(?:[A-Za-z0-9_][\w .\-/]*(?::\s*-?\d*\.?\d?)?)?$")
_DAMAGED = re.compile(rf"\s*{_NAME}: -?\d+\.\d\d\S")
_MOE = re.compile(r"\s*(fwd|forward): (\S+) \((.*)\)\s*$")
_Fields = tuple[tuple[str, ...], list[float]]
#: A value as DeepSpeed's ``%.2f`` prints a time that a record holds as it is (finite, not
#: negative, below the week ``dsmon.model.schema`` allows). A pattern text, also matched in
#: compiled code by the vector path (``dsmon.load.vector``), as are the two below.
PLAIN_VALUE = r"(?:0|[1-9][0-9]{0,7})\.[0-9][0-9]"  # ASCII digits: JSON as printed
_PLAIN_FIELD = rf"\s*{_NAME}: {PLAIN_VALUE}\s*"
#: A timer line's message whose every field holds a plain value (the body in group 1).
PLAIN_MESSAGE = rf"time \(ms\) \|((?:{_PLAIN_FIELD}\|)*{_PLAIN_FIELD})"
_COORD = re.compile(r"(\w+): count = (\d+), numel = (\d+)\s*$")


class PlainShape(NamedTuple):
    """What a timer line of plain values is, from its field names alone (:func:`plain_shape`)."""

    group: str
    names: tuple[str, ...]
    legacy: bool


def plain_shape(body: str) -> PlainShape | None:
    """How :class:`TimerParser` reads a body of plain fields; None unless it takes it alone.

    The group, stored names and legacy flag. Not taken alone: a body that does not parse, the first fields of a fixed-order line (the parser
    waits for its continuation), a name printed twice. The vector path reads the lines of a
    shape in compiled code and asks this once per shape.
    """
    fields = _fields(body)
    if fields is None or _MOE.match(body) or _cut_prefix(fields[0]):
        return None
    group, names, legacy = classify(fields[0])
    return PlainShape(group, names, legacy) if len(set(names)) == len(names) else None


class TimerParser:
    """Turns timer lines into :class:`TimerRecord` and drives the step clock."""

    in_block = False

    def __init__(self) -> None:
        #: A pipeline timer line was seen: this is the pipeline engine, whose fwd/bwd/step
        #: line comes every ``steps_per_print`` steps only, so it cannot count steps.
        self.pipeline_engine = False
        self._shapes = ShapeCache(_FIELD, _VAL)

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """One record per timer line; None for any other line."""
        text = line.text
        if "time (ms)" in text:
            m = _HEAD.match(text.lstrip())
            return None if m is None else self._timer_line(m, line, ctx)
        if ": count = " in text:
            return _coordinator_event(line, ctx)
        if len(text) < 20 and not ctx.final and text and _cut_head(text.lstrip()):
            return NEED_MORE  # ``rank=0 tim``: the line wrapped before ``time (ms)`` ended
        return None

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Nothing is held between lines."""
        return []

    def _timer_line(self, m: re.Match[str], line: LogLine, ctx: ParseContext) -> list[Record]:
        """Parse the fields after ``time (ms)``, classify them, build the record."""
        body = m.group(2) or ""
        fields = self._shapes.match(body)  # no MoE line has a shape: its fields hold ``(``
        if fields is None:
            moe = _MOE.match(body)
            if moe is not None:
                return _moe_record(moe, m, line, ctx)
            fields = _fields(body)
            if fields is None:
                if _looks_cut(body) and not ctx.final:
                    return NEED_MORE
                return self._record(_partial(body, line, ctx), m, line, ctx)
            self._shapes.learn(body, fields[0])
        if _cut_prefix(fields[0]) and not ctx.final:
            return NEED_MORE
        return self._record(fields, m, line, ctx)

    def _record(
        self, fields: _Fields | None, m: re.Match[str], line: LogLine, ctx: ParseContext
    ) -> list[Record]:
        """The record for a parsed line; the engine global line ends the step in progress."""
        if fields is None:
            return []
        names, values = fields
        group, canonical, legacy = classify(names)
        group, micro = self.advance(group, ctx)
        rank = line.rank if line.rank is not None else _int(m.group(1))
        rec = TimerRecord(
            src=ctx.src(line, rank=rank),
            ts=ctx.ts(line),
            group=group,
            values_ms=dict(zip(canonical, values, strict=True)),
            micro_step=micro,
            legacy=legacy or m.group(1) is not None,
        )
        return [rec]

    def advance(self, group: str, ctx: ParseContext) -> tuple[str, int | None]:
        """A line of ``group`` read: the group it is stored under, its micro-batch index.

        The step clock moves here (a micro line counts a micro-batch, the engine's global
        line ends the step), for the lines this parser reads and for those the vector path
        reads (``LogParser.take_timer``) alike.
        """
        if group == "pipeline":
            self.pipeline_engine = True
        elif group == "global" and self.pipeline_engine:
            group = "pipeline"
        micro = ctx.clock.next_micro() if group == "micro" else None
        if group == "global":
            ctx.clock.end_step()
        return group, micro


def _cut_head(text: str) -> bool:
    """``ti``, ``rank=0``, ``rank=0 time (m``: the start of a timer line and nothing more."""
    if "rank=".startswith(text):
        return True
    m = _RANK_PREFIX.match(text)
    if m is not None:
        text = text[m.end() :]
        if not text or text == " ":
            return True
        if not text.startswith(" "):
            return False
        text = text[1:]
    return "time (ms)".startswith(text) and text != ""


def _fields(body: str) -> _Fields | None:
    """Names and ms values of the ``| name: value`` fields, or None if one does not parse.

    Split on ``|``, one short match per field: a regex over the whole body to check it, then
    another to pick the fields out, took twice as long on the most common line of a big log.
    """
    names: list[str] = []
    values: list[float] = []
    for part in body.split("|"):
        m = _FIELD.fullmatch(part)
        if m is None:
            return None
        names.append(_rejoin(m.group(1)))
        values.append(float(m.group(2)))
    return tuple(names), values


@functools.lru_cache(maxsize=512)
def _rejoin(name: str) -> str:
    """A name as printed, with the spaces a terminal's re-wrapping left inside it removed.

    ``bwd_inner_micro      step`` is DeepSpeed's ``bwd_inner_microstep``; a run of spaces
    in any other name (Megatron's ``batch generator``) stands for one space.
    """
    if "  " not in name:
        return name
    joined = _GAP.sub("", name)
    return joined if joined in KNOWN_NAMES else _GAP.sub(" ", name)


def _split_last(body: str) -> tuple[str, str]:
    """The fields before the last one, and the last one (empty after a trailing ``|``)."""
    trimmed = body.rstrip()
    if trimmed.endswith("|"):
        return trimmed[:-1], ""
    head, _, last = trimmed.rpartition(" | ")
    return head, last


def _looks_cut(body: str) -> bool:
    """Every field but the last parses and the last stops short (terminal wrapping)."""
    head, last = _split_last(body)
    ok = not head.strip() or _fields(head) is not None
    return ok and _CUT_FIELD.fullmatch(last) is not None


@functools.lru_cache(maxsize=512)
def _cut_prefix(names: tuple[str, ...]) -> bool:
    """The fields are the first ones of a fixed-order line, which may continue on the next line.

    A line cut right after a value looks complete; only the known field order tells. A
    one-field ``fwd`` line is also activation checkpointing's: the join is tried and undone
    when the next line is not a continuation.
    """
    canonical = tuple(LEGACY_NAMES.get(n, n) for n in names)
    n = len(canonical)
    return any(n < len(seq) and canonical == seq[:n] for seq in _FIXED_ORDER)


def _partial(body: str, line: LogLine, ctx: ParseContext) -> _Fields | None:
    """A line that stays broken: count it; keep the fields before a cut or damaged last field.

    Keeping the complete fields of an engine line cut at the end of the input keeps the step
    count right; a value cut in the middle (or with a character glued to it, ``0.80M``) is
    never stored. A bare ``time (ms)`` is Megatron's timer log with no timer selected: nothing
    to store and nothing wrong.
    """
    if not body.strip():
        return None
    ctx.unparsed("timer", line)
    head, last = _split_last(body)
    fields = _fields(head) if head.strip() else None
    if fields is None or (_CUT_FIELD.fullmatch(last) is None and not _DAMAGED.match(last)):
        return None
    return fields


@functools.lru_cache(maxsize=512)
def classify(names: tuple[str, ...]) -> tuple[str, tuple[str, ...], bool]:
    """The timer group of a line's names, the names to store, and whether they are legacy.

    Args:
        names: the field names as printed, in order.

    Returns:
        ``(group, names, legacy)``: legacy names (``forward_microstep``...) are renamed to the
        v0.10.1+ ones for engine and pipeline lines only; other groups keep names as printed.
    """
    name_set = set(names)
    legacy = bool(name_set & LEGACY_NAMES.keys())
    canonical = tuple(LEGACY_NAMES.get(n, n) for n in names)
    if len(names) == 1 and names[0] in ACT_CKPT:
        return "act_ckpt", names, False
    if name_set & PIPELINE:
        return "pipeline", canonical, legacy
    if set(canonical) <= set(MICRO):
        return "micro", canonical, legacy
    if set(canonical) <= set(GLOBAL):
        return "global", canonical, legacy
    return _other_group(name_set), names, False


def _other_group(names: set[str]) -> str:
    """Groups that are not engine lines, by their name sets.

    Megatron-LM and GPT-NeoX time their own phases with names DeepSpeed never uses
    (``forward-backward``, ``batch generator``, ``optimizer``): such a line is ``megatron``.
    """
    if any(not n.isidentifier() for n in names) or names & MEGATRON_WORDS:
        return "megatron"
    if names <= ZERO_OPTIMIZER and names & {"optimizer_allgather", "optimizer_gradients"}:
        return "zero_optimizer"
    if names <= FP16_OPTIMIZER:
        return "fp16_optimizer"
    if names <= COORDINATOR:
        return "zero3_coordinator"
    if names <= SWAP:
        return "swap"
    if names <= ZERO3_OPTIMIZER | SWAP:
        return "zero3_optimizer"
    return "other"


def _moe_record(
    moe: re.Match[str], m: re.Match[str], line: LogLine, ctx: ParseContext
) -> list[Record]:
    """``fwd: X (fwd_moe: X, 1st_a2a: X, 2nd_a2a: X, top_k: X)``, old names mapped too."""
    values: dict[str, float] = {}
    legacy = moe.group(1) == "forward"
    for part in [f"{moe.group(1)}: {moe.group(2)}", *moe.group(3).split(", ")]:
        name, _, value = part.partition(": ")
        if _VALUE.fullmatch(value.strip()) is None:
            ctx.unparsed("timer", line)
            return []
        values[_MOE_NAMES.get(name.strip(), name.strip())] = float(value)
    rank = line.rank if line.rank is not None else _int(m.group(1))
    rec = TimerRecord(
        src=ctx.src(line, rank=rank),
        ts=ctx.ts(line),
        group="moe",
        values_ms=values,
        legacy=legacy or m.group(1) is not None,
    )
    return [rec]


def _coordinator_event(line: LogLine, ctx: ParseContext) -> list[Record] | None:
    """ZeRO-3 coordinator ``forward_fetch_submit: count = 12, numel = 3456`` (v0.10.0)."""
    m = _COORD.match(line.text.strip())
    if m is None or m.group(1) not in COORDINATOR:
        return None
    rec = CoordinatorEventRecord(
        src=ctx.src(line),
        ts=ctx.ts(line),
        event=m.group(1),
        count=int(m.group(2)),
        numel=int(m.group(3)),
    )
    return [rec]


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)
