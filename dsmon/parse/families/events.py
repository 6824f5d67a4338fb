"""The log's event sub-parser: one-line events, and worker tracebacks assembled per rank.

The patterns and the records they make are in :mod:`dsmon.parse.families.events`; this module holds the
state across lines. Worker tracebacks span many lines, per rank and interleaved, so one is kept
open per rank and becomes one ``traceback`` event, named after its exception line.
"""

from __future__ import annotations

import ast
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dsmon.model.records import FAILURE_EVENTS, LAUNCH_TEXT, UNSTAMPED, EventRecord, Record
from dsmon.parse.base import NEED_MORE, ParseContext, contains_any
from dsmon.parse.launches import RUN_END_TEXT
from dsmon.parse.lines import LogLine

# ------------------------------------------------------------------------------------------
# Run-level happenings in a log: versions, launcher facts, optimizer choice, crashes, exits.
#
# Each becomes an :class:`EventRecord` (names in ``records.EVENT_NAMES``): the health checks and the
# run timeline read them. This module holds the patterns and the records they make; the
# sub-parser that keeps state across lines (tracebacks, assembled per rank) is
# :mod:`dsmon.parse.families.events`. CUDA out-of-memory and NCCL failures are recognised wherever
# they appear, in a traceback or alone.

_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = r"([\d.]+) ?(B|KiB|MiB|GiB|TiB)"
WATCHDOG = "Watchdog caught collective operation timeout"
WORK = re.compile(r"WorkNCCL\((.*?)\) ran for (\d+) milliseconds before timing out")
_WORK_FIELD = re.compile(r"(\w+(?:\(ms\))?)=([^,]*)")
_WORK_KEYS = {
    "SeqNum": "seq_num",
    "OpType": "op_type",
    "NumelIn": "numel_in",
    "NumelOut": "numel_out",
    "Timeout(ms)": "timeout_ms",
}
_RANK_IN_TEXT = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
_NCCL_ERROR = re.compile(r"NCCL error in: (\S+), (.*?)(?:, NCCL version ([\w.]+))?$")
_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_OOM_FIELDS = {
    "tried_to_allocate_bytes": re.compile(r"Tried to allocate " + _SIZE),
    "total_capacity_bytes": re.compile(
        r"total capaci?ty of " + _SIZE + r"|" + _SIZE + r" total capacity"
    ),
    "free_bytes": re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free"),
}
_GPU = re.compile(r"GPU (\d+)")

_Detail = Callable[[re.Match[str]], dict[str, Any]]


def _literal(text: str) -> Any:
    """A Python literal the launcher printed, or the text when it is not one."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _mics(enabled: str | None, hierarchical: str | None) -> dict[str, bool]:
    """ZeRO-3's ``MiCS is enabled X, Hierarchical params gather Y`` (v0.9+), when printed."""
    if enabled is None or hierarchical is None:
        return {}
    return {"mics": enabled == "True", "hierarchical_params_gather": hierarchical == "True"}


def _what(m: re.Match[str]) -> str | None:
    """C++ ``terminate``'s ``what():``, or why there is none (a thread left running at exit)."""
    return m[3] or (m[2] and m[2].strip())


def _local_rank(cmd: str) -> int | None:
    m = re.search(r"--local_rank=(\d+)", cmd)
    return int(m.group(1)) if m else None


