r"""Turning a physical log line into clean logical lines: the noise real logs carry, removed once.

Real DeepSpeed logs are rarely clean: launchers prefix a host (pdsh ``worker-1: ``, Slurm
``0: ``, OpenMPI ``[1,0]<stdout>:``, ``kubectl logs --prefix``), torch prefixes tracebacks with
``[rank0]: ``, tqdm glues a progress bar and ``\\r`` before a log line, ANSI colours wrap
levels, and two processes writing at once concatenate lines. Every parser works on the
:class:`LogLine` this module makes, so each kind of noise is handled in exactly one place.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import datetime

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")
_DATE = r"(?P<date>\d{4}-\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)"
_MILLIS = r"[,.](?P<ms>\d{3})"
_CALLER = r"(?P<logger>[^\]:]+):\d+:[^\]]*"
#: Logger headers, most common first; each names date, time, level and maybe millis, logger.
#: DeepSpeed's logger header: [2026-11-29 14:10:22,818] [INFO] [config.py:678:print] message.
#: A pattern text, also matched in compiled code by the vector path (``dsmon.load.vector``).
DEEPSPEED_HEADER = rf"\[{_DATE}{_MILLIS}\] \[(?P<level>[A-Z]+)\] \[{_CALLER}\] ?"
_LOGGERS = (
    re.compile(DEEPSPEED_HEADER),
    # ezpz / ALCF Megatron-DeepSpeed: [2025-11-10 09:43:36,161992][I][megatron/training_log:402:fn]
    re.compile(rf"\[{_DATE}{_MILLIS}\d*\]\[(?P<level>[A-Z])\]\[{_CALLER}\] ?"),
    # Hydra's job logging: [2023-05-15 14:38:04,635][torch.distributed.distributed_c10d][INFO] - msg
    re.compile(rf"\[{_DATE}{_MILLIS}\]\[(?P<logger>[^\]]+)\]\[(?P<level>[A-Z]+)\] - "),
    # The pre-0.3 logger (DeepSpeedLight, 2020): [INFO 2020-02-06 19:53:56] message
    re.compile(rf"\[(?P<level>[A-Z]+) {_DATE}\] "),
)
#: glog's header, as torch's C++ and torchrun's Python logging print it:
#: ``W1207 15:45:09.671000 6761 torch/distributed/elastic/agent/server/api.py:753] message``
#: (level, month and day, time to the microsecond, thread or process id, source file: line).
_GLOG = re.compile(
    r"(?P<level>[IWEF])(?P<month>\d\d)(?P<day>\d\d) (?P<time>\d\d:\d\d:\d\d)\.(?P<us>\d{6}) +"
    r"\d+ (?P<logger>[^\s\]:]+):\d+\] ?"
)
#: The headers that start with their date, and the one that starts with its level: a line's
#: second character says which can match (``[Rank 0]`` lines try one regex, not four).
_DATED_LOGGERS = _LOGGERS[:3]
_LEVEL_LOGGERS = _LOGGERS[3:]
_LEVELS = {"D": "DEBUG", "I": "INFO", "W": "WARNING", "E": "ERROR", "C": "CRITICAL"}
#: print_dist's and log_dist's ``[Rank N] `` before a message (a pattern text, as above).
RANK_TAG = r"\[Rank (-?\d+)\] "
_RANK = re.compile(RANK_TAG)
_TORCH_RANK = re.compile(r"\[rank(\d+)\]: ?")
_MPI_TAG = re.compile(r"\[\d+,(\d+)\]<std(?:out|err)>: ?")
_KUBE_PREFIX = re.compile(r"\[pod/([^/\]]+)/[^\]]*\] ")
_HOST = re.compile(r"([A-Za-z0-9][A-Za-z0-9_.\-]{0,62}): ")
# A job runner's stamp and host: ``2021-05-29 21:06:36 run6231: `` (the host is kept), or
# ``kubectl logs --timestamps``: ``2024-01-02T03:04:05.123456789Z `` (nothing to keep). A host
# has a digit, a dot or a dash, so a message's first word (``steps: 110 loss: ...``) is none.
_STAMPED_HOST = re.compile(
    r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?Z? "
    r"(?:(?=[\w.\-]*[\d.\-])([A-Za-z0-9][\w.\-]{0,62}): )?"
)
# torch.distributed.run --tee: [default3]:text (local rank, no space after the colon)
_TEE = re.compile(r"\[default(\d+)\]: ?")
# Streams a harness names: accelerate's test runner prints ``stdout: `` / ``stderr: ``.
_STREAMS = frozenset({"stdout", "stderr"})
# Where a second line starts inside a physical line: a logger header, or a print_dist
# ``[Rank N] `` that does not directly follow a logger header (that one is part of log_dist).
# The two halves are also searched apart (``has_embedded``): the lookbehind before the first
# character makes the regex engine try every position of every line, 2 us a line.
_EMBEDDED_HEADER = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d{3}\] \[[A-Z]+\] \[")
_RANK_TIMER = re.compile(r"\[Rank -?\d+\] (?=time \(ms\))")
_EMBEDDED = re.compile(rf"{_EMBEDDED_HEADER.pattern}|(?<!\] ){_RANK_TIMER.pattern}")
#: Line starts that no launcher prefix has (a logger header, ``[Rank N]``, ``[rankN]:``), so
#: the prefix search can be skipped for most lines.
_NO_LAUNCHER_PREFIX = frozenset({"[2", "[R", "[r"})
#: First characters of a line that a paste may have changed (see ``LineCleaner._unpaste``).
_PASTE_STARTS = frozenset(" >`0123456789")
_QUOTE = re.compile(r"(?:>(?: |$))+")
_LINE_NO = re.compile(r" *(\d{1,7})(?: |$)")  # an empty line shows its number only
#: A logger header of any generation follows: ``[2023-09-12 ...`` or ``[INFO 2020-...``.
_HEADER_AHEAD = re.compile(r"\[(?:\d{4}-\d\d-\d\d[ T]|[A-Z]+ \d{4}-)")
_TQDM = re.compile(r"^\s*(?:[\w .:/-]*:\s*)?\d{1,3}%\|")
#: A tqdm bar with its count: `` 25%|██▌       | 10/40 [00:00<00:01, 23.89it/s]``.
_BAR = re.compile(r"\s*(?:[\w .:/-]*:\s*)?\d{1,3}%\|[^|]*\|\s*(\d+)/(\d+)")
#: A progress bar's count and total.
Bar = tuple[int, int]


@dataclass(slots=True)
class LogLine:
    """One logical line with its prefixes taken off.

    ``text`` is the message (after logger header and ``[Rank N]``); ``ts`` the logger's
    timestamp as ISO-8601 (None for print() output); ``rank`` from ``[Rank N]``,
    ``[rankN]:`` or an MPI tag; ``host`` from a launcher prefix; ``logger`` the
    ``file.py`` the logger header names; ``traceback`` is set for torch's ``[rankN]:`` lines.
    ``line``/``offset`` locate the physical line it came from; ``sub`` orders the logical
    lines cut from one physical line. ``bad_ts`` holds a logger timestamp that names no real
    moment (``2026-19-39 25:61:00``): it is dropped, never stored, and the log parser counts it.
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
    bad_ts: str | None = None
    yearless: str | None = None

    @property
    def prefixed(self) -> bool:
        """The line had a header of its own, so it cannot continue a wrapped line."""
        return self.ts is not None or self.rank is not None or self.traceback or bool(self.yearless)

    def date_in_year_of(self, last_ts: str | None) -> None:
        """Give a glog time (``yearless``: no year printed) the year of the run's last stamp.

        The month and day a glog header prints follow the last stamped line's: a month more
        than half a year before that line's comes after New Year's Eve (two processes' lines
        a moment apart around midnight stay in one year). With no stamp before it (the first
        lines of a log) the line keeps no time.
        """
        if self.yearless is None or self.ts is not None or last_ts is None:
            return
        year = int(last_ts[:4]) + (int(self.yearless[:2]) + 6 < int(last_ts[5:7]))
        date = f"{year:04d}-{self.yearless[:5]}"
        if valid_date(date):
            self.ts = f"{date}T{self.yearless[6:]}"


