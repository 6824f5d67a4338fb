"""A rotated log's files, read as the one output they are: oldest first, steps counted on.

logrotate leaves a long run's output in several files beside each other: ``train.log.2``,
``train.log.1`` and ``train.log`` (numbered, the highest the oldest), or ``train.log-20261201``
and ``train-20261201.log`` (``dateext``, with or without ``extension``). Each goes on where
the one before it stopped, and at DeepSpeed's default log level nothing in a later file says
which step it starts at. So a folder's files of one log are read oldest first, and each file's
parser goes on from where the previous one's stood (``LineParser.handover``), as the
collector's does across a copytruncate. A rotation logrotate compressed (``train.log.2.gz``,
its ``compress`` option) is read decompressed, as what it was; one cut or damaged is read up
to the damage, which is counted.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, cast

#: Suffixes of files that may be logs (a rotated name keeps one before its rotation mark).
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
_EXT = r"\.(?:log|txt|out|err)"
#: logrotate's ``dateext`` date, ``%Y%m%d`` (an hour, minutes, seconds may follow): a real
#: date, so that a Slurm job's ``slurm-12345678.out`` is not taken for a rotation.
_DATE = r"(?:19|20)\d\d(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])(?:\d\d){0,3}"
#: ``train.log.3`` (logrotate's numbers) and ``train.log-20261201`` (``dateext``).
_AFTER = re.compile(rf"^(?P<base>.+{_EXT})(?:\.(?P<n>\d{{1,4}})|-(?P<date>{_DATE}))$")
#: ``train-20261201.log`` (``dateext`` with ``extension .log``).
_BEFORE = re.compile(rf"^(?P<stem>.+)-(?P<date>{_DATE})(?P<ext>{_EXT})$")

#: The suffix logrotate's ``compress`` adds (gzip).
COMPRESSED = ".gz"

#: Where each family's parser stood after its last file: family -> ``handover()``.
Carries = dict[str, dict[str, Any]]


def rotation(name: str) -> tuple[str, tuple[int, int, str]] | None:
    """The log a rotated file name belongs to, and its age key (smaller: older); else None.

    ``train.log.2`` -> ("train.log", (0, -2, "")); ``train.log-20261201`` -> ("train.log",
    (1, 0, "20261201")); ``train.log.2.gz`` as ``train.log.2``; the live file ``train.log``
    itself is not a rotated name.
    """
    name = unpacked_name(name)
    if m := _AFTER.match(name):
        if m["n"] is not None:
            return m["base"], (0, -int(m["n"]), "")
        return m["base"], (1, 0, m["date"])
    if m := _BEFORE.match(name):
        return m["stem"] + m["ext"], (1, 0, m["date"])
    return None


def may_be_log(name: str) -> bool:
    """Whether a file name is a log's, or a rotated log's (compressed or not)."""
    return unpacked_name(name).endswith(LOG_SUFFIXES) or rotation(name) is not None


def unpacked_name(name: str) -> str:
    """The name a compressed rotation had before logrotate compressed it."""
    return name.removesuffix(COMPRESSED)


def open_log(path: Path) -> BinaryIO:
    """A log's bytes: a compressed rotation's decompressed (see :class:`Unpacked`)."""
    if path.name.endswith(COMPRESSED):
        return cast(BinaryIO, Unpacked(path))
    return path.open("rb")


class Unpacked:
    """A gzip file read line by line, ending where it is cut or damaged instead of raising.

    logrotate may still be compressing a file when it is read, or a copy may be cut short:
    the lines before the damage are good log lines. ``error`` then says what was wrong.
    """

    def __init__(self, path: Path) -> None:
        self._file = gzip.open(path, "rb")  # noqa: SIM115 (closed by close())
        self.error: str | None = None

    def readline(self, limit: int = -1) -> bytes:
        """The next line (at most ``limit`` bytes), or b"" at the end or the damage."""
        return self._guarded(self._file.readline, limit)

    def read(self, n: int = -1) -> bytes:
        """The next ``n`` bytes, or fewer at the end or the damage."""
        return self._guarded(self._file.read, n)

    def _guarded(self, how: Any, n: int) -> bytes:
        if self.error is not None:
            return b""
        try:
            return cast(bytes, how(n))
        except (OSError, EOFError) as e:  # BadGzipFile is an OSError; a cut stream, EOFError
            self.error = f"{type(e).__name__}: {e}"
            return b""

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> Unpacked:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
