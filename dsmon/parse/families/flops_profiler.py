"""The flops-profiler block: summary, aggregated top modules and the detailed module tree.

DeepSpeed prints the block with ``print()`` on rank 0 (or writes it to ``output_file``) once per
micro-step of the profiled step. It is long and un-prefixed, so lines of other processes may land
inside it; those carry their own logger header and are left to the other parsers. One
:class:`~dsmon.model.records.FlopsProfileRecord` is made per block. A block is whole when its closing
dashed line arrived or its module tree closed; one cut by the end of input or by the next
block's title (a run killed mid-profile, a pasted excerpt) is counted (``ctx.cut_block``) and
kept with ``partial`` set: what it printed was measured, what it never reached stays None.

Summary labels are matched by meaning, whatever their spacing and case (:data:`SUMMARY_LABELS`):
70 columns since v0.10.1, 60 before (``params per gpu``, factors like ``2.0``, the ``paralel``
typo), the forward-only summary of ``get_model_profile`` and the early ``Summary of forward
pass`` layout. Module entries read as ``X = Y% Params`` (v0.10.1+) or ``X, Y% Params`` (before).
Values go through :mod:`dsmon.model.units`, which reads the unit each value was printed with. In the module tree the model
itself has path ``""`` (as in ``named_modules()``); a container whose numbers PyTorch does not
print (``ModuleList``) keeps them None.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from dsmon.model import units
from dsmon.model.records import FlopsProfileRecord, ModuleAggregate, ModuleProfile, Record
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.lines import LogLine

# ------------------------------------------------------------------------------------------
# How the flops profiler prints its figures, in every layout: summary labels and module numbers.
#
# DeepSpeed changed the summary's wording and layout several times (``Summary of forward pass``
# in 0.3, 60-column labels with ``params per gpu`` and the ``paralel`` typo until v0.10.1, 70
# columns since, the forward-only summary of ``get_model_profile``), and the module entries from
# ``X, Y% Params`` to ``X = Y% Params``. This module maps each printed form to a record field,
# so :mod:`dsmon.parse.families.flops_profiler` follows the block and never the wording.

_FACTOR = re.compile(r"= (\d+(?:\.\d+)?) \*")
#: A module entry's numbers: ``X = Y% Params, ...`` since v0.10.1, ``X, Y% Params, ...`` before.
_NEW_STATS = re.compile(
    r"^(?P<params>[^,=]+?) = (?P<params_pct>\S+)% Params, (?P<macs>[^,=]+?) = (?P<macs_pct>\S+)%"
    r" MACs, (?P<lat>[^,=]+?) = (?P<lat_pct>\S+)% latency, (?P<flops>[^,]+?)(?:, (?P<extra>.*))?$"
)
_OLD_STATS = re.compile(
    r"^(?P<params>[^,]+?), (?P<params_pct>\S+)% Params, (?P<macs>[^,]+?), (?P<macs_pct>\S+)% MACs,"
    r" (?P<lat>[^,]+?), (?P<lat_pct>\S+)% (?:latency|time), (?P<flops>[^,]+?)(?:, ?(?P<extra>.*))?$"
)

Parse = Callable[[str], Any]
_INT, _PARAMS, _MACS, _COUNT = units.parse_int, units.parse_params, units.parse_macs, units.parse_si
_MS, _RATE = units.parse_duration_ms, units.parse_flops_rate

#: Summary labels by meaning, first match wins, tried on the label as :func:`_normalise` gives
#: it (lower case, one space, ``FLOPS`` as ``flops/s``, ``per device`` as ``per gpu``). The
#: pre-0.4 forward-only summary (``Number of parameters:``, ``Latency:``) reads into the same
#: fields as the engine summary of later versions.
SUMMARY_LABELS: tuple[tuple[re.Pattern[str], str, Parse], ...] = tuple(
    (re.compile(pattern), name, parse)
    for pattern, name, parse in (
        (r"profile step$", "profile_step", _INT),
        (r"world size$", "world_size", _INT),
        (r"data parallel size$", "data_parallel_size", _INT),
        (r"model parallel size$", "model_parallel_size", _INT),
        (r"batch size per gpu$", "batch_size_per_gpu", _INT),
        (r"params per gpu$|number of parameters$", "params_per_gpu", _PARAMS),
        (r"params of model(?: =|$)", "params_total", _PARAMS),
        (r"fwd macs per gpu$|number of multiply-accumulate operations", "fwd_macs_per_gpu", _MACS),
        (
            r"fwd flops per gpu(?: =|$)|number of floating[- ]point operations(?! per)",
            "fwd_flops_per_gpu",
            _COUNT,
        ),
        (r"fwd flops of model", "fwd_flops_total", _COUNT),
        (r"(?:fwd )?latency$", "fwd_latency_ms", _MS),
        (
            r"fwd flops/s per gpu|floating[- ]point operations per second",
            "fwd_flops_per_s_per_gpu",
            _RATE,
        ),
        (r"bwd latency$", "bwd_latency_ms", _MS),
        (r"bwd flops/s per gpu", "bwd_flops_per_s_per_gpu", _RATE),
        (r"fwd\+bwd flops/s per gpu", "fwd_bwd_flops_per_s_per_gpu", _RATE),
        (r"step latency$", "step_latency_ms", _MS),
        (r"iter latency$", "iter_latency_ms", _MS),
        (r"flops/s per gpu", "flops_per_s_per_gpu", _RATE),
        (r"samples(?:/| per )second$", "samples_per_s", units.parse_float),
    )
)

#: How the bwd_factor is read off a label's ``= N *``: the fwd+bwd and iter factors are N - 1.
FACTOR_OFFSET = {"bwd_flops_per_s_per_gpu": 0, "fwd_bwd_flops_per_s_per_gpu": 1}
FACTOR_OFFSET["flops_per_s_per_gpu"] = 1

AGG_METRICS: dict[str, tuple[str, Parse]] = {
    "params": ("params", _PARAMS),
    "MACs": ("macs", _MACS),
    "flops": ("flops", _COUNT),
    "fwd latency": ("fwd_latency", _MS),
    "latency": ("fwd_latency", _MS),
}


def _normalise(label: str) -> tuple[str, float | None]:
    """A label in one spelling for every version, and the ``= N *`` factor it carried.

    Case is dropped except where it carries meaning: ``fwd flops per GPU`` is a count and
    ``fwd FLOPS per GPU`` a rate, so ``FLOPS`` becomes ``flops/s`` first.
    """
    text = " ".join(label.split()).rstrip(":").rstrip()
    m = _FACTOR.search(text)
    text = text.replace("FLOPS", "flops/s").lower().replace("paralel ", "parallel ")
    text = re.sub(r"\bper (?:gpu|device)\b", "per gpu", text)
    return text, float(m.group(1)) if m else None


@functools.lru_cache(maxsize=1024)
def summary_field(label: str) -> tuple[str, Parse, float | None] | None:
    """The record field a summary label stands for, its reader and its ``= N *`` factor.

    Kept per label: a profiled run prints the same twenty labels in every block, and
    normalising one and trying it against :data:`SUMMARY_LABELS` cost half a block's reading.
    """
    text, factor = _normalise(label)
    for pattern, name, parse in SUMMARY_LABELS:
        if pattern.match(text):
            return name, parse, factor
    return None


def match_stats(text: str) -> re.Match[str] | None:
    """The profiler's numbers in either the v0.10.1+ or the older layout."""
    return _NEW_STATS.match(text) or _OLD_STATS.match(text)