LINE_EVENTS: tuple[tuple[str, re.Pattern[str], _Detail], ...] = (
    (
        "deepspeed_version",
        re.compile(r"^DeepSpeed info: version=([^,]+), git-hash=([^,]*), git-branch=(.*)$"),
        lambda m: {"version": m[1], "git_hash": m[2], "git_branch": m[3].strip()},
    ),
    (
        "dist_backend",
        re.compile(r"^Initializing TorchBackend in DeepSpeed with backend (\w+)"),
        lambda m: {"backend": m[1]},
    ),
    (
        "world_info",
        re.compile(rf"^{LAUNCH_TEXT}: (\{{.*\}})\s*$"),
        lambda m: {"world_info": _literal(m[1])},
    ),
    (
        "world_info",
        re.compile(r"^nnodes=(\d+), num_local_procs=(\d+), node_rank=(\d+)"),
        lambda m: {"nnodes": int(m[1]), "num_local_procs": int(m[2]), "node_rank": int(m[3])},
    ),
    (
        "world_info",
        re.compile(r"^dist_world_size=(\d+)\s*$"),
        lambda m: {"dist_world_size": int(m[1])},
    ),
    (
        "dist_backend",
        re.compile(r"^Initialize (\w+) backend\s*$"),
        lambda m: {"backend": m[1]},
    ),
    (
        "zero_init",
        re.compile(r"^(Reduce|Prefetch|Allgather) bucket size ([\d,]+)\s*$"),
        lambda m: {f"{m[1].lower()}_bucket_size": int(m[2].replace(",", ""))},
    ),
    (
        "zero_init",
        re.compile(r"^Parameter Offload: Total persistent parameters: (\d+) in (\d+) params"),
        lambda m: {"persistent_numel": int(m[1]), "persistent_params": int(m[2])},
    ),
    (
        "traceback",
        re.compile(
            r"^terminate called (?:after throwing an instance of '([^']*)'\s*(?:what\(\):\s*(.*))?"
            r"|(without an active exception)\s*)$"
        ),
        lambda m: {"exception": m[1] or "std::terminate", "native": True, "what": _what(m)},
    ),
    (
        "optimizer",
        re.compile(r"^DeepSpeed (Basic|Final) Optimizer = (\S+)"),
        lambda m: {"which": m[1].lower(), "optimizer": m[2]},
    ),
    (
        "zero_stage",
        re.compile(
            r"^Creating (\S+) ZeRO stage (\d) optimizer"
            r"(?:, MiCS is enabled (True|False), Hierarchical params gather (True|False))?"
        ),
        lambda m: {"dtype": m[1], "stage": int(m[2])} | _mics(m[3], m[4]),
    ),
    (
        "pipeline_stage",
        re.compile(
            r"^RANK=(\d+) STAGE=(\d+) LAYERS=(\d+) \[(\d+), (\d+)\) STAGE_PARAMS=(\d+) \([^)]*\) "
            r"TOTAL_PARAMS=(\d+) \([^)]*\) UNIQUE_PARAMS=(\d+) \([^)]*\)\s*$"
        ),
        lambda m: {
            "rank": int(m[1]),
            "stage": int(m[2]),
            "layers": int(m[3]),
            "first_layer": int(m[4]),
            "end_layer": int(m[5]),
            "stage_params": int(m[6]),
            "total_params": int(m[7]),
            "unique_params": int(m[8]),
        },  # fmt: skip
    ),
    (
        "allocator_flush",
        re.compile(r"^(\d+) pytorch allocator cache flushes since last step"),
        lambda m: {"flushes": int(m[1])},
    ),
    (
        "worker_exit",
        re.compile(r"^Process (\d+) exits successfully\."),
        lambda m: {"pid": int(m[1]), "return_code": 0},
    ),
    (
        "worker_exit",
        re.compile(r"^(.*) exits with return code = (-?\d+)\s*$"),
        lambda m: {"return_code": int(m[2]), "local_rank": _local_rank(m[1]), "cmd": m[1]},
    ),
    (  # torchrun's agent (torch.distributed.elastic), as glog or logging framed it
        "worker_exit",
        re.compile(r"\bfailed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)"),
        lambda m: {
            "return_code": int(m[1]),
            "local_rank": int(m[2]),
            "pid": int(m[3]),
            "launcher": "torchrun",
        },
    ),
    (  # torchrun's agent stopping its workers (a worker failed, or it was stopped itself)
        "worker_exit",
        re.compile(r"\bSending process (\d+) closing signal (SIG[A-Z]+)"),
        lambda m: {"pid": int(m[1]), "killed": True, "signal": m[2], "launcher": "torchrun"},
    ),
    (  # DeepSpeed's launcher (launch.py, 0.5.0 and later) stopped by Ctrl-C or SIGTERM
        "signalled",
        re.compile(r"\bMain process received (SIG[A-Z]+), exiting"),
        lambda m: {"signal": m[1], "launcher": "deepspeed"},
    ),
    (  # torchrun's agent stopped by a signal: it stops its workers, then raises SignalException
        "signalled",
        re.compile(r"\bReceived (\d+) death signal, shutting down workers"),
        lambda m: {"signal": signal_text(int(m[1])), "launcher": "torchrun"},
    ),
    (
        "worker_exit",
        re.compile(r"^Killing subprocess (\d+)"),
        lambda m: {"pid": int(m[1]), "killed": True},
    ),
    (
        "job_end",
        re.compile(rf"^{RUN_END_TEXT} (-?\d+)"),
        lambda m: {"return_code": int(m[1])},
    ),
)


