"""Lines of a binary log stream with a cap on their length, so memory never follows a line.

DeepSpeed's lines are short, but a log can hold anything a training script printed: a tensor
dumped whole, a progress bar redrawn in place for hours, a binary blob. Reading such a
line whole costs its size several times over (the bytes, then the decoded text), so a 1 GiB
line would take gigabytes. Every reader of logs in dsmon (``dsmon parse``, ``dsmon import``
and the collectors' followers) keeps the first :data:`MAX_LINE_BYTES` of a line and skips
the rest, and says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

from dsmon.parse.base import Diagnostics

#: A longer line is parsed cut to this length; the rest of it is skipped.
MAX_LINE_BYTES = 1 << 20
#: Bytes read at a time while skipping the rest of a long line.
_SKIP_CHUNK = 1 << 16
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


def capped_lines(stream: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[RawLine]:
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


def skip_hole(stream: BinaryIO, data: bytes, limit: int) -> tuple[int, bytes]:
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