def apply_stats(module: ModuleProfile, m: re.Match[str]) -> ModuleProfile:
    """Fill a module's figures from a matched numbers text."""
    return replace(
        module,
        params=units.parse_params(m.group("params")),
        params_pct=units.parse_float(m.group("params_pct")),
        macs=units.parse_macs(m.group("macs")),
        macs_pct=units.parse_float(m.group("macs_pct")),
        fwd_latency_ms=units.parse_duration_ms(m.group("lat")),
        fwd_latency_pct=units.parse_float(m.group("lat_pct")),
        fwd_flops_per_s=units.parse_flops_rate(m.group("flops")),
        extra=(m.group("extra") or "").strip() or None,
    )


KIND = FlopsProfileRecord.KIND
#: Aggregated entries kept for the next block (:meth:`FlopsProfilerParser._top_pairs`).
MAX_ENTRIES = 4096

_TITLE = re.compile(r"^-{5,} (?:DeepSpeed )?Flops Profiler -{5,}\s*$")
_AT_STEP = re.compile(r"^Profile Summary at step (\d+):?\s*$")
#: ``per GPU`` in DeepSpeed; accelerator-neutral forks print ``per device`` (any word is read).
_AGG_TITLE = re.compile(r"^-{5,} Aggregated Profile(?: per \w+)? -{5,}\s*$")
_DETAIL_TITLE = re.compile(r"^-{5,} Detailed Profile(?: per \w+)? -{5,}\s*$")
_CLOSE = re.compile(r"^-{40,}\s*$")
_LABELLED = re.compile(r"^(?P<label>[^:|\[\]]+?):(?P<gap>\s+)(?P<value>\S.*?)\s*$")
_DEPTH = re.compile(r"^depth (\d+):\s*$")
_TOP = re.compile(r"^Top (?:\d+ )?modules in terms of")
#: The early one-line form: ``Top 3 modules in MACs at depth 2 are {'Conv2d': '421.91 MMACs'}``.
_OLD_TOP = re.compile(
    r"^Top \d+ modules in (?P<metric>MACs|params|latency) at depth (?P<depth>\d+) are"
)
_AGG_ROW = re.compile(r"^\s*(?P<metric>params|MACs|flops|fwd latency)\s+- (?P<body>.*?)\s*$")
_PAIR = re.compile(r"'([^']+)':\s*'([^']*)'")
_ROOT = re.compile(r"^(?P<indent>\s*)(?P<cls>[A-Za-z_][\w.]*)\((?P<rest>.*)$")
_CHILD = re.compile(
    r"^(?P<indent>\s*)\((?P<name>[^()]*)\): (?:\d+ x )?(?P<cls>[A-Za-z_][\w.]*)\((?P<rest>.*)$"
)
_CLOSE_PAREN = re.compile(r"^(?P<indent>\s*)\)\s*$")
#: Fixed prose inside the block: the notation paragraph and the detailed-tree legend.
_PROSE = re.compile(
    r"^(?:Notations:|data parallel size \(dp_size\)|number of (?:parameters|floating)"
    r"|fwd latency \(forward|step \(weights update|Note:|Each module profile is listed"
    r"|params, percentage of total|[123]\. (?:A module|Number of floating|The fwd latency)"
    r"|no __flops__ attribute)"
)