#: Words one of the line events above always holds (or ``INIT_BACKEND``): most lines hold
#: none, and testing for words costs a fraction of trying each pattern in turn.
EVENT_WORDS = (
    "DeepSpeed info: ", "Initializing TorchBackend", "WORLD INFO DICT", "nnodes=",
    "dist_world_size=", "Optimizer = ", "ZeRO stage", "exits ", "Killing subprocess",
    "bucket size", "persistent param", "terminate called", "allocator cache flushes",
    "failed (exitcode: ", "closing signal", "Main process received", "death signal",
    RUN_END_TEXT, "STAGE_PARAMS=",
)  # fmt: skip
INIT_BACKEND = re.compile(r"Initialize \w+ backend")
#: C++ ``terminate`` with nothing after it yet: its ``what():`` line follows.
TERMINATE = re.compile(r"^terminate called after throwing an instance of '[^']*'\s*$")
#: A cheap test for the words every failure message holds (OOM, NCCL errors and timeouts).
_FAILURE_WORDS = ("out of memory", "OutOfMemoryError", "NCCL")


def _bytes(m: re.Match[str] | None) -> int | None:
    """The first size a pattern captured (``20.00 MiB``), in bytes."""
    if m is None:
        return None
    groups = [g for g in m.groups() if g is not None]
    return round(float(groups[0]) * _UNITS[groups[1]])


def oom_detail(text: str) -> dict[str, Any]:
    """What a CUDA OOM message says: the failed allocation, the GPU, its capacity, what was free."""
    detail: dict[str, Any] = {name: _bytes(rx.search(text)) for name, rx in _OOM_FIELDS.items()}
    gpu = _GPU.search(text)
    detail["gpu"] = int(gpu.group(1)) if gpu else None
    return detail


def nccl_detail(text: str) -> dict[str, Any] | None:
    """A watchdog timeout's work item, or an ``NCCL error in:`` location; None if neither."""
    m = WORK.search(text)
    if m:
        return {"kind": "timeout", "ran_for_ms": int(m.group(2)), **_work_fields(m.group(1))}
    m = _NCCL_ERROR.search(text)
    if m:
        return {"kind": "error", "where": m.group(1), "reason": m.group(2), "version": m.group(3)}
    if WATCHDOG in text:  # cut before "ran for": what the work item shows so far
        return {
            "kind": "timeout",
            "ran_for_ms": None,
            **_work_fields(text.partition("WorkNCCL(")[2]),
        }
    return None


def _work_fields(text: str) -> dict[str, Any]:
    """``SeqNum=808, OpType=ALLREDUCE, ..., Timeout(ms)=600000`` as snake_case names."""
    out: dict[str, Any] = {}
    for key, value in _WORK_FIELD.findall(text):
        value = value.strip()
        out[_WORK_KEYS.get(key, key.lower())] = int(value) if value.isdigit() else value or None
    return out


