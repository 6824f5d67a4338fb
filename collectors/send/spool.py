"""The collector's on-disk spool: records kept while the dashboard cannot be reached.

The spool is a directory of append-only JSON-lines segments (``000000000001.jsonl``, ...), one
encoded record (``dsmon.model.wire.encode``) per line. Segments are written in name order and read
back in the same order, so records drain in the order they were spooled. A segment is never
rewritten: it is read whole once it is sealed and deleted once the server has acknowledged
every line of it. An append is flushed and fsynced before it returns, because the caller
treats a spooled record as delivered (the tailer advances its saved position past it).

Only one process may use a spool directory at a time (the collector's state directory is its
own); within the process the sender thread is the only user, so no locking is needed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from collectors.durable import fsync_dir

logger = logging.getLogger(__name__)

#: Default bound of the whole spool on disk.
DEFAULT_MAX_BYTES = 1 << 30
#: A segment is sealed once it holds this much, so drained space is given back in steps.
DEFAULT_SEGMENT_BYTES = 8 << 20
_SUFFIX = ".jsonl"


@dataclass(frozen=True, slots=True)
class SpoolChunk:
    """Lines read from one sealed segment, and where the next read continues."""

    segment: Path
    lines: tuple[str, ...]
    end: int
    last: bool


class Spool:
    """A bounded FIFO of record lines on disk.

    Args:
        directory: where the segments live; created when missing. Segments left there by an
            earlier process are drained first.
        max_bytes: the most the segments may hold together; an append that does not fit is
            refused whole (the sender keeps it and stops the log reading until there is room).
        segment_bytes: size at which the segment being written is sealed.
    """

    def __init__(
        self,
        directory: Path,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    ) -> None:
        assert max_bytes > 0 and segment_bytes > 0
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self._sealed = sorted(self.directory.glob("*" + _SUFFIX))
        self._bytes = sum(p.stat().st_size for p in self._sealed)
        self._next_seq = 1 + max((_seq(p) for p in self._sealed), default=0)
        self._writer: BinaryIO | None = None
        self._writing: Path | None = None
        self._read_pos = 0

    @property
    def empty(self) -> bool:
        """Nothing waits to be sent."""
        return not self._sealed and self._writing is None

    @property
    def size_bytes(self) -> int:
        """Bytes the segments take on disk now."""
        return self._bytes

    def append(self, lines: Sequence[str]) -> bool:
        """Store lines durably; False, storing nothing, when they do not fit.

        Raises:
            OSError: the disk is full or the folder is gone; nothing of the lines is left
                in the segment (a partial write is cut off, so no torn line is sent later).
        """
        if not lines:
            return True
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if self._bytes + len(data) > self.max_bytes:
            return False
        writer = self._writer or self._open_segment()
        start = writer.tell()
        try:
            writer.write(data)
            writer.flush()
            os.fsync(writer.fileno())
        except OSError:
            self._cut_back(start)
            raise
        self._bytes += len(data)
        if writer.tell() >= self.segment_bytes:
            self.seal()
        return True

    def seal(self) -> None:
        """Close the segment being written, so it can be read; the next append starts one."""
        if self._writer is None or self._writing is None:
            return
        self._writer.close()
        self._sealed.append(self._writing)
        self._writer = None
        self._writing = None

    def peek(self, max_lines: int, max_bytes: int = 8 << 20) -> SpoolChunk | None:
        """The oldest unsent lines (at most ``max_lines``/``max_bytes``), or None when empty.

        A line cut short by a crash during its append (no newline) was never reported as
        spooled, so it is skipped: its record is still in the log and will be read again.
        """
        if not self._sealed:
            self.seal()
        if not self._sealed:
            return None
        segment = self._sealed[0]
        lines: list[str] = []
        size = 0
        last = False
        if not segment.exists():  # removed by hand: nothing left to send from it
            self._remove_head()
            return SpoolChunk(segment, (), 0, False)
        with segment.open("rb") as f:
            f.seek(self._read_pos)
            while len(lines) < max_lines and size < max_bytes:
                raw = f.readline()
                if not raw.endswith(b"\n"):
                    last = True  # end of the segment, or a torn line to skip
                    break
                lines.append(raw[:-1].decode("utf-8", errors="replace"))
                size += len(raw)
        return SpoolChunk(segment, tuple(lines), self._read_pos + size, last)

    def ack(self, chunk: SpoolChunk) -> None:
        """The chunk reached the server: move past it, deleting its segment when done."""
        if not self._sealed or self._sealed[0] != chunk.segment:
            return
        self._read_pos = chunk.end
        if chunk.last:
            self._remove_head()

    def close(self) -> None:
        """Close the segment being written (left on disk for the next process)."""
        self.seal()

    def _cut_back(self, size: int) -> None:
        """After a failed append: drop its partial bytes and seal the segment (or remove it).

        The writer is closed without its buffer (a later flush would write the bytes after
        all), and the file cut back to what it held before.
        """
        writer, path = self._writer, self._writing
        assert writer is not None and path is not None
        self._writer = self._writing = None
        with contextlib.suppress(OSError):
            os.truncate(path, size)
        with contextlib.suppress(OSError):
            writer.close()  # its flush fails again (or writes): cut once more below
        with contextlib.suppress(OSError):
            os.truncate(path, size)
        if size:
            self._sealed.append(path)
        else:
            with contextlib.suppress(OSError):
                path.unlink()

    def _open_segment(self) -> BinaryIO:
        path = self.directory / f"{self._next_seq:012d}{_SUFFIX}"
        self._next_seq += 1
        self._writer = path.open("ab")
        self._writing = path
        fsync_dir(self.directory)
        return self._writer

    def _remove_head(self) -> None:
        head = self._sealed.pop(0)
        try:
            size = head.stat().st_size
            head.unlink()
        except FileNotFoundError:
            size = 0
        self._bytes = max(0, self._bytes - size)
        self._read_pos = 0


def _seq(path: Path) -> int:
    """Sequence number of a segment file name; foreign names sort first."""
    try:
        return int(path.stem)
    except ValueError:
        return 0