def _looks_like_host(token: str, rest: str, known: set[str]) -> bool:
    """A ``token: `` prefix is a launcher's host label, not a message like ``Config: ...``.

    Host names carry a digit, a dash or a dot (``worker-1``, ``node001``, ``10.0.0.2``, Slurm's
    ``0``), or are followed by a logger/rank header, or were seen as hosts before.
    """
    if token.endswith(("Error", "Exception", "Warning")):
        return False  # ``torch.cuda.OutOfMemoryError: CUDA out of memory`` is an exception line
    if token in known or token in _STREAMS:
        return True
    if rest.startswith("["):
        return True
    return any(c.isdigit() or c in "-." for c in token)


def _strip_launcher(text: str, out: LogLine, known_hosts: set[str]) -> str:
    """Remove host/task prefixes added by pdsh, Slurm, OpenMPI and kubectl (at most two).

    Every prefix starts with ``[`` or a letter or digit: most other lines (indented ones, a
    config dump's JSON) try no regex at all.
    """
    for _ in range(2):
        bracket = text[:1] == "["
        if not bracket and not text[:1].isalnum():
            break
        m = _TEE.match(text) if bracket else None
        if m:
            text = text[m.end() :]  # a local rank: the global rank is not known from it
            continue
        m = _STAMPED_HOST.match(text) if text[:1].isdigit() else None
        if m and (m.group(1) or "T" in m.group(0)):
            out.host = m.group(1) or out.host
            text = text[m.end() :]
            continue
        m = _MPI_TAG.match(text) if bracket else None
        if m:
            out.rank = int(m.group(1))
            text = text[m.end() :]
            continue
        m = _KUBE_PREFIX.match(text) if bracket else None
        if m:
            out.host = m.group(1)
            text = text[m.end() :]
            continue
        m = None if bracket else _HOST.match(text)
        if m and _looks_like_host(m.group(1), text[m.end() :], known_hosts):
            host = m.group(1)
            if not host.isdigit() and host not in _STREAMS:
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
    if text[:1] in "IWEF" and text[1:2].isdigit():
        return _strip_glog(text, out)
    if text.startswith("["):
        text = _strip_logger(text, out)
        if text.startswith("[Rank "):
            m = _RANK.match(text)
            if m:
                out.rank = int(m.group(1))
                text = text[m.end() :]
    return text


