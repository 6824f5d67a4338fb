"""A batch's received JSON lines straight to the rows the store writes, where they check out.

The ingest server's work per record was once decode, build a record object, check it field
by field, build the row: more Python time than SQLite's own insert. Here each line is decoded
and type-checked by msgspec (:mod:`dsmon.model.wire_types`) in compiled code, the checks that
are not about types follow, and the row is made from the decoded line: a ``records`` row
(a plain tuple in :class:`~dsmon.store.records.rows.RecordRow`'s order, a
:data:`~dsmon.store.records.rows.Row`), or for a GPU sample the typed row of the GPU
tables (:func:`dsmon.store.gpu.rows.collector_sample_row`). No record object is built.
What a batch repeats is done once per batch: the checks of a source's names and the parts of
its records' keys it shares (:func:`dsmon.store.records.keys.source_head`) are made once per
source (run, node, file), not once per line.

Anything this path does not vouch for is returned as one of :attr:`CheckedLines.others`, and
the caller checks it with :func:`dsmon.model.check.parse_line` as before: that path explains a
bad line (``line N: field 'x': reason``) and takes the odd good one (a ``NaN``, a name past
256 characters that still fits in 1,024 bytes, a GPU sample not in the collector's form). So
what is accepted, refused and stored, and every message, stay those of ``parse_line``; only
the common good line gets faster.
"""

from __future__ import annotations

import struct
from datetime import datetime
from typing import Any, NamedTuple

import msgspec

from dsmon.model.check import MAX_JSON_DEPTH, MAX_NAME_BYTES
from dsmon.model.records import KINDS, GpuSampleRecord, RankStepRecord, StepRecord, TimerRecord
from dsmon.model.wire_types import decoder, line_structs, nests_freely
from dsmon.store.gpu.rows import SampleRow, collector_ms, collector_sample_row
from dsmon.store.records.keys import (
    MAX_PLACE,
    SourceHead,
    place_key,
    position_order,
    source_head,
    source_key,
)
from dsmon.store.records.rows import Row

#: Names of at most this many characters fit :data:`MAX_NAME_BYTES` whatever they hold.
_SAFE_NAME_CHARS = MAX_NAME_BYTES // 4
_STRUCTS = line_structs(KINDS.values())
_decode = decoder(_STRUCTS).decode
#: Per struct: its kind, and whether its lines may nest deeper than their types say.
_KIND = {struct: (cls.KIND, nests_freely(cls)) for struct, cls in _STRUCTS.items()}
#: The GPU sample's struct: its lines become rows of the GPU tables.
_GPU = next((struct for struct, cls in _STRUCTS.items() if cls is GpuSampleRecord), None)
#: The kinds whose decoded lines go on to the store (:attr:`CheckedLines.decoded`): the
#: summary tables read their fields there instead of decoding the stored bodies again.
DECODED_KINDS = frozenset({TimerRecord.KIND, RankStepRecord.KIND, StepRecord.KIND})
#: ``place_key``'s three parts as one bytes: its digests (8 bytes each) round a big-endian place.
_pack_key = struct.Struct(">8sQ8s").pack
_parse_time = datetime.fromisoformat
#: A source not looked at yet (None: one left to ``parse_line``).
_UNSEEN = SourceHead(b"", "", {})
#: A time not looked at yet.
_UNSEEN_TIME = datetime.min
#: msgspec stops at Python's depth limit with a RecursionError.
_REFUSED = (msgspec.MsgspecError, RecursionError)


class Other(NamedTuple):
    """A line left to ``parse_line``, and where its row goes among those made."""

    number: int  # 1-based line number in the body
    line: str  # stripped
    rows_before: int  # rows made of the lines before it
    samples_before: int  # GPU sample rows made of the lines before it


class CheckedLines(NamedTuple):
    """What :func:`check_lines` made of a batch: rows, GPU sample rows, lines left over."""

    rows: list[Row]
    samples: list[SampleRow]
    others: list[Other]
    #: The decoded lines of :data:`DECODED_KINDS`, by index in ``rows`` (the store's summary
    #: tables read them).
    decoded: dict[int, Any]


#: The whitespace JSON allows around a value (RFC 8259): ``str.strip()`` would also take
#: vertical tabs, form feeds and Unicode spaces, which make a line bad JSON.
JSON_SPACE = " \t\r\n"
JSON_SPACE_BYTES = JSON_SPACE.encode()
#: The first and last byte of a line that needs no stripping.
_OPEN, _CLOSE = ord("{"), ord("}")