def failure_events(line: LogLine, ctx: ParseContext, k0: int = 0) -> list[Record]:
    """``oom`` / ``nccl_error`` events for a line that reports one (any line, any framing)."""
    text = line.text
    out: list[Record] = []
    if not contains_any(text, _FAILURE_WORDS):
        return out
    rank = line.rank
    if rank is None:
        m = _RANK_IN_TEXT.search(text)
        rank = int(m.group(1)) if m else None
    if _OOM.search(text):
        detail = oom_detail(text)
        out.append(event(ctx, line, k0, "oom", text, detail, rank))
    nccl = nccl_detail(text)
    if nccl is not None:
        out.append(event(ctx, line, k0 + len(out), "nccl_error", text, nccl, rank))
    return out


def event(
    ctx: ParseContext,
    line: LogLine,
    k: int,
    name: str,
    message: str,
    detail: dict[str, Any],
    rank: int | None = None,
) -> EventRecord:
    """The ``k``-th event of a line (``k`` tells several apart in the store, as ``src.sub``).

    A failure or a stop on a line without a time of its own (a worker's traceback, its
    ``KeyboardInterrupt``) takes the last stamped line's, which says only that it came later:
    its detail says ``unstamped``, so a replay position does not show a crash or a stop
    printed after it (``dsmon.view.cutoff``).
    """
    if line.ts is None and (name in FAILURE_EVENTS or name == "signalled"):
        detail = {**detail, UNSTAMPED: True}
    return EventRecord(
        src=ctx.src(line, k, rank=rank),
        ts=ctx.ts(line),
        name=name,
        message=message.strip(),
        detail=detail,
    )


_FRAME = re.compile(r'^\s*File "(.*)", line (\d+), in (.*)$')
_EXC_TYPE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")
#: torchrun's ``SignalException: Process 19830 got signal: 15``.
_TORCHRUN_SIGNAL = re.compile(r"Process (\d+) got signal: (\d+)")
_TB_HEADER = "Traceback (most recent call last):"
_CHAIN_MARKERS = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
#: Lines after an exception line still taken as its message (``Last error:`` ...).
MAX_TAIL = 10
#: Lines a traceback may run without reaching its exception line before it counts as cut.
MAX_TRACEBACK_LINES = 2000


_Key = tuple[bool, int | None]  # (torch ``[rankN]:`` prefix?, rank)


@dataclass(slots=True)
class _Traceback:
    """One traceback being read: frames so far, then its exception line."""

    start: LogLine
    chained: bool = False
    frames: int = 0
    last_frame: tuple[str, int, str] | None = None
    exc: LogLine | None = None
    lines: int = 0
    tail: int = 0
    chain_marker: bool = False


