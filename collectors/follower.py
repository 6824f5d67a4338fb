"""Following one log path across its generations: new lines in, records out, none twice.

A *generation* is one file that lived at the path: rotation by rename, deletion and
re-creation, copytruncate and truncation each start a new one. A generation is identified by
a fingerprint of its first bytes (filebeat's ``file_identity: fingerprint``), with device and
inode as a hint, because inodes are reused (elastic/beats#1341). Each generation gets its own
incremental :class:`~dsmon.parse.log.LogParser` and its own ``Source.file`` label (``path``
for the first one seen, ``path#N`` after that), so its byte offsets never collide with an
earlier generation's in the store.

Reading one generation (complete lines only, the line-length cap, offsets and line numbers)
is :class:`~collectors.generation.GenerationReader`'s; this module decides when a generation
starts and ends. At the end of a generation its unterminated last line is complete by
definition and is parsed too.

**Resuming.** The saved position is the start of the first line whose records are not yet
known to be delivered. Parser state (the step clock, an open multi-line block) depends on
everything before it, so a restart re-parses the generation up to that offset *silently* and
emits from there: the records after a restart are exactly those a run without the restart
would have produced, with the same keys.
"""

from __future__ import annotations

import copy
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import BinaryIO

from collectors.generation import (
    CHUNK,
    GenerationReader,
    ParserFactory,
    identity,
    last_line_end,
    open_quiet,
)
from collectors.state import EMPTY_FP, Position, find_generation, same_start
from dsmon.model.records import Record

logger = logging.getLogger(__name__)

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