def check_lines(body: bytes) -> CheckedLines:
    """The rows of every line of ``body`` this path vouches for; the other lines, in order.

    A row is made only of a line ``parse_line`` accepts, and it is the row the store makes of
    that line's record with the (stripped) line as its body: ``record_row``, or for a GPU
    sample ``sample_row``. Left over are every bad line, and the good ones this path leaves
    to ``parse_line``: a ``NaN``/``Infinity`` constant (msgspec refuses them;
    ``encoded_record`` re-encodes the line), a NUL in a name (allowed elsewhere), a long
    run or node name, deep nesting, a GPU sample not in the collector's form. Blank lines
    are skipped.

    The body is cut into lines as bytes: msgspec reads a line's bytes, and only a row's body
    becomes text. A body decoded whole is text as wide as its widest character: one emoji in
    a log line (the real mix has some in every batch) makes every character of the batch four
    bytes, and each line cut from it is scanned again for its own width. What a batch repeats
    is looked at once: a source's names, a time's calendar check (on the real mix, two lines
    in three carry a time an earlier line of their batch carried), a GPU poll's time.

    Raises:
        UnicodeDecodeError: a line that is not UTF-8 (msgspec refuses one too, and a line left
            over is decoded here: the first such line is the body's first).
    """
    rows: list[Row] = []
    samples: list[SampleRow] = []
    others: list[Other] = []
    decoded: dict[int, Any] = {}
    heads: dict[tuple[str, str | None, str | None], SourceHead | None] = {}
    times: dict[str, datetime | None] = {}  # None: no calendar has it
    stamps: dict[str, int | None] = {}  # a GPU sample's t_ms; None: not the collector's form
    append = rows.append
    find = body.find
    number = 0
    start, size = 0, len(body)
    # The source and time of the line before: a log's lines come in runs from one file, and
    # two lines in three carry the time of the line before them, so most lines are matched
    # by comparing a few short strings, without hashing them for the dicts.
    last_run = last_node = last_file = last_ts = None
    last_head: SourceHead | None = None
    last_when: datetime | None = None
    while start < size:
        # cut at the next newline: bytes.split walks a body a byte at a time, find at memchr's
        # speed (5 instructions a byte against a fraction of one)
        end = find(b"\n", start)
        if end < 0:
            end = size
        # a line left over goes on as it came: a refusal names a column of the line sent
        raw = line = body[start:end]
        start = end + 1
        number += 1
        if not raw or raw[0] != _OPEN or raw[-1] != _CLOSE:
            raw = raw.strip(JSON_SPACE_BYTES)  # JSON's own: a vertical tab is no JSON space
            if not raw:
                continue
        try:
            rec = _decode(raw)
        except _REFUSED:
            others.append(Other(number, line.decode(), len(rows), len(samples)))
            continue
        src = rec.src
        run, node, file, ts = src.run, src.node, src.file, rec.ts
        if run == last_run and node == last_node and file == last_file:
            head = last_head
        else:
            source = (run, node, file)
            head = heads.get(source, _UNSEEN)
            if head is _UNSEEN:
                head = heads[source] = _checked_source(run, node, file)
            last_run, last_node, last_file, last_head = run, node, file, head
        if head is None:
            others.append(Other(number, line.decode(), len(rows), len(samples)))
            continue
        if ts is None:
            when = None
        elif ts == last_ts:
            when = last_when
        else:
            when = times.get(ts, _UNSEEN_TIME)
            if when is _UNSEEN_TIME:
                when = times[ts] = _calendar_time(ts)
            last_ts, last_when = ts, when
        if ts is not None and when is None:
            others.append(Other(number, line.decode(), len(rows), len(samples)))
            continue
        cls = type(rec)
        if cls is _GPU:
            sample = None
            if when is not None:
                if ts in stamps:
                    t_ms = stamps[ts]
                else:
                    t_ms = stamps[ts] = collector_ms(ts, when)
                if t_ms is not None:
                    sample = collector_sample_row(rec, t_ms)
            if sample is None:
                others.append(Other(number, line.decode(), len(rows), len(samples)))
            else:
                samples.append(sample)
            continue
        kind, free = _KIND[cls]
        if free and raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH:
            others.append(Other(number, line.decode(), len(rows), len(samples)))
            continue
        offset, line_no = src.offset, src.line
        if offset is not None:
            form, place = "o", offset
        elif line_no is not None:
            form, place = "l", line_no
        else:
            form, place = "t", -1
        if 0 <= place < MAX_PLACE:
            # head's tails and digest by position: a NamedTuple field's name costs a lookup
            tail = head[2].get((form, src.sub, kind))
            if tail is None:  # the first of its (form, sub, kind) in the source
                key = place_key(head, form, place, src.sub, kind)
            else:  # place_key's, without the call, packed at once
                key = _pack_key(head[0], place, tail)
        else:  # a time, or a place the key cannot hold exactly: the whole identity's digest
            pos = f"t{ts}" if form == "t" else f"{form}{place}"
            key = source_key(head, pos, src.sub, kind, position_order(pos))
        if kind in DECODED_KINDS:
            decoded[len(rows)] = rec
        append((key, run, kind, rec.step, ts, node, src.rank, file, line_no, raw.decode()))
    return CheckedLines(rows, samples, others, decoded)


def _calendar_time(ts: str) -> datetime | None:
    """``ts`` read as a time, or None for one no calendar has (a NUL too)."""
    try:
        return _parse_time(ts)
    except ValueError:
        return None


def _checked_source(run: str, node: str | None, file: str | None) -> SourceHead | None:
    """The key parts of a source whose names this path vouches for; None: ``parse_line``'s."""
    if not run or len(run) > _SAFE_NAME_CHARS or "\x00" in run:
        return None
    if node is not None and (len(node) > _SAFE_NAME_CHARS or "\x00" in node):
        return None
    if file is not None and "\x00" in file:
        return None
    return source_head(run, node or "", file or "")
