"""The per-rank probe's JSON lines (``DSMON_PROBE_DIR/rank-N.jsonl``) as records.

The probe that ``dsmon run`` loads into every rank writes one JSON object per line: a
``rank_step`` line at each optimizer step, a ``heartbeat`` line while the rank runs, and on
rank 0 one ``engine`` line with the engine's config and version (see docs/records.md). This
module turns those lines into :class:`~dsmon.model.records.RankStepRecord`,
:class:`~dsmon.model.records.HeartbeatRecord`, and an ``engine_info`` event with the two config
records the log's config dump would have given. It is a pure function of the text, with the same
``feed``/``finish`` shape as :class:`~dsmon.parse.log.LogParser`, so the collector follows a
probe file exactly as it follows a log. A line that is not valid (cut by a crash mid-write,
a wrong type) is counted with its file, line and field, and skipped.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from dsmon.model.check import fit
from dsmon.model.records import (
    ENGINE_INFO,
    PROBE_PHASES,
    CollectiveStat,
    ConfigRecord,
    EventRecord,
    HeartbeatRecord,
    RankStepRecord,
    Record,
    Source,
)
from dsmon.parse.base import OUT_OF_RANGE, PARSER_ERROR, Diagnostics
from dsmon.parse.families.config_dump import printed_attributes

#: The diagnostics bucket of probe lines that do not parse.
KIND = "probe"


class ProbeLineError(ValueError):
    """One bad field of a probe line."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"field {field!r}: {reason}")


def _number(obj: Mapping[str, Any], name: str) -> float | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ProbeLineError(name, f"not a number >= 0: {value!r}")
    return float(value)


def _signed(obj: Mapping[str, Any], name: str) -> float | None:
    """A number of either sign (a loss can be negative)."""
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProbeLineError(name, f"not a number: {value!r}")
    return float(value)


def _int(obj: Mapping[str, Any], name: str, required: bool = False) -> int | None:
    value = obj.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProbeLineError(name, f"not a count: {value!r}")
    return value


def _time(obj: Mapping[str, Any], name: str) -> str:
    value = obj.get(name)
    try:
        datetime.fromisoformat(str(value))
    except ValueError:
        raise ProbeLineError(name, f"not a time: {value!r}") from None
    return str(value)


def _text(obj: Mapping[str, Any], name: str) -> str | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, str):
        raise ProbeLineError(name, f"not text: {value!r}")
    return value


def _rank_step(obj: Mapping[str, Any], src: Source) -> RankStepRecord:
    return RankStepRecord(
        src=src,
        ts=_time(obj, "ts"),
        step=_int(obj, "step", required=True),
        fwd_ms=_number(obj, "fwd_ms"),
        bwd_ms=_number(obj, "bwd_ms"),
        step_ms=_number(obj, "step_ms"),
        comm_ms=_number(obj, "comm_ms"),
        total_ms=_number(obj, "total_ms"),
        micro_steps=_int(obj, "micro_steps"),
        clock=_text(obj, "clock"),
        skipped_steps=_int(obj, "skipped_steps"),
        loss_scale=_number(obj, "loss_scale"),
        input_ms=_number(obj, "input_ms"),
        loss=_signed(obj, "loss"),
        grad_norm=_number(obj, "grad_norm"),
        collectives=_collectives(obj),
    )


def _collectives(obj: Mapping[str, Any]) -> tuple[CollectiveStat, ...]:
    """A step line's ``collectives`` list (absent from probes before 2026-12-06)."""
    items = obj.get("collectives")
    if items is None:
        return ()
    if not isinstance(items, list):
        raise ProbeLineError("collectives", f"not a list: {items!r}")
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ProbeLineError("collectives", f"not an object: {item!r}")
        op = _text(item, "op")
        if not op:
            raise ProbeLineError("collectives.op", f"no op: {item!r}")
        out.append(
            CollectiveStat(
                op=op,
                bucket_bytes=_int(item, "bucket_bytes"),
                group_size=_int(item, "group_size"),
                calls=_int(item, "calls", required=True) or 0,
                msg_bytes=_int(item, "msg_bytes"),
                time_ms=_number(item, "time_ms"),
            )
        )
    return tuple(out)


def _heartbeat(obj: Mapping[str, Any], src: Source) -> HeartbeatRecord:
    phase = _text(obj, "phase")
    if phase not in PROBE_PHASES:
        raise ProbeLineError("phase", f"unknown phase {phase!r}")
    since = obj.get("phase_since")
    return HeartbeatRecord(
        src=src,
        ts=_time(obj, "ts"),
        step=_int(obj, "step"),
        phase=phase,
        collective=_text(obj, "collective"),
        phase_since=None if since is None else _time(obj, "phase_since"),
        pid=_int(obj, "pid"),
        error=_text(obj, "error"),
    )


