"""Following one log path across its generations: new lines in, records out, none twice.

A *generation* is one file that lived at the path: rotation by rename, deletion and
re-creation, copytruncate and truncation each start a new one. A generation is identified by
a fingerprint of its first bytes (filebeat's ``file_identity: fingerprint``), with device and
inode as a hint, because inodes are reused (elastic/beats#1341). Each generation gets its own
incremental :class:`~dsmon.parse.log.LogParser` and its own ``Source.file`` label (``path``
for the first one seen, ``path#N`` after that), so its byte offsets never collide with an
earlier generation's in the store.

Reading one generation (:class:`GenerationReader`) is the same whatever happens around it:
bytes are split into lines and only complete ones are parsed (bytes after the last newline
wait for theirs, pygtail#50); a line longer than :data:`MAX_LINE_BYTES` is parsed truncated
and the rest of it skipped; the byte offset and line number of every line are tracked, so
records get stable keys. :class:`FileFollower` decides when a generation starts and ends
(rotation, truncation, replacement). At the end of a generation its unterminated last line
is complete by definition and is parsed too.

**Resuming.** The saved position is the start of the first line whose records are not yet
known to be delivered. Parser state (the step clock, an open multi-line block) depends on
everything before it, so a restart re-parses the generation up to that offset *silently* and
emits from there: the records after a restart are exactly those a run without the restart
would have produced, with the same keys.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import BinaryIO

from collectors.tail.state import (
    EMPTY_FP,
    FP_BYTES,
    Position,
    find_generation,
    fingerprint,
    same_start,
)
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
        self._label = label
        self._rank = rank
        self._make_parser = make_parser
        self._f: BinaryIO | None = None
        #: The state the generation's parser starts from (see ``Position.carry``).
        self._carry = carry
        self._reset(gen)

    @property
    def base_label(self) -> str:
        """The ``Source.file`` of the first generation's records (later ones add ``#N``)."""
        return self._label

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
        after a rotation, :mod:`collectors.tail.rotated_start`): the next file's steps and times
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
        """Parse one complete line; a parser that raises on it costs that line, no more.

        The position moves past the line whatever the parser did: a line it raised on, read
        again at every poll, would stop the file there for ever (and drop the records of
        the lines read with it). dsmon's parsers count such a line themselves; this catches
        what they do not.
        """
        text = raw.decode("utf-8", errors="replace")
        try:
            recs = self._parser.feed(text, offset=offset, line=self._line + 1)
        except Exception as exc:  # noqa: BLE001 - see above
            logger.warning(
                "dsmon: %s:%d: the parser raised %s: %s; line skipped",
                self.path, self._line + 1, type(exc).__name__, exc,
            )  # fmt: skip
            return
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


#: Most bytes read from one file in one poll, so one huge file cannot starve the others.
MAX_READ_PER_POLL = 32 << 20
#: A generation no longer at its path (renamed, deleted, replaced) is still read until it has
#: been idle this long: a writer such as ``tee`` keeps appending to the renamed file.
MISSING_LINGER_S = 30.0