def _strip_logger(text: str, out: LogLine) -> str:
    """Take off a logger header of any generation, keeping its time only if it is a real one."""
    for pattern in _DATED_LOGGERS if text[1:2].isdigit() else _LEVEL_LOGGERS:
        m = pattern.match(text)
        if m:
            parts = m.groupdict()
            _set_ts(out, parts["date"], parts["time"], parts.get("ms") or "000")
            out.level = _LEVELS.get(parts["level"], parts["level"])
            out.logger = parts.get("logger")
            return text[m.end() :]
    return text


def _strip_glog(text: str, out: LogLine) -> str:
    """Take off a glog header (torchrun's own lines), keeping its time without its year."""
    m = _GLOG.match(text)
    if m is None or not valid_time(m["time"]):
        return text
    out.yearless = f"{m['month']}-{m['day']}T{m['time']}.{m['us'][:3]}"
    out.level = _LEVELS[m["level"]] if m["level"] != "F" else "FATAL"
    out.logger = m["logger"]
    return text[m.end() :]


def _set_ts(out: LogLine, date: str, time: str, millis: str) -> None:
    """``out.ts`` as ISO-8601, or ``out.bad_ts`` when the date or time cannot exist."""
    if valid_date(date) and valid_time(time):
        out.ts = f"{date}T{time}.{millis}"
    else:
        out.bad_ts = f"{date} {time}"


@functools.lru_cache(maxsize=64)
def valid_date(date: str) -> bool:
    """``YYYY-MM-DD`` names a day of the calendar (a log holds few distinct dates: cached)."""
    try:
        datetime(int(date[:4]), int(date[5:7]), int(date[8:10]))
    except ValueError:
        return False
    return True


def valid_time(time: str) -> bool:
    """``HH:MM:SS`` (two digits each) names a time of day.

    Compared as text, digit by digit: once per logger line, three ``int()`` calls showed in
    the profile of ``dsmon parse``.
    """
    return time[:2] < "24" and time[3] < "6" and time[6] < "6"


def has_embedded(raw: str) -> bool:
    """``_EMBEDDED.search(raw, 1) is not None``, the same answer, several times faster."""
    if _EMBEDDED_HEADER.search(raw, 1) is not None:
        return True
    at = raw.find("[Rank ", 1)
    while at >= 0:
        if raw[max(0, at - 2) : at] != "] " and _RANK_TIMER.match(raw, at) is not None:
            return True
        at = raw.find("[Rank ", at + 1)
    return False


