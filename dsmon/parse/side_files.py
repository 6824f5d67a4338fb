"""Files DeepSpeed writes besides the log: csv_monitor series, autotuner results, ds_config.json.

Pure functions from a file's text to records; the caller does the reading (and the tailing), so
the collector and the tests share one code path. A bad row of a series is counted and skipped
with its file and line; a file that cannot be read as a whole (a config or a metrics file that is
not JSON, a duplicated config key) raises :class:`FileFormatError` naming the file and line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import PurePath
from typing import Any

import hjson

from dsmon.model.records import (
    AutotuneExperimentRecord,
    AutotuneSummaryRecord,
    ConfigRecord,
    FlopsProfileRecord,
    MonitorPointRecord,
    Record,
    Source,
)
from dsmon.parse.base import Diagnostics
from dsmon.parse.families.autotuner import AutotunerParser
from dsmon.parse.families.flops_profiler import FlopsProfilerParser
from dsmon.parse.log import LogParser

_US_PER_MS = 1000.0


class FileFormatError(ValueError):
    """A whole file is unusable; the message reads ``file:line: field 'x': reason``."""

    def __init__(self, file: str | None, line: int | None, reason: str, field: str | None = None):
        self.file, self.line, self.field = file, line, field
        where = f"{file or '-'}:{line}" if line is not None else f"{file or '-'}"
        what = f"field {field!r}: " if field else ""
        super().__init__(f"{where}: {what}{reason}")


class _DuplicateKeyError(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """DeepSpeed loads its config with a hook that rejects a key given twice; so do we."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


def _key_line(text: str, key: str) -> int | None:
    """Line of the last occurrence of ``"key":`` (the duplicate), for the error message."""
    found = None
    for m in re.finditer(r'"?' + re.escape(key) + r'"?\s*:', text):
        found = text.count("\n", 0, m.start()) + 1
    return found


def load_config_text(text: str, file: str | None = None) -> dict[str, Any]:
    """A DeepSpeed config as DeepSpeed reads it: JSON, else HJSON; duplicate keys are errors.

    DeepSpeed parses a config path with ``hjson`` (comments, unquoted strings and missing
    commas pass) and a hook that raises on duplicate keys, so a file accepted here is one
    DeepSpeed accepts.
    """
    try:
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicates)
        except json.JSONDecodeError as strict:
            try:
                data = hjson.loads(text, object_pairs_hook=_no_duplicates)
            except _DuplicateKeyError:
                raise
            except ValueError:
                raise FileFormatError(file, strict.lineno, f"not JSON: {strict.msg}") from None
    except _DuplicateKeyError as dup:
        raise FileFormatError(
            file, _key_line(text, dup.key), "duplicate key (DeepSpeed rejects it)", dup.key
        ) from None
    if not isinstance(data, dict):
        raise FileFormatError(file, 1, "a DeepSpeed config must be a JSON object")
    return data


#: The file in which the autotuner saves the best config it found.
OPTIMAL_CONFIG = "ds_config_optimal.json"


def parse_ds_config(text: str, run: str, file: str | None = None) -> ConfigRecord:
    """A ``ds_config.json`` as a ``file`` ConfigRecord.

    The autotuner's ``ds_config_optimal.json`` gets origin ``autotune_optimal``: it is the
    setup it advises, not the config the run was started with, so no rule may judge it as such.
    """
    config = load_config_text(text, file)
    optimal = file is not None and PurePath(file).name == OPTIMAL_CONFIG
    origin = "autotune_optimal" if optimal else "file"
    return ConfigRecord(src=Source(run=run, file=file), origin=origin, config=config)


def _monitor_tag(file: str | None, name: str) -> str:
    """``Train_Samples_lr.csv`` with header ``step,lr`` -> ``Train/Samples/lr``.

    csv_monitor names the file ``tag.replace('/', '_').replace(' ', '_')``; the header keeps the
    last tag component as written, so the prefix is recovered from the file name.
    """
    stem = PurePath(file).stem if file else ""
    suffix = "_" + name.replace("/", "_").replace(" ", "_")
    if stem.endswith(suffix) and len(stem) > len(suffix):
        return stem[: -len(suffix)].replace("_", "/") + "/" + name
    return "Train/Samples/" + name


