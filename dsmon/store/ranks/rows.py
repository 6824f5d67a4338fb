"""The per-rank tables' rows of a write's new probe records, made in Python from their bodies.

The tables of :mod:`dsmon.store.ranks.sql` were filled by ``INSERT ... SELECT`` statements
that read each new ``rank_step`` record's JSON body with the engine's JSON functions, a dozen
fields and a walk of its collectives each, and read the write's id range of ``records`` once
per statement, ten times a batch: 16 % of the ingest server's CPU. Here the write's new probe
records are read once (:func:`dsmon.store.ranks.sql.new_probe_records`: their columns, and a
``rank_step``'s body), each body is decoded once by msgspec in compiled code, and the rows of
``rank_steps``, ``rank_comm`` and the heartbeat tables are made here; the SQL only upserts
them, and recomputes the statistics and roll-ups of the steps they touched from those tables.

Each row is what the statements made of the same records: a field read as the engine's JSON
functions read it (a field left out is NULL, a number is kept as the JSON has it), the last
record of a (run, step, rank) wins, a heartbeat is kept if it is the newest by time, then line,
then id.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from dsmon.store.ranks.sql import BUSY_LEVELS

#: Fields of one element of a ``rank_step``'s ``collectives`` that ``rank_comm`` keeps.
_COLLECTIVE_FIELDS = ("op", "bucket_bytes", "group_size", "calls", "msg_bytes", "time_ms")
#: Fields of a ``rank_step`` body that ``rank_steps`` keeps or computes from.
_STEP_FIELDS = (
    "total_ms", "comm_ms", "skipped_steps", "loss_scale", "fwd_ms", "bwd_ms", "step_ms",
    "input_ms", "loss", "grad_norm",
)  # fmt: skip


def _struct(name: str, fields: Sequence[str], *more: tuple[str, Any, Any]) -> Any:
    """A struct of ``fields``, each ``Any`` and None when left out; other fields are skipped.

    ``Any``: a number stays as the JSON has it (an integer or a float), as the engines' JSON
    functions return it; a field left out is None, as they return NULL.
    """
    return msgspec.defstruct(name, [(f, Any, None) for f in fields] + list(more), gc=False)


_Collective = _struct("_Collective", _COLLECTIVE_FIELDS)
#: ``list[_Collective] | None``, spelled so that a type checker takes a struct made at run time.
_COLLECTIVES = types.GenericAlias(list, (_Collective,)) | None
_StepBody = _struct("_StepBody", _STEP_FIELDS, ("collectives", _COLLECTIVES, None))

_decode_step = msgspec.json.Decoder(_StepBody).decode
#: A body as stored (anything else is the line as the ingest server decoded it).
_STORED = (str, bytes, memoryview)


@dataclasses.dataclass
class ProbeRows:
    """What one write's new probe records bring to the per-rank tables."""

    #: ``rank_steps`` rows (``sql.STEP_COLUMNS``), the last record of each (run, step, rank).
    steps: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    #: ``rank_comm`` rows (``sql.COMM_KEYS`` then ``sql.COMM_VALUES``) of the records' timed collectives.
    comm: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    #: ``rank_beats`` rows (``sql.BEAT_COLUMNS``): each rank's newest heartbeat of the write.
    beats: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    #: ``rank_beat_steps`` rows: the newest heartbeat of each (run, rank, step).
    beat_steps: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)

    def touched(self) -> list[tuple[str, int]]:
        """The (run, step) pairs whose ``rank_step_stats`` row the write changes, sorted."""
        return sorted({(row[0], row[1]) for row in self.steps})

    def buckets(
        self, width: int, touched: Sequence[tuple[str, int]] | None = None
    ) -> list[tuple[int, str, int, int]]:
        """The ``rank_busy`` buckets of ``width`` steps the write touched, sorted.

        Each as the parameters of :func:`dsmon.store.ranks.sql.update_busy`: the bucket, the
        run, and the range of what it sums: its steps at the finest level, else its eight
        buckets of the level below. ``touched``: :meth:`touched`, if the caller has it.
        """
        span = width if width == BUSY_LEVELS[0] else 8
        out = set()
        for run, step in self.touched() if touched is None else touched:
            b = _bucket(step, width)
            out.add((b, run, b * span, (b + 1) * span))
        return sorted(out)


def _bucket(step: int, width: int) -> int:
    """``step / width`` as SQL divides integers: towards zero."""
    q = abs(step) // width
    return q if step >= 0 else -q


