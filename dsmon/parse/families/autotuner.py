"""The autotuner's output in a log: its results table, its completion line and its progress.

``deepspeed --autotuning run|tune`` prints the results with ``print()`` as a tabulate pipe table
(``| tuning_space | num_experiments | best_metric_val | best_exp_name |``; ``num_exps`` in 0.5.x),
then logs which experiment is optimal and ``Tuning completed in H:MM:SS.ffffff``. The same table
and line, with ``. Total number of experiments: N.``, make up ``results_dir/summary.txt``, which
:func:`dsmon.parse.side_files.parse_autotune_summary` reads with this parser, so a log and the file
give the same records.

Table rows are held until the completion line names the tuning time (or :data:`MAX_AWAIT` lines
went by without it, or the input ended), then become one :class:`AutotuneSummaryRecord` each.
The autotuner's progress lines (start, resources, model profile run, optimal experiment, end)
become ``autotuning`` events, so a run's timeline shows where tuning stood when it stopped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from typing import Any

from dsmon.model import units
from dsmon.model.records import AutotuneSummaryRecord, EventRecord, Record
from dsmon.parse.base import ParseContext, contains_any
from dsmon.parse.lines import LogLine
from dsmon.parse.pyrepr import scalar

KIND = AutotuneSummaryRecord.KIND
EVENT = "autotuning"
#: Lines after the table within which ``Tuning completed in ...`` is awaited.
MAX_AWAIT = 50
DONE = re.compile(
    r"Tuning completed in (?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)"
    r"(?:\. Total number of experiments: (\d+))?"
)
_SEPARATOR = re.compile(r"^\|[\s:|-]+\|$")

#: Progress lines of ``autotuner.py`` and ``runner.py``: pattern (named groups become the
#: event's detail) -> stage.
_PROGRESS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), stage)
    for pattern, stage in (
        (r"\[Start\] Running autotuning", "start"),
        (r"\[End\] Running autotuning", "end"),
        (
            r"Created autotuning (?P<which>experiments|results) directory: (?P<path>\S+)",
            "directory",
        ),
        (r"active_resources = OrderedDict\((?P<resources>.*)\)\s*$", "resources"),
        (r"Starting model info profile run", "model_info_profile"),
        (r"The model has (?P<num_params>.+?) parameters\.", "model_info"),
        (r"The model is not runnable with DeepSpeed with error = (?P<error>.*)", "not_runnable"),
        (
            r"^(?P<exp_name>\S+) is the optimal setup after tuning\."
            r" The exp result is at (?P<result_dir>\S+?)\.?$",
            "optimal",
        ),
        (r"No optimal setup is found|No optimal DeepSpeed configuration found", "no_optimal"),
        (DONE.pattern, "completed"),
    )
)
#: Words one of which every progress line holds: a substring test rules out most lines cheaply.
_KEYWORDS = (
    "autotuning",
    "active_resources",
    "model info profile",
    "The model ",
    "optimal setup",
    "Tuning completed",
)


def _hosts(printed: str) -> Any:
    """``[('localhost', [0, 1, 2, 3])]`` (inside ``OrderedDict(...)``): host -> GPU ids."""
    try:
        return {str(host): list(ids) for host, ids in ast.literal_eval(printed)}
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return printed


_CONVERT: dict[str, Callable[[str], Any]] = {
    "resources": _hosts,
    "num_params": units.parse_params,
    "error": str.strip,
}


def _detail(stage: str, m: re.Match[str]) -> dict[str, Any]:
    """The named groups of a progress line, converted; the tuning time for ``completed``."""
    if stage == "completed":
        return {"duration_s": duration_s(m), "total_experiments": total_experiments(m)}
    return {k: _CONVERT.get(k, str)(v) for k, v in m.groupdict().items() if v is not None}


def duration_s(m: re.Match[str]) -> float:
    """Seconds of a ``[D day(s), ]H:MM:SS[.ffffff]`` matched by :data:`DONE`."""
    days = int(m.group(1) or 0)
    return days * 86400 + int(m.group(2)) * 3600 + int(m.group(3)) * 60 + float(m.group(4))


def total_experiments(m: re.Match[str]) -> int | None:
    """The experiment count the completion line names (summary.txt only)."""
    return int(m.group(5)) if m.group(5) else None


def _cells(text: str) -> list[str]:
    return [c.strip() for c in text.strip().strip("|").split("|")]


def summary_record(
    cells: Mapping[str, str], src: Any, duration: float | None, total: int | None, ts: str | None
) -> AutotuneSummaryRecord:
    """One table row as a record; headers read by name (``num_experiments`` or ``num_exps``)."""

    def num(*names: str) -> Any:
        for n in names:
            if cells.get(n):
                return scalar(cells[n])
        return None

    count = num("num_experiments", "num_exps")
    value = num("best_metric_val")
    return AutotuneSummaryRecord(
        src=src,
        ts=ts,
        tuning_space=cells.get("tuning_space", ""),
        num_experiments=count if isinstance(count, int) and not isinstance(count, bool) else None,
        best_metric_val=float(value) if isinstance(value, int | float) else None,
        best_exp_name=cells.get("best_exp_name") or None,
        tuning_duration_s=duration,
        total_experiments=total,
    )


class AutotunerParser:
    """The results table (held until its completion line) and the autotuner's progress lines."""

    def __init__(self) -> None:
        self.in_block = False
        self._header: list[str] | None = None
        self._rows: list[tuple[LogLine, dict[str, str]]] = []
        self._waited = 0

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records from one logical line; see :mod:`dsmon.parse.base`."""
        text = line.text.strip()
        if text.startswith("|") and line.ts is None:
            return self._table_line(text, line, ctx)
        if self._header is not None:
            self._header = None  # the table ended; its rows wait for the completion line
        out: list[Record] = []
        done = DONE.search(text) if "Tuning completed" in text else None
        if done:
            out = self._flush(ctx, duration_s(done), total_experiments(done))
        elif self._rows:
            self._waited += 1
            if self._waited > MAX_AWAIT:
                return self._flush(ctx, None, None) or None
        event = self._progress(text, line, ctx)
        if event is None:
            return out or None
        return out + [event]

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: rows still waiting leave without a tuning time."""
        return self._flush(ctx, None, None)

    def _table_line(self, text: str, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """A pipe-table line: the header (only the autotuner's), its separator, or a row."""
        cells = _cells(text)
        if cells[:1] == ["tuning_space"]:
            out = self._flush(ctx, None, None)  # a second table: the first is complete
            self._header = cells
            self.in_block = True
            return out
        if self._header is None:
            return None
        if _SEPARATOR.match(text):
            return []
        if len(cells) != len(self._header):
            ctx.unparsed(KIND, line)
            return []
        self._rows.append((line, dict(zip(self._header, cells, strict=True))))
        return []

    def _flush(self, ctx: ParseContext, duration: float | None, total: int | None) -> list[Record]:
        """The held rows as records, with the tuning time when it is known."""
        rows, self._rows = self._rows, []
        self._header, self._waited, self.in_block = None, 0, False
        return [
            summary_record(cells, ctx.src(line), duration, total, ctx.ts(line))
            for line, cells in rows
        ]

    @staticmethod
    def _progress(text: str, line: LogLine, ctx: ParseContext) -> EventRecord | None:
        """An ``autotuning`` event for a progress line of the autotuner, else None."""
        if not contains_any(text, _KEYWORDS):
            return None
        for pattern, stage in _PROGRESS:
            m = pattern.search(text)
            if m:
                return EventRecord(
                    src=ctx.src(line),
                    ts=ctx.ts(line),
                    name=EVENT,
                    message=text,
                    detail={"stage": stage, **_detail(stage, m)},
                )
        return None
