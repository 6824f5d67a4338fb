"""One generation of a followed log: its bytes in, complete lines parsed, records out.

A *generation* is one file that lived at a followed path (see :mod:`collectors.follower`,
which notices rotation, truncation and replacement and decides when a generation starts and
ends). Reading one is the same whatever happens around it: bytes are split into lines and only
complete ones are parsed (bytes after the last newline wait for theirs, pygtail#50); a line
longer than :data:`MAX_LINE_BYTES` is parsed truncated and the rest of it skipped; the byte
offset and line number of every line are tracked, so records get stable keys and a restart
can re-parse up to a saved offset silently, rebuilding the parser's state.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Callable
from typing import BinaryIO

from collectors.state import EMPTY_FP, FP_BYTES, Position, fingerprint, same_start
from dsmon.model.records import Record
from dsmon.parse.base import LineParser
from dsmon.parse.linereader import MAX_LINE_BYTES
from dsmon.parse.run_files import with_rank

logger = logging.getLogger(__name__)

#: Bytes read at a time.
CHUNK = 1 << 20
#: The last bytes read that are checked at each poll to be still there (see _was_truncated).
TAIL_BYTES = 64
#: How much of the line being written the parser is shown (``LineParser.peek``): its start.
PEEK_BYTES = 4096

ParserFactory = Callable[[str], LineParser]


class GenerationReader:
    """Reads and parses the generation of ``path`` that is open, and where it stands.

    Args:
        path: the followed path (for positions and messages).
        make_parser: builds the parser of a generation from its ``Source.file`` label.
        label: the ``Source.file`` of the first generation; later ones are ``label#N``.
        rank: the rank the file belongs to (a per-rank log), given to records that name none.
        gen: the generation number to start at.
        carry: the parser state it starts from (``Position.carry``).
    """

    def __init__(
        self,
        path: str,
        make_parser: ParserFactory,
        label: str,
        rank: int | None,
        gen: int,
        carry: str = "",
    ) -> None:
        self.path = path
        self.long_lines = 0
        self._label = label
        self._rank = rank
        self._make_parser = make_parser
        self._f: BinaryIO | None = None
        #: The state the generation's parser starts from (see ``Position.carry``).
        self._carry = carry
        self._reset(gen)

    @property
    def label(self) -> str:
        """The ``Source.file`` of the current generation's records."""
        return self._label if self._gen == 0 else f"{self._label}#{self._gen}"

    def fingerprint(self) -> tuple[str, int] | None:
        """The first-bytes fingerprint of the open generation (to recognise a copy of it)."""
        return (self._fp, self._fp_len) if self._f is not None else None

    def _current(self) -> Position:
        return Position(
            self.path, self._gen, self._dev, self._ino, self._fp, self._fp_len,
            self._offset, self._line, self._label, self._carry,
        )  # fmt: skip

    def read_to_end(self) -> bool:
        """Whether the open generation has been read up to the file's current size."""
        if self._f is None:
            return False
        return self._buf_start + len(self._buf) >= os.fstat(self._f.fileno()).st_size

    def handover(self, *, last_line_complete: bool = False) -> str:
        """The parser state another file of the same output goes on from (``Position.carry``).

        A rotated file read to its end before the next one is followed (a collector started
        after a rotation, :mod:`collectors.rotated_start`): the next file's steps and times
        go on from this one's. ``last_line_complete``: the file ends here for good, so it is
        finished as ``dsmon import`` finishes a file: an unterminated last line counts (a
        copytruncate copy may end mid-line), and so does a line held for a continuation.
        That is done on a copy of the parser: this follower reads on should the file grow
        after all.
        """
        parser = self._parser
        if last_line_complete:
            parser = copy.deepcopy(parser)
            if self._buf and not self._skipping:
                text = bytes(self._buf).decode("utf-8", errors="replace")
                parser.feed(text, offset=self._offset, line=self._line + 1)
            parser.finish()
        state = parser.handover()
        return json.dumps(state, separators=(",", ":")) if state else ""

    def _hand_over(self) -> None:
        """The file was truncated in place and goes on: carry its parser's state over.

        A log truncated while the job writes on (logrotate's copytruncate, the rotation for a
        job whose output is redirected by the shell, which never reopens it) is the same
        output going on, so the next generation's steps and times go on from this one's. A
        new job writing the path starts with its launcher's lines, which the parser reads as
        any relaunch in one file.
        """
        self._carry = self.handover()

    def _reset(self, gen: int) -> None:
        self._gen = gen
        self._parser = self._make_parser(self.label)
        if self._carry:
            try:
                state = json.loads(self._carry)
                if not isinstance(state, dict):
                    raise ValueError(f"not a JSON object: {self._carry[:80]}")
                self._parser.take_over(state)
            except ValueError as exc:  # a state file edited by hand, or of another version
                logger.warning("dsmon: %s: parser state not used (%s)", self.path, exc)
                self._carry = ""
        self._buf = bytearray()
        self._buf_start = 0
        self._offset = 0
        self._line = 0
        self._skipping = False
        self._dev = self._ino = 0
        self._fp, self._fp_len = EMPTY_FP, 0
        self._tail = b""  # the last bytes read, to tell the file still holds them

    def _adopt(self, f: BinaryIO, gen: int) -> None:
        self._reset(gen)
        st = os.fstat(f.fileno())
        self._f, self._dev, self._ino = f, st.st_dev, st.st_ino
        self._fp, self._fp_len = fingerprint(f, st.st_size)

    def _replay_to(self, offset: int, line: int | None) -> None:
        """Parse ``[0, offset)`` without emitting: rebuilds the parser state of a resume."""
        assert self._f is not None
        self._f.seek(0)
        self._pump(None, offset)
        if line is not None and line != self._line:
            logger.warning(
                "dsmon: %s: saved position said line %d at byte %d, re-read found line %d",
                self.path, line, offset, self._line,
            )  # fmt: skip

    def _read(self, out: list[Record] | None, budget: int) -> None:
        """Parse what was appended since the last read (at most ``budget`` bytes)."""
        assert self._f is not None
        self._pump(out, budget)
        if self._fp_len < FP_BYTES:
            size = self._buf_start + len(self._buf)
            self._fp, self._fp_len = fingerprint(self._f, size)

    def _pump(self, out: list[Record] | None, budget: int) -> None:
        """Read and consume up to ``budget`` bytes from where the file stands."""
        assert self._f is not None
        while budget > 0:
            data = self._f.read(min(CHUNK, budget))
            if not data:
                break
            budget -= len(data)
            self._consume(data, out)

    def _consume(self, data: bytes, out: list[Record] | None) -> None:
        """Split bytes into lines and parse the complete ones; ``out=None`` discards records."""
        self._tail = (self._tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]
        buf = self._buf
        buf += data
        self._drop_hole()
        pos = 0
        while (nl := buf.find(b"\n", pos)) >= 0:
            if self._skipping:
                self._skipping = False
            else:
                self._feed(bytes(buf[pos:nl]).lstrip(b"\0"), self._offset, out)
            self._line += 1
            pos = nl + 1
            self._offset = self._buf_start + pos
        del buf[:pos]
        self._buf_start += pos
        self._drop_hole()
        if buf and out is not None and not self._skipping:  # the line being written
            self._emit(self._parser.peek(bytes(buf[:PEEK_BYTES]).decode("utf-8", "replace")), out)
        if len(buf) > MAX_LINE_BYTES:
            if not self._skipping:
                self._feed(bytes(buf[:MAX_LINE_BYTES]), self._offset, out)
                self._skipping = True
                self.long_lines += 1
                logger.warning(
                    "dsmon: %s:%d: line longer than %d bytes; the rest is skipped",
                    self.path, self._line + 1, MAX_LINE_BYTES,
                )  # fmt: skip
            self._buf_start += len(buf)
            buf.clear()

    def _drop_hole(self) -> None:
        """Leave out the NUL bytes that start the line being read (``skip_hole``'s hole).

        They still count in the offsets: the line starts where its hole does, as in
        ``dsmon import``, and the hole is never held whole, nor taken for a long line.
        """
        buf = self._buf
        if self._skipping or not buf.startswith(b"\0"):
            return
        n = len(buf) - len(buf.lstrip(b"\0"))
        del buf[:n]
        self._buf_start += n

    def _feed(self, raw: bytes, offset: int, out: list[Record] | None) -> None:
        text = raw.decode("utf-8", errors="replace")
        recs = self._parser.feed(text, offset=offset, line=self._line + 1)
        if out is not None:
            self._emit(recs, out)

    def _was_truncated(self) -> bool:
        """The open file is shorter than what was read, or no longer holds what was read.

        Its start tells, unless it is a hole: after a copytruncate under a shell redirect
        (``>``) the file starts with NULs, and a second truncation, the job writing on past
        where it was read, leaves it as long and starting the same. The last bytes read,
        NULs now, tell that one.
        """
        assert self._f is not None
        size = os.fstat(self._f.fileno()).st_size
        read_to = self._buf_start + len(self._buf)
        if size < read_to or not same_start(self._f, self._fp, self._fp_len):
            return True
        tail = self._tail
        if not tail.strip(b"\0"):
            return False
        return os.pread(self._f.fileno(), len(tail), read_to - len(tail)) != tail

    def _emit(self, recs: list[Record], out: list[Record]) -> None:
        """Add ``recs`` to ``out``, with the file's rank where their line named none."""
        out.extend(recs if self._rank is None else with_rank(recs, self._rank))


def identity(f: BinaryIO) -> tuple[int, int]:
    """Device and inode of an open file: what tells a rotated file from a new one at a path."""
    st = os.fstat(f.fileno())
    return st.st_dev, st.st_ino


def open_quiet(path: str) -> BinaryIO | None:
    """Open for reading, or None when the file is not there (yet) or not a readable file."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - the follower keeps it open across polls
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    except PermissionError as exc:
        logger.warning("dsmon: cannot read %s: %s", path, exc)
        return None
    return f


def last_line_end(f: BinaryIO, size: int) -> int:
    """Offset just after the last newline in the file's first ``size`` bytes (0 if none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - CHUNK)
        chunk = os.pread(f.fileno(), pos - start, start)
        nl = chunk.rfind(b"\n")
        if nl >= 0:
            return start + nl + 1
        pos = start
    return 0
