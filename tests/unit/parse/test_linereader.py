"""Memory of ``dsmon parse``/``dsmon import`` does not follow line length (issue 12, item 10).

A real DeepSpeed log (tests/data/z2/train.log, DeepSpeed 0.19.8) with one huge line pasted
in: every real line still yields its records, at its true line number and byte offset, and
the huge line costs about the cap, not its size.
"""

from __future__ import annotations

import dataclasses
import io
import tracemalloc
from pathlib import Path

import pytest
from dashboard_support import DATA
from hypothesis import given, settings
from hypothesis import strategies as st
from lanes import examples

import collectors.tail.follower
from cli.main import main
from collectors.tail.state import StateFile
from collectors.tail.tailer import Tailer
from dsmon.load.files import read_log
from dsmon.model.records import Record, TimerRecord
from dsmon.parse import linereader
from dsmon.parse.linereader import (
    LONG_LINE,
    MAX_LINE_BYTES,
    RawLine,
    capped_chunks,
    capped_lines,
)
from dsmon.parse.log import LogParser

LOG = DATA / "z2" / "train.log"
AFTER = 10  # the huge line goes after this line of the real log
HUGE = 16 * MAX_LINE_BYTES  # twice the peak the tests allow: a line held whole fails them


def test_lines_are_cut_to_the_limit_and_keep_their_size() -> None:
    stream = io.BytesIO(b"ab\n" + b"x" * 10 + b"\nabcd\nabcde\n\ncd")
    assert list(capped_lines(stream, limit=4)) == [
        RawLine(b"ab\n", 3, False),
        RawLine(b"xxxx", 11, True),
        RawLine(b"abcd", 5, False),  # exactly the limit: nothing of it skipped
        RawLine(b"abcd", 6, True),
        RawLine(b"\n", 1, False),
        RawLine(b"cd", 2, False),  # the last line, without its newline
    ]


def test_the_collectors_cut_lines_at_the_same_length() -> None:
    assert collectors.tail.follower.MAX_LINE_BYTES is linereader.MAX_LINE_BYTES


