"""The flops profiler's ``output_file``: a snapshot DeepSpeed rewrites whole, not a log."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from collectors.tail.state import ProfileState
from dsmon.model.check import fit_all
from dsmon.model.records import FlopsProfileRecord, Record

logger = logging.getLogger(__name__)

#: Seconds a rewritten profile file must stay unchanged before it is read (it is written
#: progressively by print() calls into the open file).
PROFILE_SETTLE_S = 1.0

ProfileParser = Callable[[str, str], Sequence[Record]]


class ProfileWatcher:
    """The flops profiler's ``output_file``: a snapshot, not a log.

    DeepSpeed opens it with ``"w"`` and prints the whole profile into it, so it is re-read
    whole once it has changed and then stayed unchanged for :data:`PROFILE_SETTLE_S`. The
    parser keys its records by profile step, so a rewrite for another step is stored beside
    the earlier profile and a re-read of the same one adds nothing.
    """

    def __init__(
        self,
        path: str,
        parse: ProfileParser,
        saved: ProfileState | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._parse = parse
        self._clock = clock
        self._sha = saved.sha if saved else ""
        self._sig: tuple[int, int, int] | None = None
        self._changed_at = 0.0
        self._done_sig: tuple[int, int, int] | None = None
        self._partial: list[Record] = []

    def state(self) -> ProfileState | None:
        """What to save: the last content sent."""
        return ProfileState(self.path, self._sha) if self._sha else None

    def poll(self, *, final: bool = False) -> list[Record]:
        """The profile's records when a new, settled content is there; else nothing.

        Args:
            final: read a changed content now, settled or not: this is the last read before
                a stop, and DeepSpeed writes the profile before the run ends.
        """
        try:
            st = os.stat(self.path)
        except OSError:
            return []
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        now = self._clock()
        if sig != self._sig and not final:
            self._sig, self._changed_at = sig, now
            return []
        settling = now - self._changed_at < PROFILE_SETTLE_S and sig == self._sig
        if sig == self._done_sig or (settling and not final):
            return []
        self._done_sig = sig
        return self._read(final)

    def _read(self, final: bool) -> list[Record]:
        """The profile now in the file; one caught mid-write (``partial``) waits."""
        try:
            data = Path(self.path).read_bytes()
        except OSError as exc:
            logger.warning("dsmon: cannot read %s: %s", self.path, exc)
            return []
        sha = hashlib.sha1(data, usedforsecurity=False).hexdigest()
        if sha == self._sha:
            return []
        # Labelled by its bare name, as ``dsmon import`` of the file or its folder names it.
        label = os.path.basename(self.path)
        try:
            parsed, problems = fit_all(self._parse(data.decode("utf-8", errors="replace"), label))
        except Exception as exc:  # noqa: BLE001 - a file dsmon cannot parse is not read again
            logger.warning(
                "dsmon: %s: the parser raised %s: %s", self.path, type(exc).__name__, exc
            )
            self._sha = sha
            return []
        for problem in problems:
            logger.warning("dsmon: %s: %s; left out", self.path, problem)
        recs = [r for r in parsed if not (isinstance(r, FlopsProfileRecord) and r.partial)]
        if final:  # sent at a stop only if asked (``Tailer.release``): see collectors.agent
            self._partial = [r for r in parsed if r not in recs]
        if recs:  # nothing parsed: not a complete profile yet, wait for the next rewrite
            self._sha = sha
        return recs

    def release(self) -> list[Record]:
        """At a stop: a profile the final read found cut short (DeepSpeed still writing it)."""
        out, self._partial = self._partial, []
        return out


def default_config_parser(run: str, node: str | None) -> ProfileParser:
    """A ds_config.json read whole as a ``file`` config record; an unreadable one is logged."""
    from dsmon.parse.side_files import FileFormatError, parse_ds_config

    def parse(text: str, label: str) -> Sequence[Record]:
        try:
            rec = parse_ds_config(text, run, label)
        except FileFormatError as exc:
            logger.warning("dsmon: %s", exc)
            return []
        return [dataclasses.replace(rec, src=dataclasses.replace(rec.src, node=node))]

    return parse


def default_profile_parser(run: str, node: str | None) -> ProfileParser:
    """The foundation's whole-file flops-profile parser, bound to this run and node."""
    from dsmon.parse.side_files import parse_profile_file

    def parse(text: str, label: str) -> Sequence[Record]:
        records, _ = parse_profile_file(text, run, label, node)
        return records

    return parse