def _bad(ctx: ParseContext, line: LogLine, what: str) -> None:
    """Count an unreadable value, naming file, line and field."""
    where = f"{ctx.where(line)}: field {what!r}"
    ctx.diag.note(ctx.diag.unparsed, KIND, where, line.text)


@dataclass(slots=True)
class _Block:
    """What has been read of one block so far."""

    head: LogLine
    ts: str | None
    section: str = "summary"
    values: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, str] = field(default_factory=dict)
    top: list[ModuleAggregate] = field(default_factory=list)
    depth: int | None = None
    modules: list[ModuleProfile] = field(default_factory=list)
    stack: list[tuple[int, str]] = field(default_factory=list)
    awaiting_stats: bool = False
    tree_done: bool = False


class FlopsProfilerParser:
    """Reads flops-profiler blocks from a log or a profiler ``output_file``."""

    def __init__(self) -> None:
        self._block: _Block | None = None
        self.in_block = False
        #: The aggregated rows' entries read so far, by (depth, metric, class, printed value):
        #: a profiled run prints the same top modules in every block, and an entry is frozen.
        self._entries: dict[tuple[int, str, str, str], ModuleAggregate] = {}

    def _start(self, block: _Block | None) -> None:
        """Enter a new block, or leave the current one (None)."""
        self._block = block
        self.in_block = block is not None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records from one logical line; see :mod:`dsmon.parse.base`."""
        text = line.text
        if _TITLE.match(text):
            out = self._close(ctx, line)
            self._start(_Block(head=line, ts=ctx.ts(line)))
            return out
        block = self._block
        if block is None or line.ts is not None or line.traceback:
            return None
        if _CLOSE.match(text):
            return self._emit(ctx)
        return self._feed_block(block, line, ctx)

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: a block whose tree closed is whole; any other is kept as partial."""
        return self._close(ctx, None)

    def _close(self, ctx: ParseContext, line: LogLine | None) -> list[Record]:
        """A block is interrupted: whole if its tree closed, else counted as cut and kept partial.

        A cut block still holds figures DeepSpeed measured; they are kept with ``partial`` set
        rather than dropped, and a block that never got past its title yields nothing.
        """
        block = self._block
        if block is None:
            return []
        if block.tree_done:
            return self._emit(ctx)
        ctx.cut_block(KIND, line if line is not None else block.head)
        if not (block.values or block.extra or block.top or block.modules):
            self._start(None)
            return []
        return self._emit(ctx, partial=True)

    def _emit(self, ctx: ParseContext, partial: bool = False) -> list[Record]:
        """One record for the block read so far."""
        block = self._block
        assert block is not None
        self._start(None)
        rec = FlopsProfileRecord(
            src=ctx.src(block.head),
            ts=block.ts,
            extra=dict(block.extra),
            top_modules=tuple(block.top),
            modules=tuple(block.modules),
            partial=partial,
            **block.values,
        )
        return [rec]

    def _feed_block(self, block: _Block, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """A line inside a block: switch section or hand it to the section's reader."""
        text = line.text
        m = _AT_STEP.match(text)
        if m:
            block.values["profile_step"] = int(m.group(1))
            block.section = "summary"
            return []
        if _AGG_TITLE.match(text):
            block.section = "aggregated"
            return []
        if _DETAIL_TITLE.match(text):
            block.section = "detailed"
            return []
        if not text.strip() or _PROSE.match(text):
            return []
        if block.section == "summary":
            return self._summary(block, line, ctx)
        if block.section == "aggregated":
            return self._aggregated(block, line, ctx)
        if block.section == "detailed":
            return self._tree(block, line, ctx)
        return None

    def _summary(self, block: _Block, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """One ``label:   value`` line of the summary."""
        m = _LABELLED.match(line.text)
        if not m:
            return None
        known = summary_field(m.group("label"))
        if known is None:
            if len(m.group("gap")) < 2:
                return None  # not padded like the summary: someone else's "x: y" line
            block.extra[m.group("label").strip()] = m.group("value")
            return []
        name, parse, factor = known
        value = parse(m.group("value"))
        if value is None:
            _bad(ctx, line, " ".join(m.group("label").split()))
        block.values[name] = value
        self._note_width(block, m)
        self._note_factor(block, name, factor)
        return []

    @staticmethod
    def _note_width(block: _Block, m: re.Match[str]) -> None:
        """The label column width, from the first line whose label is shorter than it."""
        if "width" in block.values:
            return
        width = m.start("value") - 2
        if width > m.end("label") + 2:
            block.values["width"] = width

    @staticmethod
    def _note_factor(block: _Block, name: str, factor: float | None) -> None:
        """``bwd_factor`` from the first FLOPS label that printed one."""
        if factor is None or name not in FACTOR_OFFSET or "bwd_factor" in block.values:
            return
        block.values["bwd_factor"] = factor - FACTOR_OFFSET[name]

    def _aggregated(self, block: _Block, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """``depth N:`` and its ``params - {...}`` / ``MACs - {...}`` / ``fwd latency`` rows."""
        text = line.text
        m = _DEPTH.match(text)
        if m:
            block.depth = int(m.group(1))
            return []
        m = _OLD_TOP.match(text)
        if m:
            block.depth = int(m.group("depth"))
            self._top_pairs(block, m.group("metric"), text[m.end() :], line, ctx)
            return []
        if _TOP.match(text):
            return []
        m = _AGG_ROW.match(text)
        if not m:
            return None
        if block.depth is None:
            _bad(ctx, line, "depth")
            return []
        self._top_pairs(block, m.group("metric"), m.group("body"), line, ctx)
        return []

    def _top_pairs(
        self, block: _Block, printed: str, body: str, line: LogLine, ctx: ParseContext
    ) -> None:
        """The ``{'Class': 'value', ...}`` of one aggregated row, at the current depth."""
        depth = block.depth
        assert depth is not None
        metric, parse = AGG_METRICS[printed]
        entries = self._entries
        for cls, raw in _PAIR.findall(body):
            entry = entries.get((depth, printed, cls, raw))
            if entry is None:
                value = parse(raw)
                entry = ModuleAggregate(depth=depth, metric=metric, module_class=cls, value=value)
                if len(entries) >= MAX_ENTRIES:
                    entries.clear()
                entries[(depth, printed, cls, raw)] = entry
            if entry.value is None:
                _bad(ctx, line, f"{metric}[{cls}]")
            block.top.append(entry)

    def _tree(self, block: _Block, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """One line of the printed module tree."""
        text = line.text
        awaiting, block.awaiting_stats = block.awaiting_stats, False
        if awaiting and block.modules and self._container_stats(block, text):
            return []
        m = _CLOSE_PAREN.match(text)
        if m:
            _close_container(block, len(m.group("indent")))
            return []
        m = _CHILD.match(text) if block.stack else _ROOT.match(text)
        if not m or block.tree_done:
            return None
        return self._module(block, m, line, ctx)

    def _module(
        self, block: _Block, m: re.Match[str], line: LogLine, ctx: ParseContext
    ) -> list[Record]:
        """A module's opening line: a container (``Cls(``) or a leaf with its numbers."""
        indent = len(m.group("indent"))
        rest = m.group("rest").rstrip()
        if rest and not rest.endswith(")"):
            if not ctx.final:
                return NEED_MORE  # a leaf cut by terminal wrapping
            rest += ")"  # no continuation will come: read what is there
        stack = block.stack
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        name = m.groupdict().get("name") or ""
        path = ".".join([n for _, n in stack[1:]] + [name]) if stack else ""
        module = ModuleProfile(path=path, module_class=m.group("cls"), depth=len(stack))
        if rest:
            leaf = _with_stats(module, rest[:-1], ctx, line)
            if leaf is None:
                return []  # counted; kept out of the tree, so an undone join leaves no trace
            module = leaf
            block.tree_done = not stack  # a model that is a single leaf module
        else:
            stack.append((indent, name))
            block.awaiting_stats = True
        block.modules.append(module)
        return []

    @staticmethod
    def _container_stats(block: _Block, text: str) -> bool:
        """The numbers line right under a container's ``Cls(`` line, if this is one."""
        stats = match_stats(text.strip())
        if stats is None:
            return False
        block.modules[-1] = apply_stats(block.modules[-1], stats)
        return True


def _close_container(block: _Block, indent: int) -> None:
    """A ``)`` line: leave the container opened at that indent; the root's ends the tree."""
    stack = block.stack
    if stack and indent <= stack[0][0]:
        block.tree_done = True
        return
    while len(stack) > 1 and stack[-1][0] >= indent:
        stack.pop()


def _with_stats(
    module: ModuleProfile, inner: str, ctx: ParseContext, line: LogLine
) -> ModuleProfile | None:
    """A leaf's numbers (and original extra repr) from the text inside its parentheses.

    None for numbers that do not read (a line cut short): the leaf is counted, not stored.
    """
    stats = match_stats(inner.strip())
    if stats is not None:
        return apply_stats(module, stats)
    if "% Params" in inner:
        _bad(ctx, line, f"module {module.path or module.module_class}")
        return None
    return replace(module, extra=inner.strip() or None)
