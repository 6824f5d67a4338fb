"""A rotated log met whole at start: its files followed oldest first, each going on from the last.

A collector started after logrotate already ran (a sidecar started late, a restart that lost
its state file) finds ``train.log.2``, ``train.log.1`` and ``train.log`` at once, when its
glob matches rotated names. They are one output: at DeepSpeed's default log level only the
oldest file starts with the launcher's lines, so a later file read on its own cannot number
its steps (no ``step=`` line ever says which step it is at). ``dsmon import`` reads such a
folder oldest first, each file's parser going on from the one before
(:mod:`dsmon.load.rotated`); this module gives the tailer the same order. A file is followed
only once the one before it has been read to its end, and its parser starts from that one's
(``FileFollower.handover``): what the collector sends then matches what ``dsmon import`` of
the folder stores.

A copytruncate copy met before the truncation (``train.log.1`` and ``train.log`` still hold
the same bytes) is left alone, as a copy of a followed file is: the live file is the one that
goes on.

Rotations that happen while the collector runs need none of this: the follower of the path
reads the renamed generation to its end and carries its parser over itself.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Protocol

from collectors.tail.state import FP_BYTES
from dsmon.load.rotated import rotation

#: Age key of a live file (``train.log``): newer than any of its rotated names.
_LIVE_AGE = (2, 0, "")


class Predecessor(Protocol):
    """What the tailer needs of the follower of an older file of the same log."""

    def read_to_end(self) -> bool:
        """Whether everything the file holds has been read."""
        ...

    def handover(self, *, last_line_complete: bool = False) -> str:
        """The parser state the next file goes on from (``Position.carry``)."""
        ...


def family(path: str) -> tuple[str, tuple[int, int, str]]:
    """The live path a file belongs to, and its age among that log's files (smaller: older)."""
    folder, name = os.path.split(path)
    rot = rotation(name)
    if rot is None:
        return path, _LIVE_AGE
    return os.path.join(folder, rot[0]), rot[1]


def oldest_first(paths: Mapping[str, str]) -> dict[str, str]:
    """The matched paths (path -> label), each log's files from its oldest to its live one."""
    return dict(sorted(paths.items(), key=lambda item: family(item[0])))


def predecessor(path: str, followed: Mapping[str, Predecessor]) -> Predecessor | None:
    """The follower of the newest followed file of ``path``'s log older than ``path``."""
    live, age = family(path)
    older = [(a, p) for p in followed if (f := family(p))[0] == live and (a := f[1]) < age]
    if not older:
        return None
    return followed[max(older)[1]]


def copy_of_live(path: str) -> bool:
    """``path`` is a rotated name whose live file starts with the same bytes: a fresh copy.

    logrotate's copytruncate copies the live file, then truncates it; between the two, both
    hold the same output. Only a whole fingerprint's worth of equal bytes counts.
    """
    live, _ = family(path)
    if live == path:
        return False
    try:
        with open(path, "rb") as a, open(live, "rb") as b:
            head = a.read(FP_BYTES)
            return len(head) == FP_BYTES and b.read(FP_BYTES) == head
    except OSError:
        return False
