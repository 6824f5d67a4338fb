"""The I/O edge for saved output: find what files and run folders hold, read them into records.

A run folder written by DeepSpeed holds several kinds of output: the combined stdout log
(``train.log``, a Slurm ``*.out``), per-rank logs from ``--enable_each_rank_log``
(``rank_logs/<time>_rank<N>.log``), the flops profiler's ``output_file``, csv_monitor
series (``Train_Samples_*.csv``), autotuner results (``summary.txt``, ``*/metrics.json``)
and the ``ds_config.json`` used. :func:`discover` (``dsmon.load.kinds``) tells them apart,
:func:`read_found` turns each into records with the pure parsers of ``dsmon.parse``, and
:func:`import_paths` streams them into a store. Logs are read in binary, one line at a time
(a 500 MB log never sits in memory), each line decoded as UTF-8 with replacement since real
logs carry stray bytes, and every record keeps the byte offset of its line. dsmon's own
JSON-lines records (``dsmon export``, ``dsmon parse``) are recognised by content too and read
back as they are (``dsmon.load.records_file``), keeping the runs they name unless one is given.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from dsmon.load import vector
from dsmon.load.kinds import (
    AUTOTUNE_EXP,
    AUTOTUNE_SUMMARY,
    CSV_MONITOR,
    DS_CONFIG,
    LOG,
    PROBE,
    PROFILE,
    RECORDS,
    Found,
    InputError,
    discover,
)
from dsmon.load.records_file import read_records_file
from dsmon.load.rotated import COMPRESSED, Carries, Unpacked, open_log
from dsmon.model.check import fit_all
from dsmon.model.records import Record
from dsmon.model.wire import EncodedRecord
from dsmon.parse import side_files
from dsmon.parse.base import OUT_OF_RANGE, PARSER_ERROR, Diagnostics, LineParser
from dsmon.parse.linereader import capped_lines, note_cut
from dsmon.parse.log import LogParser
from dsmon.parse.probe import ProbeParser
from dsmon.parse.run_files import run_name, starts_with_its_worker, with_rank
from dsmon.parse.side_files import parse_profile_file
from dsmon.store.records.rows import RecordRow
from dsmon.store.store import Store

Progress = Callable[[int], object]


@dataclass(slots=True)
class ImportResult:
    """What one run's import did."""

    run: str
    files: list[Found] = field(default_factory=list)
    records: int = 0
    inserted: int = 0
    diag: Diagnostics = field(default_factory=Diagnostics)
    #: The runs the records were stored under: ``run``, or those a records file names.
    runs: dict[str, None] = field(default_factory=dict)


def read_log(
    stream: BinaryIO,
    parser: LineParser,
    rank: int | None = None,
    progress: Progress | None = None,
) -> Iterator[Record]:
    """Records of a binary log stream, line by line, with byte offsets; then ``finish()``.

    A line longer than :data:`~dsmon.parse.linereader.MAX_LINE_BYTES` is parsed cut to that
    length (memory stays flat whatever the line) and counted in the parser's diagnostics.
    """
    offset = reported = 0
    for lineno, raw in enumerate(capped_lines(stream), start=1):
        recs = parser.feed(raw.data.decode("utf-8", "replace"), offset, lineno)
        if raw.cut:
            note_cut(parser.diag, parser.file, lineno)
        offset += raw.size
        if recs:
            yield from (recs if rank is None else with_rank(recs, rank))
        if progress is not None and offset - reported >= vector.PROGRESS_EVERY:
            progress(offset - reported)
            reported = offset
    yield from vector.finish_log(parser, rank, progress, offset - reported)


def read_found(
    found: Found,
    run: str | None,
    diag: Diagnostics,
    progress: Progress | None = None,
    default_run: str = "run",
    carries: Carries | None = None,
) -> Iterator[Record]:
    """Records from one input; a log's unparsed lines are added to ``diag``.

    ``run`` names the run of every record; when None, a records file keeps the runs its
    records name (a run moved between stores keeps its name) and other inputs are filed
    under ``default_run``. ``carries`` holds where each rotated log's parser stood after
    its last file read (``Found.family``): give the same dict to every file of a folder,
    in :func:`discover`'s order.
    """
    if found.kind == RECORDS:
        for rec in read_records_file(found.path, found.label, diag, run, progress):
            yield rec.record if isinstance(rec, EncodedRecord) else rec
        return
    run = run or default_run
    if found.kind in (LOG, PROBE):
        yield from _read_stream(found, run, diag, progress, carries, read_log)
        return
    yield from _parse_file(found, run, diag)
    if progress is not None:
        progress(found.path.stat().st_size)


