"""Run-level happenings in a log: versions, launcher facts, optimizer choice, crashes, exits.

Each becomes an :class:`EventRecord` (names in ``records.EVENT_NAMES``): the health checks and the
run timeline read them. This module holds the patterns and the records they make; the
sub-parser that keeps state across lines (tracebacks, assembled per rank) is
:mod:`dsmon.parse.event_parser`. CUDA out-of-memory and NCCL failures are recognised wherever
they appear, in a traceback or alone.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any

from dsmon.model.records import LAUNCH_TEXT, EventRecord, Record
from dsmon.parse.base import ParseContext, contains_any
from dsmon.parse.lines import LogLine

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
    (
        "worker_exit",
        re.compile(r"^Killing subprocess (\d+)"),
        lambda m: {"pid": int(m[1]), "killed": True},
    ),
)


#: Words one of the line events above always holds (or ``INIT_BACKEND``): most lines hold
#: none, and testing for words costs a fraction of trying each pattern in turn.
EVENT_WORDS = (
    "DeepSpeed info: ", "Initializing TorchBackend", "WORLD INFO DICT", "nnodes=",
    "dist_world_size=", "Optimizer = ", "ZeRO stage", "exits ", "Killing subprocess",
    "bucket size", "persistent param", "terminate called", "allocator cache flushes",
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
    """The ``k``-th event of a line (``k`` tells several apart in the store, as ``src.sub``)."""
    return EventRecord(
        src=ctx.src(line, k, rank=rank),
        ts=ctx.ts(line),
        name=name,
        message=message.strip(),
        detail=detail,
    )