def with_huge_line(tmp_path: Path) -> Path:
    lines = LOG.read_bytes().splitlines(keepends=True)
    path = tmp_path / "train.log"
    with path.open("wb") as f:
        f.writelines(lines[:AFTER])
        f.write(b"[" + b"0.1234, " * (HUGE // 8) + b"]\n")  # a tensor printed whole
        f.writelines(lines[AFTER:])
    return path


def records(path: Path) -> tuple[list[Record], LogParser]:
    parser = LogParser("z2", "train.log")
    with path.open("rb") as f:
        return list(read_log(f, parser)), parser


def records_and_peak(path: Path) -> tuple[list[Record], LogParser, int]:
    """:func:`records`, and the peak of Python's memory while reading them."""
    tracemalloc.start()
    try:
        got, parser = records(path)
        return got, parser, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def shifted(rec: Record, extra_bytes: int) -> Record:
    """``rec`` as it reads from the log with the huge line in front of it."""
    src = rec.src
    assert src.line is not None and src.offset is not None
    if src.line <= AFTER:
        return rec
    moved = dataclasses.replace(src, line=src.line + 1, offset=src.offset + extra_bytes)
    return dataclasses.replace(rec, src=moved)


def test_a_huge_line_costs_the_cap_and_moves_nothing_else(tmp_path: Path) -> None:
    path = with_huge_line(tmp_path)
    extra = path.stat().st_size - LOG.stat().st_size
    expected, _ = records(LOG)
    assert len(expected) > 50
    got, parser, peak = records_and_peak(path)
    assert peak < 8 * MAX_LINE_BYTES, peak  # the line is 16 MiB; held whole it costs >32
    assert got == [shifted(r, extra) for r in expected]
    assert parser.diag.cut[LONG_LINE] == 1
    assert parser.diag.examples[LONG_LINE] == [
        f"train.log:{AFTER + 1}: longer than {MAX_LINE_BYTES} bytes: parsed cut to that length"
    ]


def test_parse_says_which_line_was_cut(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = with_huge_line(tmp_path)
    assert main(["parse", str(path)]) == 0
    err = capsys.readouterr().err
    assert f"  cut {LONG_LINE}: 1\n" in err
    assert f"    train.log:{AFTER + 1}: longer than {MAX_LINE_BYTES} bytes" in err


DEFAULT_LEVEL = DATA / "z0_default_loglevel" / "train.log"


def with_hole(tmp_path: Path) -> tuple[Path, int]:
    """The file a copytruncate leaves when the job writes through a shell redirect (``>``):
    the job writes on at its old offset, here past the cap, so the file starts with a hole
    of NULs (sparse on disk) and goes on with the job's lines (a real default-level log's)."""
    lines = DEFAULT_LEVEL.read_bytes().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if b"| fwd: " in line)  # a global timer
    path = tmp_path / "train.log"
    with path.open("wb") as f:
        f.seek(HUGE)
        f.writelines(lines[first:])
    return path, first


def without_offset(rec: Record) -> Record:
    return dataclasses.replace(rec, src=dataclasses.replace(rec.src, offset=None, file=None))


def test_a_hole_of_nul_bytes_is_skipped_and_loses_no_line(tmp_path: Path) -> None:
    path, first = with_hole(tmp_path)
    got, parser, peak = records_and_peak(path)
    assert peak < 8 * MAX_LINE_BYTES, peak
    assert not parser.diag.cut  # the hole is no line, and cuts none
    text = DEFAULT_LEVEL.read_bytes().splitlines(keepends=True)[first:]
    plain = tmp_path / "plain.log"
    plain.write_bytes(b"".join(text))
    expected, _ = records(plain)
    # the same records; the first line starts where the hole does, the others after it
    moved = [r.src.offset if r.src.line == 1 else r.src.offset - HUGE for r in got]
    assert moved == [r.src.offset for r in expected]
    assert [without_offset(r) for r in got] == [without_offset(r) for r in expected]
    assert isinstance(got[0], TimerRecord) and got[0].group == "global"


def test_the_collector_reads_a_hole_as_import_does(tmp_path: Path) -> None:
    path, _ = with_hole(tmp_path)
    imported, _ = records(path)
    t = Tailer([str(path)], run="z2", node=None, state=StateFile(tmp_path / "s.json"))
    batch = t.poll(final=True)
    live = [r for r in batch.records if r.src.file == "train.log"]
    assert isinstance(live[0], TimerRecord) and live[0].src.line == 1  # the line behind the hole
    # Live, a record whose step is not known yet is sent at once and again with its step
    # (the store fills it in): what the store ends with is the last copy of each.
    stored = {(r.src.line, r.src.sub, r.KIND): r for r in live}
    assert [(r.src.line, r.src.offset, r.KIND, r.step) for r in stored.values()] == [
        (r.src.line, r.src.offset, r.KIND, r.step) for r in imported
    ]
    assert imported[0].step == 1  # read from its start, named no step: numbered from its start


@given(
    pieces=st.lists(
        st.sampled_from([b"ab", b"x" * 9, b"\n", b"\r\n", b"\0", b"\0\0\n", b"\xe2\x82", b"cd\n"]),
        max_size=40,
    ),
    limit=st.integers(1, 12),
    block=st.integers(1, 16),
    lines=st.integers(1, 5),
    buffered=st.booleans(),
)
@settings(max_examples=examples(400), deadline=None)
def test_chunks_hold_the_lines_read_one_by_one(
    pieces: list[bytes], limit: int, block: int, lines: int, buffered: bool
) -> None:
    """Read a block at a time, or line by line once a long line or a NUL byte comes, the
    chunks hold the lines ``capped_lines`` gives, ``lines`` a chunk (short lines, long ones,
    holes, a last line without its newline, lines across blocks)."""
    text = b"".join(pieces)
    want = list(capped_lines(io.BytesIO(text), limit))
    stream = io.BytesIO(text) if buffered else _Unbuffered(text)
    chunks = list(capped_chunks(stream, lines, limit, block))
    got = [RawLine(*fields) for c in chunks for fields in zip(c.data, c.size, c.cut, strict=True)]
    assert got == want
    assert [len(c.data) for c in chunks[:-1]] == [lines] * (len(chunks) - 1)
    assert all(0 < len(c.data) <= lines for c in chunks)


class _Unbuffered:
    """A stream read only by line, as a compressed rotation is (``dsmon.load.rotated``)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readline(self, limit: int = -1) -> bytes:
        return self._data.readline(limit)

    def read(self, n: int = -1) -> bytes:
        raise AssertionError("read by block")


def test_a_plain_file_is_read_a_block_at_a_time(tmp_path: Path) -> None:
    """The z2 log from a file: every line at its size, none cut, in blocks of a few lines."""
    raw = LOG.read_bytes()
    path = tmp_path / "train.log"
    path.write_bytes(raw)
    with path.open("rb") as f:
        chunks = list(capped_chunks(f, 100, block=4096))
    assert [d for c in chunks for d in c.data] == raw.splitlines(keepends=True)
    assert sum(sum(c.size) for c in chunks) == len(raw)
    assert not any(cut for c in chunks for cut in c.cut)
