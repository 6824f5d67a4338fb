r"""Turning a physical log line into clean logical lines: the noise real logs carry, removed once.

Real DeepSpeed logs are rarely clean: launchers prefix a host (pdsh ``worker-1: ``, Slurm
``0: ``, OpenMPI ``[1,0]<stdout>:``, ``kubectl logs --prefix``), torch prefixes tracebacks with
``[rank0]: ``, tqdm glues a progress bar and ``\\r`` before a log line, ANSI colours wrap
levels, and two processes writing at once concatenate lines. Every parser works on the
:class:`LogLine` this module makes, so each kind of noise is handled in exactly one place.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
# DeepSpeed's logger: [2026-11-29 14:10:22,818] [INFO] [config.py:678:print] message
_LOGGER = re.compile(
    r"\[(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)[,.](\d{3})\] \[([A-Z]+)\] \[([^\]:]+):(\d+):([^\]]*)\] ?"
)
_RANK = re.compile(r"\[Rank (-?\d+)\] ")
_TORCH_RANK = re.compile(r"\[rank(\d+)\]: ?")
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>: ?")
_KUBE_PREFIX = re.compile(r"\[pod/([^/\]]+)/[^\]]*\] ")
_HOST = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]{0,62}): ")
# Where a second line starts inside a physical line: a logger header, or a print_dist
# ``[Rank N] `` that does not directly follow a logger header (that one is part of log_dist).
_EMBEDDED = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{3}\] \[[A-Z]+\] \[|(?<!\] )\[Rank -?\d+\] (?=time \(ms\))"
)
#: Line starts that no launcher prefix has (a logger header, ``[Rank N]``, ``[rankN]:``), so
#: the prefix search can be skipped for most lines.
_NO_LAUNCHER_PREFIX = frozenset({"[2", "[R", "[r"})
_TQDM = re.compile(r"^\s*(?:[\w .:/-]*:\s*)?\d{1,3}%\|")


@dataclass(slots=True)
class LogLine:
    """One logical line with its prefixes taken off.

    ``text`` is the message (after logger header and ``[Rank N]``); ``ts`` the logger's
    timestamp as ISO-8601 (None for print() output); ``rank`` from ``[Rank N]``,
    ``[rankN]:`` or an MPI tag; ``host`` from a launcher prefix; ``logger`` the
    ``file.py`` the logger header names; ``traceback`` is set for torch's ``[rankN]:`` lines.
    ``line``/``offset`` locate the physical line it came from; ``sub`` orders the logical
    lines cut from one physical line.
    """

    text: str
    line: int
    offset: int | None = None
    sub: int = 0
    ts: str | None = None
    level: str | None = None
    logger: str | None = None
    rank: int | None = None
    host: str | None = None
    traceback: bool = False

    @property
    def prefixed(self) -> bool:
        """The line had a header of its own, so it cannot continue a wrapped line."""
        return self.ts is not None or self.rank is not None or self.traceback


def _looks_like_host(token: str, rest: str, known: set[str]) -> bool:
    """A ``token: `` prefix is a launcher's host label, not a message like ``Config: ...``.

    Host names carry a digit, a dash or a dot (``worker-1``, ``node001``, ``10.0.0.2``, Slurm's
    ``0``), or are followed by a logger/rank header, or were seen as hosts before.
    """
    if token.endswith(("Error", "Exception", "Warning")):
        return False  # ``torch.cuda.OutOfMemoryError: CUDA out of memory`` is an exception line
    if token in known:
        return True
    if rest.startswith("["):
        return True
    return any(c.isdigit() or c in "-." for c in token)


def _strip_launcher(text: str, out: LogLine, known_hosts: set[str]) -> str:
    """Remove host/task prefixes added by pdsh, Slurm, OpenMPI and kubectl (at most two)."""
    for _ in range(2):
        m = _MPI_TAG.match(text)
        if m:
            out.rank = int(m.group(1))
            text = text[m.end() :]
            continue
        m = _KUBE_PREFIX.match(text)
        if m:
            out.host = m.group(1)
            text = text[m.end() :]
            continue
        m = _HOST.match(text)
        if m and _looks_like_host(m.group(1), text[m.end() :], known_hosts):
            host = m.group(1)
            if not host.isdigit():
                out.host = host
                known_hosts.add(host)
            text = text[m.end() :]
            continue
        break
    return text


def _strip_headers(text: str, out: LogLine) -> str:
    """Take off torch's ``[rankN]:``, the logger header and ``[Rank N]``, filling ``out``."""
    if text.startswith("[rank"):
        m = _TORCH_RANK.match(text)
        if m:
            out.rank = int(m.group(1))
            out.traceback = True
            text = text[m.end() :]
    if text.startswith("["):
        m = _LOGGER.match(text)
        if m:
            out.ts = f"{m.group(1)}T{m.group(2)}.{m.group(3)}"
            out.level = m.group(4)
            out.logger = m.group(5)
            text = text[m.end() :]
        if text.startswith("[Rank "):
            m = _RANK.match(text)
            if m:
                out.rank = int(m.group(1))
                text = text[m.end() :]
    return text


def _segments(raw: str) -> list[str]:
    r"""Split a physical line into the pieces that are lines of their own.

    ``\\r`` separates tqdm redraws; a logger header or a print_dist timer line in mid-line
    marks a second process's output glued to the first.
    """
    if "\r" not in raw and (raw.find("[", 1) < 0 or _EMBEDDED.search(raw, 1) is None):
        # the common case, one line as it is: no split, and tqdm only if it draws a bar
        if not raw.strip() or ("%|" in raw and _TQDM.match(raw)):
            return [""]
        return [raw]
    parts = raw.split("\r") if "\r" in raw else [raw]
    out: list[str] = []
    for part in parts:
        start = 0
        for m in _EMBEDDED.finditer(part, 1):
            out.append(part[start : m.start()])
            start = m.start()
        out.append(part[start:])
    return [p for p in out if p.strip() and not _TQDM.match(p)] or [""]


class LineCleaner:
    """Stateful cleaner: remembers host labels seen, so ``worker:`` is stripped consistently."""

    def __init__(self) -> None:
        self._hosts: set[str] = set()

    def clean(self, raw: str, line: int, offset: int | None = None) -> list[LogLine]:
        """Logical lines of one physical line (a trailing newline is ignored)."""
        raw = raw.rstrip("\r\n")
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        head = LogLine(text="", line=line, offset=offset)
        if raw[:2] not in _NO_LAUNCHER_PREFIX:
            raw = _strip_launcher(raw, head, self._hosts)
        segments = _segments(raw)
        if len(segments) == 1:
            head.text = _strip_headers(segments[0], head)
            return [head]
        result: list[LogLine] = []
        for sub, seg in enumerate(segments):
            out = LogLine(
                text="", line=line, offset=offset, sub=sub, host=head.host, rank=head.rank
            )
            out.text = _strip_headers(seg, out)
            result.append(out)
        return result