class FileFollower(GenerationReader):
    """Reads one path incrementally and parses what it reads.

    Args:
        path: the file to follow; it may not exist yet.
        make_parser: builds the parser of a generation from its ``Source.file`` label.
        label: the ``Source.file`` of the first generation (default: ``path``).
        rank: the rank the file belongs to (a per-rank log), given to records that name none.
        saved: the position saved by an earlier process, to resume from.
        older: saved positions of earlier generations that were still read after a rotation
            (oldest first): each is found where it went and read on until idle.
        from_end: with no saved position, skip (silently parse) what the file holds now.
        on_finished: told the final position of each generation that ends, so the tailer
            can tell a rotated file it has read already from a new file.
        on_continued: told the device and inode of a file truncated in place and renamed
            away, and the parser state its new content goes on from (``Position.carry``).
        carry: the parser state the first generation starts from (a file met at a new
            name after ``on_continued``).
        known: whether a file about to become a new generation is one the tailer follows or
            has read already under another path (a rotated name its glob also matches): such
            a file is skipped, not read a second time.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        path: str,
        make_parser: ParserFactory,
        *,
        label: str | None = None,
        rank: int | None = None,
        saved: Position | None = None,
        older: Sequence[Position] = (),
        from_end: bool = False,
        on_finished: Callable[[Position], None] | None = None,
        on_continued: Callable[[tuple[int, int], str], None] | None = None,
        carry: str = "",
        known: Callable[[BinaryIO], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        first_label = label or (saved.label if saved and saved.label else path)
        super().__init__(path, make_parser, first_label, rank, saved.gen if saved else 0, carry)
        self._saved = saved
        self._older = list(older)
        self._from_end = from_end
        self._on_finished = on_finished or (lambda pos: None)
        self._on_continued = on_continued or (lambda ident, carry: None)
        self._known = known or (lambda f: False)
        self._clock = clock
        # Earlier generations no longer at the path, still read until idle (oldest first).
        self._retired: list[FileFollower] = []
        self._idle_since = 0.0
        self._skip: tuple[int, int] | None = None  # the file at the path that is not ours

    def identities(self) -> set[tuple[int, int]]:
        """Device and inode of every file this follower reads or will resume."""
        out = {(old._dev, old._ino) for old in self._retired}
        out |= {(p.dev, p.ino) for p in self._older}
        if self._f is not None:
            out.add((self._dev, self._ino))
        elif self._saved is not None and self._saved.fp_len:
            out.add((self._saved.dev, self._saved.ino))
        return out

    def positions(self) -> list[Position]:
        """The positions to save now: the retired generations (oldest first), the path's own."""
        out = [*self._older, *(old._current() for old in self._retired)]
        if (pos := self.position()) is not None:
            out.append(pos)
        return out

    def position(self) -> Position | None:
        """The path's position to save now (the saved one while the file is not open)."""
        if self._f is not None:
            return self._current()
        if self._saved is not None or self._gen == 0:
            return self._saved
        # Between generations: keep the count, so a file created later is not taken for the
        # first generation (whose offsets, and so record keys, it would reuse).
        return Position(self.path, self._gen, 0, 0, EMPTY_FP, 0, 0, 0, self._label, self._carry)

    def poll(self, *, final: bool = False) -> list[Record]:
        """Records from what was written since the last poll, across any rotation.

        Args:
            final: read to the end, however much is there (the last read before a stop),
                instead of at most :data:`MAX_READ_PER_POLL` bytes.
        """
        out: list[Record] = []
        try:
            self._poll_retired(out, final)
            if self._f is None:
                self._open(out)
            else:
                self._check_path(out)
            if self._f is not None:
                self._read(out, 1 << 62 if final else MAX_READ_PER_POLL)
        except OSError as exc:
            # An NFS hiccup or a file vanishing mid-read: keep what was parsed (the position
            # moved only past those lines) and try again on the next poll.
            logger.warning("dsmon: %s: %s; retrying", self.path, exc)
        return out

    def release(self) -> list[Record]:
        """At a stop: what the parser still holds, as ``dsmon import`` of the file would end.

        That is an unterminated last line, a block still open (a table the run ended on),
        and records still waiting for a step number. The position does not move: a collector
        started again later re-reads from the start of the unterminated line, rebuilding the
        same parser state, and what it then emits again has the same keys (the store keeps
        the first copy). The follower is not polled after this.
        """
        out: list[Record] = [rec for old in self._retired for rec in old.release()]
        if self._f is not None and self._buf and not self._skipping:
            self._feed(bytes(self._buf), self._offset, out)
        recs = self._parser.finish()
        self._emit(recs, out)
        return out

    def close(self) -> None:
        """Release the file; the position stays as it is (nothing is flushed or finished)."""
        for old in self._retired:
            old.close()
        if self._f is not None:
            self._saved = self._current()
            self._f.close()
            self._f = None

    # --- one generation ------------------------------------------------------------------

    def _open(self, out: list[Record]) -> None:
        """Open the path, resuming a saved position or starting a new generation."""
        while self._older:  # generations that were still read when the last process ended
            self._finish_elsewhere(self._older.pop(0), out)
        f = open_quiet(self.path)
        if f is None:
            if self._saved is not None and self._saved.fp_len:
                # Rotated away while the collector was stopped, nothing new at the path yet.
                gone = self._saved
                self._finish_elsewhere(gone, out)
                self._saved = replace(
                    gone, gen=gone.gen + 1, dev=0, ino=0, fp=EMPTY_FP, fp_len=0, offset=0, line=0,
                    carry=self._carry,
                )  # fmt: skip
            return
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino)
        if ident == self._skip or self._unretire(ident):
            f.close()
            return
        saved, self._saved = self._saved, None
        gen = self._gen
        if saved is not None:
            self._carry = saved.carry
        if saved is not None and saved.fp_len:  # a real position, not a generation count
            if st.st_size >= saved.offset and same_start(f, saved.fp, saved.fp_len):
                self._adopt(f, saved.gen)
                self._replay_to(saved.offset, saved.line)
                return
            self._finish_elsewhere(saved, out)
            gen = saved.gen + 1
        elif saved is not None:
            gen = saved.gen
        self._new_generation(f, gen, st.st_size)

    def _new_generation(self, f: BinaryIO, gen: int, size: int) -> None:
        """Start reading a file new at the path, unless the tailer knows it under another."""
        if self._known(f):
            logger.info("dsmon: %s holds a log generation already followed; not re-read", self.path)
            self._skip = identity(f)
            self._reset(gen)
            f.close()
            return
        self._skip = None
        self._adopt(f, gen)
        if self._from_end:
            self._from_end = False
            self._replay_to(last_line_end(f, size), None)

    def _unretire(self, ident: tuple[int, int]) -> bool:
        """The path names a retired generation again (renamed back): follow it as current."""
        back = next((old for old in self._retired if (old._dev, old._ino) == ident), None)
        if back is None:
            return False
        self._retired.remove(back)
        rest = self._retired
        self.__dict__.update(back.__dict__)
        self._retired = rest
        return True

    # --- generation changes --------------------------------------------------------------

    def _check_path(self, out: list[Record]) -> None:
        """Notice rotation, replacement, truncation and deletion before reading on."""
        assert self._f is not None
        try:
            st = os.stat(self.path)
        except OSError:
            self._path_missing(out)
            return
        if (st.st_dev, st.st_ino) != (self._dev, self._ino):
            self._retire(out)
            self._open(out)
            return
        if self._was_truncated():
            self._truncated(out)

    def _path_missing(self, out: list[Record]) -> None:
        """Deleted or renamed away: the open file is read on as a retired generation."""
        self._retire(out)

    def _retire(self, out: list[Record]) -> None:
        """The path no longer names the open file: read it on until idle, start a new one.

        Everything written to the old file before the rotation is read now, ahead of the new
        file. A writer that keeps its descriptor (``tee``, a logger that never reopens) goes
        on appending to the renamed file, so it stays open and is read at every poll until
        it has been idle for :data:`MISSING_LINGER_S`; only then does its generation end.
        """
        if self._f is not None and self._was_truncated():
            # Truncated, then renamed, between two reads (copytruncate, then a rename in a
            # later rotation): its new content is another generation, left to the glob.
            self._truncated(out, keep_open=False)
            return
        old = copy.copy(self)
        old._retired, old._older = [], []  # lists stay the follower's own
        old._idle_since = self._clock()
        old._read(out, 1 << 62)
        self._retired.append(old)
        self._f = None
        # Nothing carries: the writer may go on in the renamed file (a shell redirect, tee),
        # and what appears at the path is another writer's.
        self._carry = ""
        self._reset(self._gen + 1)

    def _poll_retired(self, out: list[Record], final: bool) -> None:
        """Read what was appended to the retired generations; end those idle long enough."""
        now = self._clock()
        for old in list(self._retired):
            before = old._buf_start + len(old._buf)
            old._read(out, 1 << 62 if final else MAX_READ_PER_POLL)
            if old._buf_start + len(old._buf) != before:
                old._idle_since = now
            elif now - old._idle_since >= MISSING_LINGER_S and not final:
                old._end_generation(out)
                self._retired.remove(old)

    def _truncated(self, out: list[Record], *, keep_open: bool = True) -> None:
        """Truncated in place (copytruncate): read what we missed from the copy, restart at 0.

        Args:
            out: where the records read go.
            keep_open: the file is still at the path: read on from its start as the next
                generation (else it was renamed away as well, and is closed).
        """
        read_to = self._buf_start + len(self._buf)
        copy = find_generation(self.path, -1, -1, self._fp, self._fp_len, read_to)
        if copy is not None:
            with copy:
                copy.seek(read_to)
                while data := copy.read(CHUNK):
                    self._consume(data, out)
        self._end_generation(out, keep_open=keep_open, goes_on=True)

    def _end_generation(
        self, out: list[Record], *, keep_open: bool = False, goes_on: bool = False
    ) -> None:
        """The file is complete: parse its unterminated last line, finish the parser.

        ``goes_on``: it was truncated in place, and what is written to it now is the same
        output going on: read on from its start (``keep_open``), or, renamed away as well,
        by whichever follower meets it at its new name (``on_continued``).
        """
        if self._buf and not self._skipping:
            self._feed(bytes(self._buf), self._offset, out)
            self._line += 1
            self._offset = self._buf_start + len(self._buf)
        recs = self._parser.finish()
        self._emit(recs, out)
        f = self._f
        if f is not None:
            self._on_finished(self._current())
            self._f = None
        if f is not None and goes_on:
            self._hand_over()
            if keep_open:
                f.seek(0)
                self._adopt(f, self._gen + 1)
                return
            self._on_continued((self._dev, self._ino), self._carry)
        if f is not None:
            f.close()
        self._carry = ""
        self._reset(self._gen + 1)

    def _finish_elsewhere(self, saved: Position, out: list[Record]) -> None:
        """The saved generation is no longer at the path: finish it where it went, if found."""
        old = find_generation(self.path, saved.dev, saved.ino, saved.fp, saved.fp_len, saved.offset)
        if old is None:
            logger.warning(
                "dsmon: %s was replaced while the collector was stopped and its old content "
                "is not beside it; lines written after byte %d of it are lost",
                self.path, saved.offset,
            )  # fmt: skip
            return
        self._carry = saved.carry
        copied = identity(old) != (saved.dev, saved.ino)  # the file itself was truncated
        self._adopt(old, saved.gen)
        self._replay_to(saved.offset, saved.line)
        self._retire(out)
        if copied:  # what it holds now goes on from the copy's end, wherever it is met
            finished = self._retired[-1]
            finished._hand_over()
            self._on_continued((saved.dev, saved.ino), finished._carry)


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
