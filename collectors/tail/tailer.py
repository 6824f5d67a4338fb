"""The log tailer: every file matching the collector's globs, followed and parsed, no line twice.

One :class:`~collectors.tail.follower.FileFollower` per path does the reading; this module
finds the paths (globs are re-scanned, so per-rank logs created later are picked up), re-reads the flops
profiler's ``output_file`` whole whenever DeepSpeed rewrites it, and keeps the state file.

**Waking and polling.** watchdog wakes the tail loop when a file appears, is renamed or is
deleted (:class:`Waker`), but the tailer also polls on a timer, always: inotify does not fire
on NFS and on many container volumes (watchdog#504, #409), and a watch limit may be reached.

**The state file** (:mod:`collectors.tail.state`) holds each path's position as of the last batch
whose records are *durable* (acknowledged by the server or spooled): ``poll`` returns the
checkpoint with the batch, and :meth:`Tailer.commit` is called once the batch is safe. A
killed collector therefore resumes where delivery stopped: what it reads again carries the
same record keys and is stored once.
"""

from __future__ import annotations

import fnmatch
import glob
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from collectors.tail.follower import FileFollower, ParserFactory
from collectors.tail.profile_file import (
    ProfileParser,
    ProfileWatcher,
    default_config_parser,
    default_profile_parser,
)
from collectors.tail.rotated_start import copy_of_live, family, oldest_first, predecessor
from collectors.tail.state import FP_BYTES, Checkpoint, Position, StateFile, same_start, same_stem
from dsmon.load.rotated import COMPRESSED
from dsmon.model.records import Record
from dsmon.parse.log import LogParser
from dsmon.parse.probe import ProbeParser
from dsmon.parse.run_files import rank_of, static_root
from dsmon.parse.side_files import CsvMonitorParser

logger = logging.getLogger(__name__)

#: Generations remembered as read, so a rotated file that matches the glob is not re-read.
MAX_FINISHED = 256
# Per-rank logs of ``deepspeed --enable_each_rank_log``: ``<time>_rank<N>.log`` (as dsmon.load.files).
#: The per-rank probe's files in its folder (``rank-<N>.jsonl``, one per rank).
PROBE_FILES = "rank-*.jsonl"


@dataclass(slots=True)
class TailBatch:
    """Records read by one poll and the checkpoint to commit once they are delivered."""

    records: list[Record]
    checkpoint: Checkpoint