def read_found_rows(
    found: Found,
    run: str | None,
    diag: Diagnostics,
    progress: Progress | None = None,
    default_run: str = "run",
    carries: Carries | None = None,
) -> Iterator[Record | RecordRow]:
    """What :func:`read_found` reads, for the store or as JSON lines: ``dsmon import``, ``parse``.

    A log's plain timer lines come as the rows the store keeps of their records, read in
    compiled code (:mod:`dsmon.load.vector`) where polars is installed; the same rows, in the
    same order, as those of :func:`read_found`'s records.
    """
    if found.kind == LOG and vector.available():
        yield from _read_stream(found, run or default_run, diag, progress, carries, vector.log_rows)
        return
    yield from read_found(found, run, diag, progress, default_run, carries)


_Item = TypeVar("_Item", Record, Record | RecordRow)


def _read_stream(
    found: Found,
    run: str,
    diag: Diagnostics,
    progress: Progress | None,
    carries: Carries | None,
    reader: Callable[[BinaryIO, Any, int | None, Progress | None], Iterator[_Item]],
) -> Iterator[_Item]:
    """A log or a probe file read by ``reader``; where its parser stood kept in ``carries``."""
    parser: LogParser | ProbeParser = (
        LogParser(run, found.label, from_start=starts_with_its_worker(found.path.as_posix()))
        if found.kind == LOG
        else ProbeParser(run, found.label)
    )
    family = found.family
    if carries is not None and family in carries:
        parser.take_over(carries[family])
    packed = found.path.name.endswith(COMPRESSED)  # offsets count decompressed bytes
    with open_log(found.path) as f:
        yield from reader(f, parser, found.rank, None if packed else progress)
        if isinstance(f, Unpacked) and f.error is not None:
            parser.diag.note(parser.diag.cut, "compressed file", found.label, f.error)
    if packed and progress is not None:
        progress(found.path.stat().st_size)
    diag.merge(parser.diag)
    if carries is not None and family is not None:
        carries[family] = parser.handover()


def _parse_file(found: Found, run: str, diag: Diagnostics) -> list[Record]:
    """Records of a whole non-log file; a file unusable as a whole is counted, not fatal.

    So is a file its parser raised on (a fault of dsmon's: the other inputs are read on),
    and a value no record can hold is left out and counted (``dsmon.model.check.fit``).
    """
    text = found.path.read_text(encoding="utf-8", errors="replace")
    try:
        recs = _parse_text(found, text, run, diag)
    except side_files.FileFormatError as exc:
        diag.note(diag.unparsed, found.kind, found.label, str(exc))
        return []
    except Exception as exc:  # noqa: BLE001 - see above
        diag.note(diag.unparsed, PARSER_ERROR, found.label, f"{type(exc).__name__}: {exc}")
        return []
    kept, problems = fit_all(recs)
    for problem in problems:
        diag.note(diag.unparsed, OUT_OF_RANGE, found.label, problem)
    return kept


def _parse_text(found: Found, text: str, run: str, diag: Diagnostics) -> Sequence[Record]:
    """The records of a whole non-log file's text, by its kind."""
    if found.kind == DS_CONFIG:
        return [side_files.parse_ds_config(text, run, found.label)]
    if found.kind == AUTOTUNE_EXP:
        return [_autotune_experiment(found, text, run)]
    recs, file_diag = _TABLE_PARSERS[found.kind](text, run, found.label)
    diag.merge(file_diag)
    return recs


_TABLE_PARSERS: dict[str, Callable[[str, str, str], tuple[Sequence[Record], Diagnostics]]] = {
    CSV_MONITOR: side_files.parse_csv_monitor,
    AUTOTUNE_SUMMARY: side_files.parse_autotune_summary,
    PROFILE: parse_profile_file,
}