class TracebackAssembler:
    """Turns tracebacks into one ``traceback`` event each, per rank.

    torch prefixes each line of a worker's traceback with ``[rankN]:`` (the cleaner sets
    ``line.traceback`` and ``line.rank``), and ranks' tracebacks interleave, so one is kept open
    per rank; unprefixed tracebacks (older torch, single process) share one key. The event
    is emitted at the exception line, so a live tail shows a crash at once; a chained exception
    (``During handling of ...``) yields a second event with ``chained`` set.
    """

    def __init__(self) -> None:
        self._open: dict[_Key, _Traceback] = {}

    @property
    def open(self) -> bool:
        """A traceback is waiting for its exception line (asked after every line the parser sees)."""
        return bool(self._open) and any(tb.exc is None for tb in self._open.values())

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Events for a traceback line, [] for a claimed one, None for any other line."""
        if line.ts is not None:
            return None
        key = (line.traceback, line.rank)
        tb = self._open.get(key)
        if line.text.rstrip().endswith(_TB_HEADER):
            if tb is not None and tb.exc is None:
                ctx.cut_block("traceback", tb.start)
            chained = tb is not None and tb.chain_marker
            self._open[key] = _Traceback(start=line, chained=chained)
            return []
        if tb is None:
            if not (line.traceback and _FRAME.match(line.text)):
                return None
            tb = self._open[key] = _Traceback(start=line)  # a fragment without its header
        return self._body(tb, key, line, ctx)

    def finish(self, ctx: ParseContext) -> list[Record]:
        """End of input: a traceback without its exception line is cut."""
        for tb in self._open.values():
            if tb.exc is None:
                ctx.cut_block("traceback", tb.start)
        self._open.clear()
        return []

    def _body(
        self, tb: _Traceback, key: _Key, line: LogLine, ctx: ParseContext
    ) -> list[Record] | None:
        text = line.text
        if text.strip() in _CHAIN_MARKERS:
            tb.chain_marker = True
            return []
        if tb.exc is not None:
            return self._tail(tb, key, line)
        tb.lines += 1
        if text.startswith(" ") or not text.strip():
            m = _FRAME.match(text)
            if m:
                tb.frames += 1
                tb.last_frame = (m.group(1), int(m.group(2)), m.group(3))
            elif tb.lines > MAX_TRACEBACK_LINES:
                ctx.cut_block("traceback", tb.start)
                del self._open[key]
            return []
        tb.exc = line
        return self._emit(tb, line, ctx)

    def _tail(self, tb: _Traceback, key: _Key, line: LogLine) -> list[Record] | None:
        """A line after the exception: more of its message, or the traceback is over."""
        text = line.text
        more = not text.startswith("[") if key[0] else not text.strip()
        if more and tb.tail < MAX_TAIL:
            tb.tail += 1
            return []
        del self._open[key]
        return None

    def _emit(self, tb: _Traceback, line: LogLine, ctx: ParseContext) -> list[Record]:
        text = line.text.strip()
        m = _EXC_TYPE.match(text)
        exception = m.group(1) if m else None
        file, lineno, func = tb.last_frame or (None, None, None)
        detail = {
            "exception": exception,
            "frames": tb.frames,
            "file": file,
            "line": lineno,
            "function": func,
            "chained": tb.chained,
            "first_line": tb.start.line,
        }
        if (signalled := _signal_of(exception, text)) is not None:
            return [event(ctx, line, 0, "signalled", text, detail | signalled)]
        out: list[Record] = [event(ctx, line, 0, "traceback", text, detail)]
        return out + failure_events(line, ctx, k0=1)


def _signal_of(exception: str | None, text: str) -> dict[str, Any] | None:
    """The signal a traceback reports, when it ends on one and on no failure of its own.

    Python raises ``KeyboardInterrupt`` on SIGINT (Ctrl-C reaches every process of the job);
    torchrun's agent raises ``SignalException`` for the signal it got (Ctrl-C, the scheduler),
    after stopping its workers. Both are the job being stopped from outside.
    """
    if exception == "KeyboardInterrupt":
        return {"signal": "SIGINT"}
    if exception is not None and exception.endswith("SignalException"):
        m = _TORCHRUN_SIGNAL.search(text)
        if m:
            return {"signal": signal_text(int(m[2])), "launcher": "torchrun", "pid": int(m[1])}
    return None


def signal_text(number: int) -> str:
    """``2`` -> ``SIGINT``, the name a launcher's line uses; ``signal 99`` for an unknown one."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


#: torchrun's failure report (``ChildFailedError``) names the first failed worker after this
#: (``Root Cause:`` in the torch 1.9 elastic launcher's first format).
ROOT_CAUSE = re.compile(r"Root Cause(?: \(first observed failure\))?:")
#: One field of that report's entry: ``  rank      : 1 (local_rank: 1)``.
_REPORT_FIELD = re.compile(r"^\s+(time|host|rank|exitcode|error_file|traceback|msg)\s*: ?(.*?)\s*$")
_REPORT_RANK = re.compile(r"^(\d+) \(local_rank: (\d+)\)")
_REPORT_EXIT = re.compile(r"^(-?\d+) \(pid: (\d+)\)")
_ENTRY = re.compile(r"\[\d+\]:\s*")
#: Lines a root cause entry may take before it counts as cut.
_REPORT_LINES = 12