class Tailer:
    """Follows the files matching ``patterns`` and the profile files, for one run and node.

    Args:
        patterns: globs or plain paths; a plain path that does not exist yet is waited for.
        run: the run name of every record.
        node: the node name (``Source.node``) of records whose line names no host.
        state: where positions are kept across restarts (None: nowhere, start fresh).
        profile_files: flops profiler ``output_file`` paths, re-read whole on change.
        config_files: the run's ``ds_config.json`` files, read whole (and again when
            changed): at DeepSpeed's default log level the log holds no config dump, and
            the health checklist has nothing to judge without one.
        from_end: files present at start with no saved position are read from their end.
        make_parser: builds a generation's parser from its label (default ``LogParser``).
        probe_dirs: folders of the per-rank probe's files (``DSMON_PROBE_DIR``, see
            ``dsmon run``): their ``rank-*.jsonl`` files are followed with ``ProbeParser``.
        monitor_files: globs of csv_monitor's series, followed with ``CsvMonitorParser``.
        parse_profile: parses a profile file's text given its label.
        rescan_s: how often the globs are matched again.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        patterns: Sequence[str],
        *,
        run: str,
        node: str | None = None,
        state: StateFile | None = None,
        profile_files: Sequence[str] = (),
        config_files: Sequence[str] = (),
        from_end: bool = False,
        make_parser: ParserFactory | None = None,
        probe_dirs: Sequence[str] = (),
        monitor_files: Sequence[str] = (),
        parse_profile: ProfileParser | None = None,
        rescan_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe_patterns = [os.path.join(d, PROBE_FILES) for d in probe_dirs]
        self._monitor_patterns = list(monitor_files)
        self.patterns = [*patterns, *self._probe_patterns, *self._monitor_patterns]
        self.run = run
        self.node = node
        self._state = state
        self._make_parser = make_parser or (lambda label: LogParser(run, label, node, live=True))
        self._make_probe_parser: ParserFactory = lambda label: ProbeParser(run, label, node)
        self._make_monitor_parser: ParserFactory = lambda label: CsvMonitorParser(run, label, node)
        self._from_end = from_end
        self._rescan_s = rescan_s
        self._clock = clock
        self._last_scan = -1e18
        # Paths a glob matched that hold a generation already read, by device and inode.
        self._ignored: dict[str, tuple[int, int]] = {}
        # Files truncated and renamed away (device, inode) -> the state their content goes on from.
        self._continued: dict[tuple[int, int], str] = {}
        saved = state.load() if state is not None else Checkpoint()
        self._finished: deque[Position] = deque(saved.finished, maxlen=MAX_FINISHED)
        by_path: dict[str, list[Position]] = {}
        for pos in sorted(saved.files, key=lambda p: p.gen):
            if self._wanted(pos.path):
                by_path.setdefault(pos.path, []).append(pos)
        self._followers = {
            path: self._follower(path, ps[-1], False, older=ps[:-1]) for path, ps in by_path.items()
        }
        parse = parse_profile or default_profile_parser(run, node)
        old = {p.path: p for p in saved.profiles}
        self._profiles = [ProfileWatcher(p, parse, old.get(p), clock) for p in profile_files]
        read_config = default_config_parser(run, node)
        self._profiles += [ProfileWatcher(p, read_config, old.get(p), clock) for p in config_files]
        # Paths present at the first scan: the ones ``from_end`` skips (even if met later).
        self._present_at_start: set[str] | None = None

    def poll(self, *, final: bool = False) -> TailBatch:
        """Read whatever is new in every followed file.

        Args:
            final: the last read before a stop: match the globs again now, read every file
                to its end, and read a rewritten profile file without waiting for it to
                settle, so that what the run wrote just before it ended is not left behind.
        """
        out: list[Record] = []
        for follower in list(self._followers.values()):
            out.extend(follower.poll(final=final))
        # A file going on at a new name is met in this poll, so this checkpoint holds it.
        if final or self._continued or self._clock() - self._last_scan >= self._rescan_s:
            self._last_scan = self._clock()
            looked_for = list(self._continued)
            out.extend(self._scan(final))
            for ident in looked_for:  # not met (a name no glob matches): no scan every poll
                self._continued.pop(ident, None)
        for watcher in self._profiles:
            out.extend(watcher.poll(final=final))
        return TailBatch(out, self.checkpoint())

    def release(self) -> list[Record]:
        """At a stop, after the final poll: what the parsers still hold (see ``FileFollower``).

        The checkpoint is unchanged by it, so the positions saved are those of the final poll.
        """
        out = [rec for f in self._followers.values() for rec in f.release()]
        return out + [rec for w in self._profiles for rec in w.release()]

    def checkpoint(self) -> Checkpoint:
        """Positions as of now (to be committed once what was read so far is delivered)."""
        files = tuple(p for f in self._followers.values() for p in f.positions())
        profiles = tuple(s for w in self._profiles if (s := w.state()) is not None)
        return Checkpoint(files, tuple(self._finished), profiles)

    def commit(self, ckpt: Checkpoint) -> None:
        """Save a checkpoint (called by the sender thread once its batch is durable)."""
        if self._state is not None:
            self._state.save(ckpt)

    def watch_dirs(self) -> list[tuple[str, bool]]:
        """Folders worth watching for a prompt wake-up, with whether to watch recursively."""
        out: dict[str, bool] = {}
        for pattern in [*self.patterns, *(w.path for w in self._profiles)]:
            folder, recursive = _watch_root(pattern)
            out[folder] = out.get(folder, False) or recursive
        return sorted(out.items())

    def close(self) -> None:
        """Close every file; positions stay as last committed."""
        for follower in self._followers.values():
            follower.close()

    def _scan(self, final: bool = False) -> list[Record]:
        """Start following paths that newly match, unless they hold a generation already read.

        Files of one rotated log are followed oldest first, each once the one before it has
        been read to its end (:mod:`collectors.tail.rotated_start`).
        """
        out: list[Record] = []
        matched = oldest_first(_matches(self.patterns))
        if self._present_at_start is None:
            self._present_at_start = set(matched)
        for path, label in matched.items():
            if path in self._followers or self._already_read(path):
                continue
            label = self._unused(path, label)
            carry = self._continued.pop(_identity(path), "")
            before = None if carry else predecessor(path, self._followers)
            if before is not None:
                if not before.read_to_end():
                    continue  # an older file of the same log first: met again next scan
                carry = before.handover(last_line_complete=True)
            from_end = self._from_end and path in self._present_at_start
            follower = self._follower(path, None, from_end, label, carry=carry)
            self._followers[path] = follower
            out.extend(follower.poll(final=final))
        return out

    def _unused(self, path: str, label: str) -> str:
        """``label``, or a longer one when another followed file's records carry it already.

        The label is the records' ``Source.file``, part of each record's key in the store: two
        files under one label (``--log job/node0/train.log --log job/node1/train.log`` met
        apart, a rank's log appearing later under a name another glob gave) would have their
        records taken for one file's, and all but the first file's dropped as copies. The
        labels of files met together are told apart by :func:`_matches` already.
        """
        taken = {f.base_label: p for p, f in self._followers.items() if p != path}
        if label in taken:
            label = _distinct(path, taken[label])
        return label if label not in taken else os.path.abspath(path)

    def _wanted(self, path: str) -> bool:
        """A saved path still matches one of the patterns (they may have changed)."""
        return any(path == p or fnmatch.fnmatchcase(path, p) for p in self.patterns)

    def _follower(
        self,
        path: str,
        saved: Position | None,
        from_end: bool,
        label: str | None = None,
        older: Sequence[Position] = (),
        carry: str = "",
    ) -> FileFollower:
        probe = any(fnmatch.fnmatchcase(path, p) for p in self._probe_patterns)
        monitor = any(fnmatch.fnmatchcase(path, p) for p in self._monitor_patterns)
        make = self._make_probe_parser if probe else self._make_parser
        return FileFollower(
            path,
            self._make_monitor_parser if monitor else make,
            label=label,
            rank=rank_of(path),
            saved=saved,
            older=older,
            from_end=from_end,
            on_finished=self._finished.append,
            on_continued=self._continued.__setitem__,
            carry=carry,
            known=lambda f: self._known(f, path),
            clock=self._clock,
        )

    def _already_read(self, path: str) -> bool:
        """A rotated file (``train.log.1``) that the glob matches is one we read or have read.

        Files are told apart by device and inode plus a fingerprint of their first bytes, not
        by path: a file renamed by rotation is the generation its old path's follower reads
        (to its end), and a copy made by copytruncate starts with the bytes of the generation
        it copies, whose follower reads from the copy what it had not read yet.
        """
        try:
            st = os.stat(path)
        except OSError:
            return True
        ident = (st.st_dev, st.st_ino)
        if self._ignored.get(path) == ident:
            return True
        try:
            with open(path, "rb") as f:
                seen = self._known(f, path) or self._was_read(f) or self._is_copy(f, path)
        except OSError:
            return True
        if seen:
            logger.info("dsmon: %s holds a log generation already read; not re-read", path)
            self._ignored[path] = ident
        return seen

    def _known(self, f: BinaryIO, path: str) -> bool:
        """The open file is one another path's follower reads, or a generation that ended."""
        st = os.fstat(f.fileno())
        ident = (st.st_dev, st.st_ino)
        others = (g for p, g in self._followers.items() if p != path)
        if any(ident in g.identities() for g in others):
            return True
        return any(
            (p.dev, p.ino) == ident and same_start(f, p.fp, p.fp_len) for p in self._finished
        )

    def _was_read(self, f: BinaryIO) -> bool:
        """The file starts with the bytes of a generation that ended (a rotated copy)."""
        return any(p.fp_len and same_start(f, p.fp, p.fp_len) for p in self._finished)

    def _is_copy(self, f: BinaryIO, path: str) -> bool:
        """A copytruncate copy of a file being followed, caught before the truncation.

        Only a whole fingerprint counts, and only beside the followed file with a name that
        starts like it (``train.log.1``, ``train-20260101.log``): per-rank logs of one launch
        may share their first lines, and must never be taken for copies of each other. A
        rotated name met together with its live file, before either is followed, is
        compared with the live file (:func:`~collectors.tail.rotated_start.copy_of_live`).
        """
        if family(path)[0] not in self._followers and copy_of_live(path):
            return True
        for g in self._followers.values():
            if g.path != path and family(g.path)[0] == path:
                continue  # ``path`` is the live file of a rotated name followed: never its copy
            fp = g.fingerprint()
            whole = fp is not None and fp[1] == FP_BYTES and same_stem(g.path, path)
            if whole and fp is not None and same_start(f, *fp):
                return True
        return False


def _identity(path: str) -> tuple[int, int]:
    """Device and inode of a path's file; (-1, -1) when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1)
    return (st.st_dev, st.st_ino)


def _matches(patterns: Iterable[str]) -> dict[str, str]:
    """Paths matching the globs, each with its label (a plain path is kept before it exists).

    The label, the records' ``Source.file``, is the path relative to the folder the glob
    starts from (a plain path's bare name): what ``dsmon import`` of that folder (or file)
    would name it, so live and replayed records of a file carry the same name. A rotation
    logrotate compressed (``train.log.2.gz``) is a copy of what was followed: left alone.
    """
    out: dict[str, str] = {}
    for pattern in patterns:
        if not glob.has_magic(pattern):
            out.setdefault(pattern, os.path.basename(pattern) or pattern)
            continue
        root = static_root(pattern)
        for path in sorted(glob.glob(pattern, recursive=True)):
            if os.path.isfile(path) and not path.endswith(COMPRESSED):  # rotated, read before
                out.setdefault(path, os.path.relpath(path, root))
    by_label: dict[str, list[str]] = {}
    for path, label in out.items():
        by_label.setdefault(label, []).append(path)
    for paths in by_label.values():
        if len(paths) > 1:  # one name for several files: each named from where they part
            for path in paths:
                out[path] = _distinct(path, *(p for p in paths if p != path))
    return out


def _distinct(path: str, *others: str) -> str:
    """``path`` relative to the deepest folder it shares with ``others`` (``node1/train.log``).

    What ``dsmon import`` of that folder names the file, so a live record and a replayed
    one still carry the same name.
    """
    full = os.path.abspath(path)
    try:
        return os.path.relpath(full, os.path.commonpath([full, *map(os.path.abspath, others)]))
    except ValueError:  # different drives
        return full


def _watch_root(pattern: str) -> tuple[str, bool]:
    """The nearest existing folder above a glob's first wildcard, and whether to recurse."""
    parts = Path(pattern).parts
    magic_at = next((i for i, p in enumerate(parts) if glob.has_magic(p)), None)
    if magic_at is None:
        folder, deep = Path(pattern).parent, False
    else:
        folder = Path(*parts[:magic_at]) if magic_at else Path(".")
        deep = magic_at < len(parts) - 1  # a wildcard in a folder part
    while not folder.is_dir() and folder != folder.parent:
        # Not there yet: watch the nearest existing folder, shallowly (a deep watch of a
        # high folder would walk a whole tree); polling finds the file wherever it appears.
        folder, deep = folder.parent, False
    return str(folder), deep


class Waker:
    """Sets ``event`` when watchdog sees a file created, renamed or deleted in the folders.

    That is when promptness pays: a new per-rank log, a rotation. Appends are left to the
    poll on purpose: a training log is written all the time, and waking on every write (each
    ``print`` is one) cost 2 % of a core in watchdog's own threads at 100 lines/s, while the
    0.5 s poll already keeps write-to-dashboard under a second. Opens and reads are not
    watched either: the tailer's own reading would wake it again.

    Best effort only: without watchdog, or when the watch cannot start (inotify limits), the
    tail loop simply polls on its timer.
    """

    def __init__(self, event: threading.Event) -> None:
        self._event = event
        self._observer: Any = None

    def start(self, folders: Iterable[tuple[str, bool]]) -> bool:
        """Watch the folders; False when only polling will be used."""
        try:
            from watchdog import events
            from watchdog.observers import Observer
        except ImportError:
            logger.info("dsmon: watchdog not installed; polling only")
            return False
        handler = events.FileSystemEventHandler()
        handler.on_any_event = self.dispatch  # type: ignore[method-assign]
        wanted = [events.FileCreatedEvent, events.FileMovedEvent, events.FileDeletedEvent]
        observer = Observer()
        try:
            for folder, recursive in folders:
                observer.schedule(handler, folder, recursive=recursive, event_filter=wanted)
            observer.start()
        except OSError as exc:
            logger.warning("dsmon: cannot watch log folders (%s); polling only", exc)
            return False
        self._observer = observer
        return True

    def dispatch(self, event: object) -> None:
        """Any change seen by watchdog wakes the tail loop."""
        self._event.set()

    def stop(self) -> None:
        """Stop watching."""
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=5)
            self._observer = None