def _autotune_experiment(found: Found, metrics: str, run: str) -> Record:
    """An experiment folder's ``metrics.json`` with its ``exp.json`` and ``ds_config.json``.

    Metrics saved under another name (a copy, a paste) are read alone, named after the file.
    """
    if found.path.name != "metrics.json":
        return side_files.parse_autotune_experiment(found.path.stem, metrics, run, found.label)
    folder = found.path.parent
    exp, cfg = folder / "exp.json", folder / "ds_config.json"
    return side_files.parse_autotune_experiment(
        folder.name,
        metrics,
        run,
        found.label,
        exp.read_text(encoding="utf-8", errors="replace") if exp.is_file() else None,
        cfg.read_text(encoding="utf-8", errors="replace") if cfg.is_file() else None,
    )


def _size(inputs: Iterable[Found]) -> int:
    total = 0
    for f in inputs:
        try:
            total += f.path.stat().st_size
        except OSError:
            continue
    return total


def plan(paths: Iterable[Path], run: str | None = None) -> dict[str, list[Found]]:
    """Inputs grouped by run: one run per path unless ``run`` names a single one.

    Raises:
        InputError: a path does not exist or cannot be read.
    """
    groups: dict[str, list[Found]] = {}
    for path in paths:
        if not path.exists():
            raise InputError(f"cannot read {path}: No such file or directory")
        groups.setdefault(run or run_name(path), []).extend(discover(path))
    return {name: _distinct_labels(inputs) for name, inputs in groups.items()}


def _distinct_labels(inputs: list[Found]) -> list[Found]:
    """The inputs of one run, no two files under one label (a record's ``Source.file``).

    ``dsmon import --run r job/node0/train.log job/node1/train.log`` would otherwise file
    both under ``train.log``, and the second file's records, keyed alike, would be taken for
    copies of the first's and dropped. Such files are named from the folder they share
    (``node0/train.log``), as the collector names them (``collectors.tail.tailer``).
    """
    paths: dict[str, set[Path]] = {}
    for f in inputs:
        paths.setdefault(f.label, set()).add(f.path.resolve())
    if all(len(p) == 1 for p in paths.values()):
        return inputs
    out = []
    for f in inputs:
        same = paths[f.label]
        if len(same) > 1:
            common = os.path.commonpath([str(p) for p in same])
            f = dataclasses.replace(f, label=os.path.relpath(f.path.resolve(), common))
        out.append(f)
    return out


def import_paths(
    store: Store,
    paths: Iterable[Path],
    run: str | None = None,
    progress_factory: Callable[[int], Progress] | None = None,
) -> list[ImportResult]:
    """Read files or run folders into ``store``; one result per run.

    Args:
        store: where the records go (idempotent: importing twice inserts nothing new).
        paths: files and run folders.
        run: the run name for everything; default: each folder's name.
        progress_factory: called with the total byte count, returns a callback that is
            given the bytes read as reading advances (a progress bar's ``update``).

    Raises:
        InputError: a path does not exist or a file cannot be read; what was read before
            stays stored (a second import completes it without duplicates).
    """
    groups = plan(paths, run)
    total = sum(_size(inputs) for inputs in groups.values())
    progress = progress_factory(total) if progress_factory is not None else None
    results = []
    for name, inputs in groups.items():
        res = ImportResult(name, inputs)
        carries: Carries = {}
        for found in inputs:
            records: Iterator[Record | EncodedRecord | RecordRow]
            if found.kind == RECORDS:
                records = _counted(
                    read_records_file(found.path, found.label, res.diag, run, progress), res
                )
            else:
                rows = read_found_rows(found, name, res.diag, progress, carries=carries)
                records = _counted_as(rows, res)
            try:
                res.inserted += store.add(records)
            except OSError as exc:  # vanished or unreadable since discovery
                raise InputError(f"cannot read {found.path}: {exc.strerror or exc}") from None
        results.append(res)
    return results


def _counted_as(
    records: Iterable[Record | EncodedRecord | RecordRow], res: ImportResult
) -> Iterator[Record | EncodedRecord | RecordRow]:
    """Records of an input filed under the result's run."""
    res.runs[res.run] = None
    for rec in records:
        res.records += 1
        yield rec


def _counted(
    records: Iterable[Record | EncodedRecord], res: ImportResult
) -> Iterator[Record | EncodedRecord]:
    """Records of a records file, which name their runs themselves."""
    for rec in records:
        res.records += 1
        res.runs[(rec.record if isinstance(rec, EncodedRecord) else rec).src.run] = None
        yield rec