def probe_rows(found: Iterable[Sequence[Any]]) -> ProbeRows:
    """The per-rank tables' rows of the new probe records ``found``, in id order.

    ``found``: rows of :func:`dsmon.store.ranks.sql.new_probe_records` (kind, run, step,
    rank, id, ts, line, and the body of a ``rank_step``, or its line as the ingest server
    decoded and checked it: the record's fields, a float field a float).
    """
    steps: dict[tuple[str, int, int], tuple[Any, ...]] = {}
    comm: dict[tuple[str, int, str, int, int], list[Any]] = {}
    beats: dict[tuple[str, int], tuple[Any, ...]] = {}
    beat_steps: dict[tuple[str, int, int], tuple[Any, ...]] = {}
    for kind, run, step, rank, rec_id, ts, line, body in found:
        if kind == "rank_step":
            parsed = _decode_step(body) if isinstance(body, _STORED) else body
            steps[(run, step, rank)] = step_row(run, step, rank, rec_id, ts, parsed)
            if parsed.collectives:
                _add_comm(comm, run, step, rec_id, parsed.collectives)
            continue
        line = line or 0
        _keep_newest(beats, (run, rank), (run, rank, rec_id, ts, line))
        if step is not None:
            _keep_newest(beat_steps, (run, rank, step), (run, rank, step, rec_id, ts, line))
    return ProbeRows(
        list(steps.values()),
        [(*key, *vals) for key, vals in comm.items()],
        list(beats.values()),
        list(beat_steps.values()),
    )


def step_row(
    run: str, step: int, rank: int, rec_id: int, ts: str | None, body: Any
) -> tuple[Any, ...]:
    """The ``rank_steps`` row of one ``rank_step`` record (``sql.STEP_COLUMNS``).

    Busy time is ``total_ms - comm_ms`` (``comm_ms`` None: 0), at least 0; ``waited`` says
    whether the rank blocked in a collective at all; ``coll_ms`` sums the ``time_ms`` of its
    timed collectives (None when none has one).
    """
    total, comm = body.total_ms, body.comm_ms
    if total is None:
        busy = None
    else:
        busy = total - (0 if comm is None else comm)
        if busy < 0:
            busy = 0
    coll = None
    for c in body.collectives or ():
        t = c.time_ms
        if t is not None:
            coll = t if coll is None else coll + t
    return (
        run, step, rank, rec_id, ts, busy, total, 0 if comm is None else 1, body.skipped_steps,
        body.loss_scale, body.fwd_ms, body.bwd_ms, body.step_ms, body.input_ms, body.loss,
        body.grad_norm, coll,
    )  # fmt: skip


def _add_comm(
    comm: dict[tuple[str, int, str, int, int], list[Any]],
    run: str,
    step: int,
    rec_id: int,
    collectives: list[Any],
) -> None:
    """Fold a record's timed collectives into ``comm``: id, calls, bytes, least, most time.

    Per (run, step, op, size bucket, group size; -1 when unknown): the newest id, the most
    calls and bytes, the least and the most time (collectives without a time are not kept).
    """
    for c in collectives:
        t = c.time_ms
        if t is None:
            continue
        key = (
            run,
            step,
            c.op,
            -1 if c.bucket_bytes is None else c.bucket_bytes,
            -1 if c.group_size is None else c.group_size,
        )
        acc = comm.get(key)
        if acc is None:
            comm[key] = [rec_id, c.calls, c.msg_bytes, t, t]
            continue
        acc[0] = rec_id  # records come in id order
        acc[1] = _max(acc[1], c.calls)
        acc[2] = _max(acc[2], c.msg_bytes)
        acc[3] = min(acc[3], t)
        acc[4] = max(acc[4], t)


def _max(a: Any, b: Any) -> Any:
    """SQL's MAX of two values: None (NULL) is skipped."""
    if a is None:
        return b
    if b is None:
        return a
    return a if a >= b else b


def _keep_newest(kept: dict[Any, tuple[Any, ...]], key: Any, row: tuple[Any, ...]) -> None:
    """Keep ``row`` under ``key`` if it is the newest heartbeat: by time, then line, then id.

    Rows come in id order, so the later of two with the same time and line wins.
    """
    old = kept.get(key)
    if old is None or (row[-2], row[-1]) >= (old[-2], old[-1]):
        kept[key] = row