def _mapping(obj: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = obj.get(name)
    if value is not None and not isinstance(value, dict):
        raise ProbeLineError(name, f"not an object: {value!r}")
    return value


def _engine_event(obj: Mapping[str, Any], src: Source, ts: str) -> EventRecord:
    """The engine's version, backend and world size as an ``engine_info`` event."""
    version = _mapping(obj, "deepspeed") or {}
    detail: dict[str, Any] = {k: _text(version, k) for k in ("version", "git_hash", "git_branch")}
    facts = {
        "backend": _text(obj, "backend"),
        "world_size": _int(obj, "world_size"),
        "device": _text(obj, "device"),
    }
    detail.update(facts)
    optimizer = _mapping(obj, "optimizer") or {}
    detail["optimizer"] = _text(optimizer, "basic")
    detail["optimizer_wrapper"] = _text(optimizer, "final")
    said = [f"{k.replace('_', ' ')} {v}" for k, v in facts.items() if v is not None]
    message = ", ".join([f"DeepSpeed {detail['version'] or 'version unknown'}", *said])
    return EventRecord(src=src, ts=ts, name=ENGINE_INFO, message=message, detail=detail)


def _engine(obj: Mapping[str, Any], src: Source) -> list[Record]:
    """Rank 0's ``engine`` line: its facts, and its config as the log's dump would give it.

    ``effective`` holds each attribute's printed text, read as the dump's lines are; ``config``
    is the dict the engine was given, what the dump prints as ``json = {...}`` (origin
    ``engine``, preferred right after a dump's own ``user_json``). The records of
    the one line are told apart by their source's ``sub`` (0, 1, 2), as a store keys them so.
    """
    ts = _time(obj, "ts")
    out: list[Record] = [_engine_event(obj, src, ts)]
    printed = _mapping(obj, "effective")
    if printed is not None:
        if not all(isinstance(v, str) for v in printed.values()):
            raise ProbeLineError("effective", "values must be the attributes' printed text")
        attrs, damaged = printed_attributes(dict(printed))
        at = dataclasses.replace(src, sub=1)
        out.append(ConfigRecord(src=at, ts=ts, origin="effective", config=attrs, partial=damaged))
    user = _mapping(obj, "config")
    if user is not None:
        at = dataclasses.replace(src, sub=2)
        out.append(ConfigRecord(src=at, ts=ts, origin="engine", config=user))
    return out


_Builder = Callable[[Mapping[str, Any], Source], list[Record]]


def _one(build: Callable[[Mapping[str, Any], Source], Record]) -> _Builder:
    return lambda obj, src: [build(obj, src)]


_BUILDERS: dict[str, _Builder] = {
    "rank_step": _one(_rank_step),
    "heartbeat": _one(_heartbeat),
    "engine": _engine,
}


def parse_probe_line(
    text: str, run: str, file: str | None = None, node: str | None = None, **pos: int | None
) -> list[Record]:
    """One probe line's records; raises :class:`ProbeLineError` naming the bad field.

    A step or heartbeat line is one record; rank 0's ``engine`` line is an ``engine_info``
    event and the config records of the dump it stands in for.

    Args:
        text: the line (its newline may be there).
        run: the run name.
        file: the file label of the record's source.
        node: the node of the record's source.
        pos: ``line`` and ``offset`` of the line in its file.
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProbeLineError("-", f"not JSON: {exc.msg}") from None
    if not isinstance(obj, dict):
        raise ProbeLineError("-", "not a JSON object")
    build = _BUILDERS.get(obj.get("kind"))  # type: ignore[arg-type]
    if build is None:
        raise ProbeLineError("kind", f"unknown kind {obj.get('kind')!r}")
    rank = _int(obj, "rank", required=True)
    src = Source(run=run, file=file, node=node, rank=rank, **pos)  # type: ignore[arg-type]
    return build(obj, src)


class ProbeParser:
    """Parses one probe file incrementally (the interface of ``LogParser``)."""

    def __init__(self, run: str, file: str | None = None, node: str | None = None) -> None:
        self.run, self.file, self.node = run, file, node
        self._diag = Diagnostics()
        self._lineno = 0

    @property
    def diag(self) -> Diagnostics:
        """The lines that could not be used so far."""
        return self._diag

    def feed(self, raw: str, offset: int | None = None, line: int | None = None) -> list[Record]:
        """Parse one line; a blank line is nothing, a bad one is counted and skipped."""
        self._lineno = line if line is not None else self._lineno + 1
        self._diag.lines += 1
        if not raw.strip():
            return []
        try:
            recs = parse_probe_line(
                raw, self.run, self.file, self.node, line=self._lineno, offset=offset
            )
        except ProbeLineError as exc:
            where = f"{self.file or '-'}:{self._lineno}: {exc}"
            self._diag.note(self._diag.unparsed, KIND, where, raw.strip())
            return []
        except Exception as exc:  # noqa: BLE001 - no line may stop a file (LogParser's rule)
            where = f"{self.file or '-'}:{self._lineno}: {type(exc).__name__}: {exc}"
            self._diag.note(self._diag.unparsed, PARSER_ERROR, where, raw.strip())
            return []
        out = []
        for rec in recs:
            fitted, problems = fit(rec)  # what the store takes (see dsmon.model.check.fit)
            for problem in problems:
                where = f"{self.file or '-'}:{self._lineno}"
                self._diag.note(self._diag.unparsed, OUT_OF_RANGE, where, problem)
            if fitted is not None:
                out.append(fitted)
        self._diag.records += len(out)
        return out

    def finish(self) -> list[Record]:
        """Nothing is held across lines."""
        return []

    def peek(self, partial: str) -> list[Record]:
        """Nothing waits for a line being written."""
        return []

    def handover(self) -> dict[str, Any]:
        """Every probe line names its step and time: nothing carries to the next file."""
        return {}

    def take_over(self, state: Mapping[str, Any]) -> None:
        """Nothing to take over (see :meth:`handover`)."""