def leading_bar(raw: str) -> Bar | None:
    r"""The progress bar a line begins with (its first part between ``\r``s that is not blank).

    Live, the line after a Trainer's dict is being written for minutes (tqdm redraws it with
    ``\r`` until the next dict); its start already says the dict's step.
    """
    for part in raw.split("\r"):
        if part.strip():
            return _bar_of(part)
    return None


def _bar_of(part: str) -> Bar | None:
    """The count and total of the tqdm bar ``part`` is, if it is one."""
    m = _BAR.match(part)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def _segments(raw: str) -> list[str]:
    r"""Split a physical line into the pieces that are lines of their own.

    ``\\r`` separates tqdm redraws; a logger header or a print_dist timer line in mid-line
    marks a second process's output glued to the first.
    """
    if "\r" not in raw and (raw.find("[", 1) < 0 or not has_embedded(raw)):
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
    """Stateful cleaner: remembers host labels seen, so ``worker:`` is stripped consistently.

    It also undoes what pasting a log into an issue or a notes file does to it: Markdown
    quoting (``> ``), an inline code span's backticks, an editor's line numbers and the
    indentation of a Markdown code block. Line numbers are recognised when they count up by one
    or stand before a logger header; an indentation when it stands before a logger header, and
    it is then taken off the following lines as long as they have it (a table keeps its own).
    """

    def __init__(self) -> None:
        self._hosts: set[str] = set()
        self._indent = 0
        self._number: int | None = None
        #: The progress bar the last physical line began with (before any text), if any.
        self.bar: Bar | None = None
        #: The last progress bar drawn so far, in any line.
        self.last_bar: Bar | None = None

    def clean(self, raw: str, line: int, offset: int | None = None) -> list[LogLine]:
        """Logical lines of one physical line (a trailing newline is ignored)."""
        raw = raw.rstrip("\r\n")
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        self.bar = self._bars(raw) if "%|" in raw else None
        if raw[:1] in _PASTE_STARTS:
            raw = self._unpaste(raw)
        elif self._indent and raw:
            self._indent = 0
        if raw.endswith("`") and raw.count("`") % 2:
            raw = raw[:-1]  # the end of an inline code span the paste began lines before
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

    def plain_line(self) -> None:
        """What :meth:`clean` keeps of a line that starts with a header, ``[Rank N]`` or a word.

        The vector path (``dsmon.load.vector``) reads such lines itself, with no bar, no paste
        and no launcher prefix in them; what the cleaner would remember of one is this: no
        bar begins it, and a paste's indentation ends.
        """
        self.bar = None
        self._indent = 0

    def _bars(self, raw: str) -> Bar | None:
        r"""Note the bars a line draws (tqdm redraws after ``\r``); the one it begins with.

        A Trainer's log dict names no step: the bars around it do (``dsmon.parse.families.trainer``).
        """
        first: Bar | None = None
        text_seen = False
        for part in raw.split("\r"):
            bar = _bar_of(part)
            if bar is None:
                text_seen = text_seen or bool(part.strip())
                continue
            self.last_bar = bar
            if not text_seen and first is None:
                first = bar
        return first

    def _unpaste(self, raw: str) -> str:
        """Take off quoting, backticks, line numbers and block indentation (see the class)."""
        m = _QUOTE.match(raw)
        if m:
            raw = raw[m.end() :]
        if raw.startswith("`"):
            raw = raw.strip("`")
        m = _LINE_NO.match(raw)
        if m:
            number, rest = int(m.group(1)), raw[m.end() :]
            follows = self._number is not None and number == self._number + 1
            self._number = number if follows or _HEADER_AHEAD.match(rest) else None
            if self._number is not None:
                return rest
        return self._dedent(raw)

    def _dedent(self, raw: str) -> str:
        """The line without the paste's indentation (learnt from an indented logger header)."""
        text = raw.lstrip(" ")
        depth = len(raw) - len(text)
        if depth and _HEADER_AHEAD.match(text):
            self._indent = depth
            return text
        if self._indent and depth >= self._indent:
            return raw[self._indent :]
        if text:
            self._indent = 0
        return raw