def parse_csv_monitor(
    text: str, run: str, file: str | None = None
) -> tuple[list[MonitorPointRecord], Diagnostics]:
    """One :class:`MonitorPointRecord` per row of a csv_monitor file (x = global samples).

    A resumed run appends to the file and writes the ``step,<name>`` header again; every
    header line is skipped. A row that is not ``<int>,<number>`` is counted and skipped. The
    csv module ends every row with a newline, so a last row without one is being written
    (``48,6.45`` of ``48,6.453303337097168``): it is counted as cut, not stored half.
    """
    diag = Diagnostics()
    out: list[MonitorPointRecord] = []
    name: str | None = None
    lines = text.splitlines()
    diag.lines = len(lines)
    if lines and not text.endswith(("\n", "\r")):
        diag.note(diag.cut, "csv_monitor", f"{file or '-'}:{len(lines)}", lines.pop())
    for lineno, raw in enumerate(lines, start=1):
        row = raw.strip()
        if not row:
            continue
        first, sep, second = row.partition(",")
        if first == "step" and sep:
            name = second
            continue
        point = _csv_point(first, sep, second)
        if name is None or point is None:
            diag.note(diag.unparsed, "csv_monitor", f"{file or '-'}:{lineno}", row)
            continue
        out.append(
            MonitorPointRecord(
                src=Source(run=run, file=file, line=lineno),
                tag=_monitor_tag(file, name),
                samples=point[0],
                value=point[1],
            )
        )
    diag.records = len(out)
    return out, diag


class CsvMonitorParser:
    """One csv_monitor file followed as it grows (the interface of ``LogParser``).

    ``dsmon run`` and ``dsmon watch`` follow the series a run's ``csv_monitor`` writes, each
    line as it is appended, as :func:`parse_csv_monitor` reads a whole file. The tag's
    prefix comes from the file name and its last part from the header; a parser started
    past the header (a collector restarted mid-file) takes DeepSpeed's ``Train/Samples/``
    prefix from the file name alone.
    """

    def __init__(self, run: str, file: str | None = None, node: str | None = None) -> None:
        self.run, self.file, self.node = run, file, node
        self._diag = Diagnostics()
        self._lineno = 0
        self._tag: str | None = None
        stem = PurePath(file).stem if file else ""
        if stem.startswith(_SAMPLES_PREFIX):
            self._tag = "Train/Samples/" + stem[len(_SAMPLES_PREFIX) :]

    @property
    def diag(self) -> Diagnostics:
        """The rows that could not be used so far."""
        return self._diag

    def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list[Record]:
        """One row: a header names the series, a ``<samples>,<value>`` row is a point."""
        self._lineno = line if line is not None else self._lineno + 1
        self._diag.lines += 1
        row = raw.strip()
        if not row:
            return []
        first, sep, second = row.partition(",")
        if first == "step" and sep:
            self._tag = _monitor_tag(self.file, second)
            return []
        point = _csv_point(first, sep, second)
        if self._tag is None or point is None:
            self._diag.note(self._diag.unparsed, "csv_monitor", f"{self.file}:{self._lineno}", row)
            return []
        self._diag.records += 1
        src = Source(run=self.run, file=self.file, line=self._lineno, offset=offset, node=self.node)
        return [MonitorPointRecord(src=src, tag=self._tag, samples=point[0], value=point[1])]

    def finish(self) -> list[Record]:
        """Nothing is held across rows."""
        return []

    def peek(self, partial: str) -> list[Record]:
        """A row being written is no point yet."""
        return []

    def handover(self) -> dict[str, Any]:
        """Each file names its own series."""
        return {}

    def take_over(self, state: Mapping[str, Any]) -> None:
        """Nothing to take over (see :meth:`handover`)."""


#: How csv_monitor's file names start for the engine's own series (``Train/Samples/...``).
_SAMPLES_PREFIX = "Train_Samples_"


def _csv_point(first: str, sep: str, second: str) -> tuple[int, float] | None:
    """``<global_samples>,<value>``; None for anything else (a cut row, a stray column)."""
    if not sep or "," in second or not first.isdigit():
        return None
    try:
        return int(first), float(second)
    except ValueError:
        return None