class RootCause:
    """torchrun's report of the first failed worker, read into one ``worker_exit`` event.

    After a worker fails, torchrun's agent ends on ``ChildFailedError`` and prints which
    worker failed first, with its *global* rank, where its own ``failed (exitcode: -9)
    local_rank: 1`` line names only the local one::

        Root Cause (first observed failure):
        [0]:
          time      : 2026-12-07_13:18:27
          host      : localhost
          rank      : 1 (local_rank: 1)
          exitcode  : -9 (pid: 11752)  (SIGKILL)
        ======================================================
    """

    def __init__(self) -> None:
        self._start: LogLine | None = None
        self._fields: dict[str, str] = {}
        self._lines = 0

    @property
    def open(self) -> bool:
        """An entry is being read."""
        return self._start is not None

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """[] for a line of the entry, its event at its end, None for any other line."""
        text = line.text
        if self._start is None:
            if not text.startswith("Root Cause") or not ROOT_CAUSE.fullmatch(text.strip()):
                return None
            self._start, self._fields, self._lines = line, {}, 0
            return []
        self._lines += 1
        m = _REPORT_FIELD.match(text)
        if m is not None:
            self._fields[m[1]] = m[2]
            return []
        if _ENTRY.fullmatch(text) and not self._fields:
            return []
        if self._lines > _REPORT_LINES or not self._fields:
            return self._cut(ctx)
        return self._emit(ctx)  # the report's closing ``=====`` line

    def finish(self, ctx: ParseContext) -> list[Record]:
        """An entry at the end of input: what it holds, if it names its worker."""
        return self._emit(ctx) if self._start is not None else []

    def _cut(self, ctx: ParseContext) -> list[Record] | None:
        assert self._start is not None
        ctx.cut_block("torchrun_report", self._start)
        self._start = None
        return None

    def _emit(self, ctx: ParseContext) -> list[Record]:
        start, fields = self._start, self._fields
        assert start is not None
        self._start = None
        rank = _REPORT_RANK.match(fields.get("rank", ""))
        code = _REPORT_EXIT.match(fields.get("exitcode", ""))
        if rank is None or code is None:
            ctx.cut_block("torchrun_report", start)
            return []
        detail: dict[str, Any] = {
            "return_code": int(code[1]),
            "rank": int(rank[1]),
            "local_rank": int(rank[2]),
            "pid": int(code[2]),
            "host": fields.get("host") or None,
            "launcher": "torchrun",
            "root_cause": True,
        }
        return [event(ctx, start, 0, "worker_exit", start.text.strip(), detail)]


class EventParser:
    """One-line events plus per-rank traceback assembly and torchrun's failure report.

    ``in_block`` is set while a traceback or the report is open, so its lines reach this
    parser first.
    """

    def __init__(self) -> None:
        self._tracebacks = TracebackAssembler()
        self._report = RootCause()
        self.in_block = False

    def feed(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        """Records for one line, or None when the line is no event."""
        recs = self._report.feed(line, ctx)
        if recs is None:
            recs = self._tracebacks.feed(line, ctx)
        self.in_block = self._tracebacks.open or self._report.open
        if recs is not None:
            return recs
        return self._line_event(line, ctx)

    def finish(self, ctx: ParseContext) -> list[Record]:
        """Blocks still open at the end: complete ones are emitted, cut ones counted."""
        recs = self._tracebacks.finish(ctx) + self._report.finish(ctx)
        self.in_block = False
        return recs

    def _line_event(self, line: LogLine, ctx: ParseContext) -> list[Record] | None:
        text = line.text
        if contains_any(text, EVENT_WORDS) or (
            "Initialize " in text and INIT_BACKEND.search(text) is not None
        ):
            if not ctx.final and TERMINATE.match(text):
                return NEED_MORE  # joined with the next line, kept only if that is ``what():``
            for name, rx, detail in LINE_EVENTS:
                m = rx.search(text)
                if m:
                    return [event(ctx, line, 0, name, text, detail(m))]
        if WATCHDOG in text and WORK.search(text) is None and not ctx.final:
            return NEED_MORE  # terminal-wrapped: the work item continues on the next line
        return failure_events(line, ctx) or None
