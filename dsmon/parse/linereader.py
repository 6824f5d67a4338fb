"""Lines of a binary log stream with a cap on their length, so memory never follows a line.

DeepSpeed's lines are short, but a log can hold anything a training script printed: a tensor
dumped whole, a progress bar redrawn in place for hours, a binary blob. Reading such a
line whole costs its size several times over (the bytes, then the decoded text), so a 1 GiB
line would take gigabytes. Every reader of logs in dsmon (``dsmon parse``, ``dsmon import``
and the collectors' followers) keeps the first :data:`MAX_LINE_BYTES` of a line and skips
the rest, and says so.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple, Protocol

from dsmon.parse.base import Diagnostics

#: A longer line is parsed cut to this length; the rest of it is skipped.
MAX_LINE_BYTES = 1 << 20
#: Bytes read at a time while skipping the rest of a long line.
_SKIP_CHUNK = 1 << 16
#: Bytes read at a time by :func:`capped_chunks`.
BLOCK_BYTES = 1 << 20
#: The diagnostics kind under which lines cut to :data:`MAX_LINE_BYTES` are counted.
LONG_LINE = "long_line"
_LONG_LINE_TEXT = f"longer than {MAX_LINE_BYTES} bytes: parsed cut to that length"


def note_cut(diag: Diagnostics, file: str | None, line: int) -> None:
    """Count a line that was parsed cut to :data:`MAX_LINE_BYTES` (``RawLine.cut``)."""
    diag.note(diag.cut, LONG_LINE, f"{file}:{line}", _LONG_LINE_TEXT)


class RawLine(NamedTuple):
    """One line as read: at most ``limit`` bytes of it, and how much of the stream it took.

    ``size`` counts every byte of the line in the stream, skipped ones and the newline
    included, so that adding it up gives each next line's byte offset; ``cut`` says whether
    any of its text was skipped.
    """

    data: bytes
    size: int
    cut: bool


class LineStream(Protocol):
    """What :func:`capped_lines` reads: lines of at most ``limit`` bytes."""

    def readline(self, limit: int = -1, /) -> bytes:
        """The next line, or its first ``limit`` bytes; b"" at the end."""
        ...


def capped_lines(stream: LineStream, limit: int = MAX_LINE_BYTES) -> Iterator[RawLine]:
    """The lines of ``stream``, each cut to at most ``limit`` bytes, to its end.

    NUL bytes that start a line are left out of its text (:func:`skip_hole`), however many.
    """
    while True:
        data = stream.readline(limit)
        if not data:
            return
        hole = 0
        if data.startswith(b"\0"):
            hole, data = skip_hole(stream, data, limit)
            if not data:
                return
        size, cut = hole + len(data), False
        if len(data) == limit and not data.endswith(b"\n"):
            while rest := stream.readline(_SKIP_CHUNK):  # the tail, never held whole
                size += len(rest)
                cut = cut or rest != b"\n"
                if rest.endswith(b"\n"):
                    break
        yield RawLine(data, size, cut)


def skip_hole(stream: LineStream, data: bytes, limit: int) -> tuple[int, bytes]:
    """The NUL bytes that start a line, skipped: how many, and the line's first bytes.

    A log rotated by copytruncate while the job writes on through a shell redirect (``>``,
    which never reopens the file) is written on at the job's old offset: the file starts
    with a hole of NUL bytes as long as the log was, then the job's next line. Read as
    text, that line would be cut and lost behind the hole. ``data`` is what ``readline`` gave
    (at most ``limit`` bytes); the hole is never held whole.
    """
    skipped = 0
    while data:
        text = data.lstrip(b"\0")
        skipped += len(data) - len(text)
        if text:
            if len(data) == limit and not text.endswith(b"\n"):  # the line goes on
                text += stream.readline(limit - len(text))
            return skipped, text
        data = stream.readline(limit)
    return skipped, b""


class LineChunk(NamedTuple):
    """Lines as :func:`capped_lines` gives them, as parallel lists: ``RawLine``'s fields."""

    data: list[bytes]
    size: list[int]
    cut: list[bool]


def capped_chunks(
    stream: BinaryIO, lines: int, limit: int = MAX_LINE_BYTES, block: int = BLOCK_BYTES
) -> Iterator[LineChunk]:
    """:func:`capped_lines` of ``stream``, ``lines`` lines a chunk (the last one shorter).

    The vector path (``dsmon.load.vector``) reads a log a chunk at a time; reading it line by
    line in Python cost it as much as finding its timer lines in compiled code. Here the
    stream is read ``block`` bytes at a time and split at its newlines in compiled code,
    while no line is longer than ``limit`` and no NUL byte comes; from the first block that
    has such a line, the rest of the stream is read by :func:`capped_lines` itself (a long
    line is cut, a hole skipped, as there), beginning with the lines of that block. A stream
    that is not a plain buffered one (a compressed rotation, which ends at its damage) is
    read by :func:`capped_lines` throughout, so the lines before the damage are the same.
    """
    data: list[bytes] = []
    size: list[int] = []
    cut: list[bool] = []
    if not isinstance(stream, io.BufferedIOBase):
        yield from _chunks(capped_lines(stream, limit), lines, LineChunk(data, size, cut))
        return
    pending = b""
    while True:
        got = stream.read(block)
        buf = pending + got
        end = len(buf) if not got else buf.rfind(b"\n") + 1
        whole, pending = buf[:end], buf[end:]
        split = io.BytesIO(whole).readlines()
        if b"\0" in whole or len(pending) >= limit or any(len(ln) > limit for ln in split):
            rest = capped_lines(_Chained(whole + pending, stream), limit)
            yield from _chunks(rest, lines, LineChunk(data, size, cut))
            return
        data += split
        size += map(len, split)
        cut += [False] * len(split)
        while len(data) >= lines:
            yield LineChunk(data[:lines], size[:lines], cut[:lines])
            del data[:lines], size[:lines], cut[:lines]
        if not got:
            if data:
                yield LineChunk(data, size, cut)
            return


def _chunks(raw: Iterator[RawLine], lines: int, start: LineChunk) -> Iterator[LineChunk]:
    """``start``'s lines, then ``raw``'s, ``lines`` a chunk."""
    chunk = start
    for line in raw:
        chunk.data.append(line.data)
        chunk.size.append(line.size)
        chunk.cut.append(line.cut)
        if len(chunk.data) >= lines:
            yield chunk
            chunk = LineChunk([], [], [])
    if chunk.data:
        yield chunk


class _Chained:
    """Bytes already read, then the rest of a stream, read by line (``capped_lines``' reads)."""

    def __init__(self, head: bytes, rest: LineStream) -> None:
        self._head = io.BytesIO(head)
        self._rest = rest

    def readline(self, limit: int = -1) -> bytes:
        """A line of at most ``limit`` bytes, across the end of the bytes read before."""
        data = self._head.readline(limit)
        if data.endswith(b"\n") or (limit >= 0 and len(data) >= limit):
            return data
        return data + self._rest.readline(-1 if limit < 0 else limit - len(data))
