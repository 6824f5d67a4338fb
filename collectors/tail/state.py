"""What the tailer keeps across restarts: file positions, in a state file replaced atomically.

A position names a file *generation* by a fingerprint of its first bytes (filebeat's
``file_identity: fingerprint``) plus device and inode, because inodes are reused
(elastic/beats#1341), and says how far it was read: the offset of the first line whose records
are not yet known to be delivered, and the number of lines before it. The state file is
written as temp file, fsync, rename, fsync of the folder (elastic/beats#3537), so after a crash
it is the old version or the new one, never a torn mix.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

from collectors.durable import fsync_dir

logger = logging.getLogger(__name__)

STATE_VERSION = 1
#: Bytes of a file's start that identify it.
FP_BYTES = 1024
EMPTY_FP = hashlib.sha1(b"", usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class Position:
    """Where reading a path stands: its generation's identity, offset and line count."""

    path: str
    gen: int
    dev: int
    ino: int
    fp: str
    fp_len: int
    offset: int
    line: int
    label: str = ""
    #: What the generation's parser started from (``LineParser.handover`` of the one before,
    #: as JSON; "" for none): a resume rebuilds the same parser state.
    carry: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the state file."""
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: dict[str, Any]) -> Position:
        """Read back :meth:`to_dict`; raises ``KeyError``/``TypeError`` on a foreign shape.

        ``label`` and ``carry`` may be missing (state files of older versions).
        """
        values = {
            k: obj[k] for k in cls.__dataclass_fields__ if k in obj or k not in ("label", "carry")
        }
        for name, value in values.items():
            want = str if name in ("path", "fp", "label", "carry") else int
            if type(value) is not want:
                raise TypeError(f"'{name}': expected {want.__name__}, got {value!r}")
        return cls(**values)


def fingerprint(f: BinaryIO, size: int) -> tuple[str, int]:
    """SHA-1 of the first ``min(size, FP_BYTES)`` bytes, and how many bytes that was."""
    n = min(size, FP_BYTES)
    data = os.pread(f.fileno(), n, 0) if n else b""
    return hashlib.sha1(data, usedforsecurity=False).hexdigest(), len(data)


def same_start(f: BinaryIO, fp: str, fp_len: int) -> bool:
    """Whether the open file still starts with the bytes that gave ``fp``."""
    data = os.pread(f.fileno(), fp_len, 0) if fp_len else b""
    return len(data) == fp_len and hashlib.sha1(data, usedforsecurity=False).hexdigest() == fp


def find_generation(
    path: str, dev: int, ino: int, fp: str, fp_len: int, min_size: int = 0
) -> BinaryIO | None:
    """Beside ``path``, the rotated or copied file that holds a generation, opened.

    Candidates are the siblings whose name starts like the path's (``train.log.1``,
    ``train-20240101.log``); the same inode wins, else the same fingerprint (a copy).
    """
    p = Path(path)
    try:
        names = [q for q in p.parent.iterdir() if same_stem(path, str(q)) and q.name != p.name]
    except OSError:
        return None
    names.sort(key=lambda q: _same_inode(q, dev, ino), reverse=True)
    for q in names:
        try:
            f = q.open("rb")
        except OSError:
            continue
        size = os.fstat(f.fileno()).st_size
        if size >= max(min_size, fp_len) and same_start(f, fp, fp_len):
            return f
        f.close()
    return None


def same_stem(path: str, other: str) -> bool:
    """``other`` is beside ``path`` and its name starts like it: a rotated name of it."""
    p, q = Path(path).absolute(), Path(other).absolute()
    return p.parent == q.parent and q.name.startswith(p.name.split(".")[0])


def _same_inode(path: Path, dev: int, ino: int) -> bool:
    try:
        st = path.stat()
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


@dataclass(frozen=True, slots=True)
class ProfileState:
    """The hash of the last profile-file content sent."""

    path: str
    sha: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What the state file says once the records read so far are delivered."""

    files: tuple[Position, ...] = ()
    finished: tuple[Position, ...] = ()
    profiles: tuple[ProfileState, ...] = ()

    def generations(self) -> tuple[tuple[str, int, int, int], ...]:
        """Which generations it knows (path, number, device, inode), ended ones included."""
        return tuple((p.path, p.gen, p.dev, p.ino) for p in (*self.files, *self.finished))

    def to_json(self) -> str:
        """The state file's text."""
        obj = {
            "version": STATE_VERSION,
            "files": [p.to_dict() for p in self.files],
            "finished": [p.to_dict() for p in self.finished],
            "profiles": [asdict(p) for p in self.profiles],
        }
        return json.dumps(obj, indent=1)

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """Parse :meth:`to_json`; raises ``ValueError`` (naming the field) on anything else."""
        obj: Any = json.loads(text)
        if not isinstance(obj, dict) or obj.get("version") != STATE_VERSION:
            raise ValueError(f"field 'version': expected {STATE_VERSION}")
        try:
            return cls(
                tuple(Position.from_dict(p) for p in obj.get("files", [])),
                tuple(Position.from_dict(p) for p in obj.get("finished", [])),
                tuple(ProfileState(**p) for p in obj.get("profiles", [])),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"field {exc}: missing or malformed") from None


class StateFile:
    """The tailer's position file, replaced atomically on every save."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._last: Checkpoint | None = None

    def load(self) -> Checkpoint:
        """The saved checkpoint; empty when there is none or it cannot be read (set aside)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Checkpoint()
        try:
            self._last = Checkpoint.from_json(text)
        except ValueError as exc:
            bad = self.path.with_suffix(self.path.suffix + ".bad")
            os.replace(self.path, bad)
            logger.warning("dsmon: %s: unreadable state (%s), moved to %s", self.path, exc, bad)
            return Checkpoint()
        return self._last

    def save(self, ckpt: Checkpoint) -> None:
        """Write temp, fsync, rename, fsync the folder: the file is old or new, never torn."""
        with self._lock:
            if ckpt == self._last:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(ckpt.to_json())
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            fsync_dir(self.path.parent)
            self._last = ckpt
