"""The per-rank tables' rows made in Python of a write's new probe records (store/ranks/rows.py).

``test_rank_tables.py`` compares the tables with the records' figures on real probe output;
these pin what real output rarely shows: fields left out, a step's record sent again, a
collective without a time, heartbeats with the same time.
"""

from __future__ import annotations

import json
from typing import Any

from dsmon.store.ranks.rows import probe_rows
from dsmon.store.ranks.sql import BUSY_LEVELS, STEP_COLUMNS


def step(rec_id: int, step_no: int, rank: int, **body: Any) -> tuple[Any, ...]:
    """A row of ``new_probe_records`` for a ``rank_step``."""
    text = json.dumps({"kind": "rank_step", "rank": rank, "step": step_no, **body})
    return ("rank_step", "r", step_no, rank, rec_id, "2026-12-06T10:00:00", None, text)


def beat(rec_id: int, rank: int, ts: str, line: int | None, step_no: int | None) -> tuple[Any, ...]:
    """A row of ``new_probe_records`` for a heartbeat."""
    return ("heartbeat", "r", step_no, rank, rec_id, ts, line, None)


def test_a_step_row_reads_fields_left_out_as_null_and_keeps_busy_time_at_least_0() -> None:
    made = probe_rows(
        [
            step(1, 5, 0, total_ms=10.0, comm_ms=4.0, fwd_ms=3, loss=2.5),
            step(2, 5, 1, total_ms=3.0, comm_ms=7.0),
            step(3, 6, 0),
        ]
    )
    rows = [dict(zip(STEP_COLUMNS, r, strict=True)) for r in made.steps]
    assert [(r["step"], r["rank"], r["busy_ms"], r["waited"]) for r in rows] == [
        (5, 0, 6.0, 1),
        (5, 1, 0, 1),
        (6, 0, None, 0),
    ]
    assert rows[0]["fwd_ms"] == 3 and rows[0]["loss"] == 2.5 and rows[0]["bwd_ms"] is None
    assert rows[2]["coll_ms"] is None and rows[2]["skipped_steps"] is None
    assert made.touched() == [("r", 5), ("r", 6)]


def test_the_last_record_of_a_step_and_rank_wins() -> None:
    made = probe_rows([step(1, 5, 0, total_ms=10.0), step(2, 5, 0, total_ms=12.0)])
    assert [(r[3], r[6]) for r in made.steps] == [(2, 12.0)]


def test_collectives_fold_by_op_bucket_and_group_and_untimed_ones_are_left_out() -> None:
    coll = [
        {"op": "all_reduce", "bucket_bytes": 1024, "group_size": 2, "calls": 3,
         "msg_bytes": 3072, "time_ms": 1.5},
        {"op": "all_reduce", "calls": 1, "time_ms": 0.5},
        {"op": "all_gather", "calls": 2, "msg_bytes": 10},
    ]  # fmt: skip
    later = [{"op": "all_reduce", "bucket_bytes": 1024, "group_size": 2, "calls": 2,
              "time_ms": 4.0}]  # fmt: skip
    made = probe_rows(
        [step(1, 5, 0, total_ms=9.0, collectives=coll), step(2, 5, 1, collectives=later)]
    )
    assert sorted(made.comm) == [
        ("r", 5, "all_reduce", -1, -1, 1, 1, None, 0.5, 0.5),
        ("r", 5, "all_reduce", 1024, 2, 2, 3, 3072, 1.5, 4.0),
    ]
    assert [r[-1] for r in made.steps] == [2.0, 4.0]  # coll_ms: the timed ones summed


def test_the_newest_heartbeat_is_by_time_then_line_then_id() -> None:
    made = probe_rows(
        [
            beat(1, 0, "2026-12-06T10:00:02", 7, 3),
            beat(2, 0, "2026-12-06T10:00:01", 9, 3),
            beat(3, 0, "2026-12-06T10:00:02", None, 4),
            beat(4, 0, "2026-12-06T10:00:02", 7, None),
            beat(5, 1, "2026-12-06T10:00:00", 1, 3),
        ]
    )
    assert made.beats == [
        ("r", 0, 4, "2026-12-06T10:00:02", 7),
        ("r", 1, 5, "2026-12-06T10:00:00", 1),
    ]
    assert sorted(made.beat_steps) == [
        ("r", 0, 3, 1, "2026-12-06T10:00:02", 7),
        ("r", 0, 4, 3, "2026-12-06T10:00:02", 0),
        ("r", 1, 3, 5, "2026-12-06T10:00:00", 1),
    ]
    assert made.steps == [] and made.touched() == []


def test_busy_buckets_name_what_each_level_sums() -> None:
    made = probe_rows([step(1, 7, 0), step(2, 8, 0), step(3, 70, 1)])
    finest, coarser = BUSY_LEVELS[0], BUSY_LEVELS[1]
    assert made.buckets(finest) == [(0, "r", 0, 8), (1, "r", 8, 16), (8, "r", 64, 72)]
    assert made.buckets(coarser) == [(0, "r", 0, 8), (1, "r", 8, 16)]  # of the 8-step level