def parse_autotune_summary(
    text: str, run: str, file: str | None = None
) -> tuple[list[AutotuneSummaryRecord], Diagnostics]:
    """The autotuner's ``summary.txt``: a tabulate pipe table, then ``Tuning completed in ...``.

    Read by the same parser as the table the autotuner prints in a log, so both give the same
    rows; a row of the wrong width is counted and skipped.
    """
    parser = LogParser(run, file, parsers=[AutotunerParser()])
    found = parser.feed_lines(text.splitlines())
    out = [r for r in found if isinstance(r, AutotuneSummaryRecord)]
    parser.diag.records = len(out)
    return out, parser.diag


def _json_object(text: str, file: str | None) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FileFormatError(file, exc.lineno, f"not JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise FileFormatError(file, 1, "expected a JSON object")
    return data


def _metric(data: Mapping[str, Any], file: str | None, *names: str) -> float | None:
    """A number from metrics.json by its current or pre-v0.10.1 name."""
    for name in names:
        if name in data and data[name] is not None:
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise FileFormatError(file, None, "expected a number", name)
            return float(value)
    return None


def parse_autotune_experiment(
    name: str,
    metrics_text: str,
    run: str,
    file: str | None = None,
    exp_text: str | None = None,
    ds_config_text: str | None = None,
) -> AutotuneExperimentRecord:
    """One experiment folder: ``metrics.json`` (+ ``exp.json``, ``ds_config.json`` if present).

    The engine writes fwd/bwd/step and latency in microseconds (timer ms x 1000); they are
    stored in ms. ``exp.json`` gives the GPU and node count and the experiment's ds_config.
    """
    metrics = _json_object(metrics_text, file)
    exp = _json_object(exp_text, None) if exp_text else {}
    ds_config = exp.get("ds_config")
    if ds_config_text is not None:
        ds_config = load_config_text(ds_config_text, None)

    def ms(*names: str) -> float | None:
        value = _metric(metrics, file, *names)
        return None if value is None else value / _US_PER_MS

    return AutotuneExperimentRecord(
        src=Source(run=run, file=file),
        name=name,
        fwd_ms=ms("fwd", "forward"),
        bwd_ms=ms("bwd", "backward"),
        step_ms=ms("step"),
        latency_ms=ms("latency"),
        flops_per_s_per_gpu=_metric(metrics, file, "FLOPS_per_gpu"),
        throughput_samples_per_s=_metric(metrics, file, "throughput"),
        num_gpus=exp.get("num_gpus") if isinstance(exp.get("num_gpus"), int) else None,
        num_nodes=exp.get("num_nodes") if isinstance(exp.get("num_nodes"), int) else None,
        ds_config=ds_config if isinstance(ds_config, dict) else None,
    )


# ------------------------------------------------------------------------------------------
# The flops profiler's own ``output_file``: every profile DeepSpeed wrote there, as records.
#
# Apart from :mod:`dsmon.parse.families.flops_profiler` (the block parser) because reading a whole file
# runs the log parser over it, and the log parser runs the block parser: kept in one module
# they imported each other.


def parse_profile_file(
    text: str, run: str, file: str | None, node: str | None = None
) -> tuple[list[FlopsProfileRecord], Diagnostics]:
    """Parse the whole text of a profiler ``output_file``.

    DeepSpeed rewrites that file on every profile, so its byte position is no identity: each
    record's ``src.sub`` is the block's ``profile_step`` (a rewrite at another step is a new
    record, a re-read of the same one is not), and ``step`` is the profile step, as the file
    has no step clock of its own.
    """
    parser = LogParser(run, file, node, parsers=[FlopsProfilerParser()])
    found = list(parser.feed_lines(text.splitlines()))
    return [_file_record(r) for r in found if isinstance(r, FlopsProfileRecord)], parser.diag


def _file_record(rec: FlopsProfileRecord) -> FlopsProfileRecord:
    """Key a record from the rewritten output file by its profile step (see above).

    A cut read (the file caught mid-write) is keyed apart from the whole one, ``-1 - step``,
    so the complete profile read later is stored beside it rather than refused as a repeat.
    """
    step = rec.profile_step
    sub = step or 0
    src = replace(rec.src, offset=None, sub=-1 - sub if rec.partial else sub)
    return replace(rec, src=src, step=step)
