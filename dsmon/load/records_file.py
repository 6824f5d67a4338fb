"""dsmon's own records as a file: the JSON lines ``dsmon parse`` and ``dsmon export`` write.

A run moves between stores (SQLite to PostgreSQL, one machine to another) as the same JSON
lines the ingest API takes (``dsmon.model.wire``), so ``dsmon import`` reads them back. Three shapes
are accepted, told apart by content rather than by file name (an export is often renamed):

- one record per line, as ``dsmon parse`` and ``dsmon export`` print;
- the same with the store's ``"id"`` first, as each record of a ``GET /v1/records`` answer;
- whole ``GET /v1/records`` answers, one per line (``{"records": [...], "next": ...}``).

Every line is checked as strictly as the ingest server checks a POSTed one
(``dsmon.model.check.parse_line``): a bad line is counted and skipped, with its file, line and
field, never stored and never fatal. The file is read one line at a time, so an export of a
big run never sits in memory.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from dsmon.model.check import encoded_record, parse_line
from dsmon.model.records import KINDS, Record
from dsmon.model.wire import EncodedRecord, WireError
from dsmon.parse.base import Diagnostics
from dsmon.parse.linereader import capped_lines

#: The longest line read whole: a record larger than a whole ingest batch is refused.
MAX_RECORD_BYTES = 16 * 1024 * 1024
#: The diagnostics kind under which bad lines of a records file are counted.
BAD_RECORD = "record"
#: Progress is reported every this many bytes, not every line.
_PROGRESS_EVERY = 1 << 20

# ``{"kind":"timer","src":`` (the store's ``"id":N,`` may come first): a record line.
_RECORD_LINE = re.compile(
    rb'\{\s*(?:"id"\s*:\s*\d+\s*,\s*)?"kind"\s*:\s*"(\w+)"\s*,\s*"src"\s*:\s*\{'
)
# ``{"records":[`` : a whole ``GET /v1/records`` answer on one line.
_PAGE_LINE = re.compile(rb'\{\s*"records"\s*:\s*\[')
_ID_FIRST = re.compile(r'^\s*\{\s*"id"\s*:\s*\d+\s*,\s*')


def looks_like_records(head: bytes) -> bool:
    """The first line of ``head`` is a dsmon record (or a ``/v1/records`` answer)."""
    first = head.lstrip()
    if _PAGE_LINE.match(first):
        return True
    m = _RECORD_LINE.match(first)
    return m is not None and m.group(1).decode() in KINDS


def read_records_file(
    path: Path,
    label: str,
    diag: Diagnostics,
    run: str | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[Record | EncodedRecord]:
    """:func:`read_records` of a file; ``label`` names it in the diagnostics."""
    with path.open("rb") as f:
        yield from read_records(f, label, diag, run, progress)


def read_records(
    stream: BinaryIO,
    label: str,
    diag: Diagnostics,
    run: str | None = None,
    progress: Callable[[int], object] | None = None,
) -> Iterator[Record | EncodedRecord]:
    """The records of a records file, each checked; ``run`` renames them all when given.

    A line that is not a valid record is counted in ``diag`` under :data:`BAD_RECORD` as
    ``label:line: field 'x': reason`` and skipped. ``progress`` is called with bytes read.
    """
    offset = reported = 0
    for lineno, raw in enumerate(capped_lines(stream, MAX_RECORD_BYTES), start=1):
        offset += raw.size
        diag.lines += 1
        line = raw.data.decode("utf-8", "replace").rstrip("\r\n")
        where = f"{label}:{lineno}"
        if raw.cut:
            diag.note(diag.unparsed, BAD_RECORD, where, f"longer than {MAX_RECORD_BYTES} bytes")
        elif line.strip():
            yield from _line_records(line, run, where, diag)
        if progress is not None and offset - reported >= _PROGRESS_EVERY:
            progress(offset - reported)
            reported = offset
    if progress is not None and offset > reported:
        progress(offset - reported)


def _line_records(
    line: str, run: str | None, where: str, diag: Diagnostics
) -> list[Record | EncodedRecord]:
    """The record of one line, or every good record of a ``/v1/records`` answer.

    A line kept as it came is stored as it came (``encoded_record``); one whose run is
    renamed, or that carried the store's id, is encoded again.
    """
    try:
        if _PAGE_LINE.match(line.lstrip()[:32].encode()):
            return _page_records(_page_items(line), run, where, diag)
        bare = _ID_FIRST.sub("{", line, count=1)
        rec = parse_line(bare)
    except WireError as exc:
        diag.note(diag.unparsed, BAD_RECORD, where, str(exc))
        return []
    if run is not None and rec.src.run != run:
        return [_renamed(rec, run)]
    return [rec if bare is not line else encoded_record(rec, line)]


def _page_records(
    items: list[Any], run: str | None, where: str, diag: Diagnostics
) -> list[Record | EncodedRecord]:
    """The good records of one answer; a bad one is noted as ``where: record N: ...``."""
    out: list[Record | EncodedRecord] = []
    for n, item in enumerate(items, start=1):
        try:
            out.append(_renamed(_item(item), run))
        except WireError as exc:
            diag.note(diag.unparsed, BAD_RECORD, where, f"record {n}: {exc}")
    return out


def _page_items(line: str) -> list[Any]:
    """The ``records`` list of a ``GET /v1/records`` answer."""
    try:
        page = json.loads(line)
    except json.JSONDecodeError as exc:
        raise WireError(f"not JSON: {exc}") from None
    items = page.get("records") if isinstance(page, dict) else None
    if not isinstance(items, list):
        raise WireError("field 'records': expected a list of records")
    return items


def _item(item: Any) -> Record:
    """One record of an answer, checked like a line of its own (the store's id dropped)."""
    if isinstance(item, dict):
        item = {k: v for k, v in item.items() if k != "id"}
    return parse_line(json.dumps(item, ensure_ascii=False))


def _renamed(rec: Record, run: str | None) -> Record:
    if run is None or rec.src.run == run:
        return rec
    return dataclasses.replace(rec, src=dataclasses.replace(rec.src, run=run))
