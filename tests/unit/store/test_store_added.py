"""A write's new records as the summary tables take them: from the batch in hand, or read back.

When every row of a batch is new, SQLite numbers them in row order and the per-rank, timer
and skipped-step tables take them from the batch (``dsmon.store.records.added``) instead of
reading them back from ``records``. These tests store real runs both ways and compare every
summary table row for row, check that the batch in hand was used, and that the ids SQLite
gives are the ones the rows are taken under, GPU samples' ids taken in between too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sql_support import sqlite_sql
from store_support import add_in_batches, folder_records

from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.parse.log import parse_text
from dsmon.serve.batch import parse_batch_rows
from dsmon.store import store as store_module
from dsmon.store.records.added import Added
from dsmon.store.records.rows import record_row
from dsmon.store.store import RowBatch, Store, open_store, split

RUN = "r"
#: Every summary table a write fills from its new records.
TABLES = (
    "rank_steps", "rank_comm", "rank_step_stats", "rank_busy", "rank_beats", "rank_beat_steps",
    "rank_stat_blocks", "timer_steps", "timer_optimizer_steps", "timer_names", "timer_blocks",
    "timer_unplaced", "step_skips",
)  # fmt: skip


def real_records() -> list[Record]:
    """A probe run (rank steps, heartbeats), a ZeRO-2 run (timers), an fp16 run (skips)."""
    return [
        *folder_records("probe_torchrun", "probe"),
        *folder_records("z2", "z2"),
        *folder_records("fp16_zero2", "fp16"),
    ]


def tables(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every summary table's rows, sorted."""
    return {t: sorted(sqlite_sql(path, f"SELECT * FROM {t}"), key=repr) for t in TABLES}


@pytest.mark.parametrize("size", [5000, 97])
def test_the_batch_in_hand_fills_the_tables_as_reading_it_back_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    recs = real_records()
    in_hand = []
    real_of_kind = Added.of_kind

    def spy(self: Added, kind: str) -> object:
        found = real_of_kind(self, kind)
        in_hand.append(found is not None)
        return found

    with monkeypatch.context() as m:
        m.setattr(Added, "of_kind", spy)
        with open_store(tmp_path / "hand.sqlite") as store:
            add_in_batches(store, recs, size)
    assert in_hand and all(in_hand)  # every batch was new: none read back

    with monkeypatch.context() as m:
        m.setattr(Added, "of_kind", lambda self, kind: None)
        with open_store(tmp_path / "back.sqlite") as store:
            add_in_batches(store, recs, size)

    hand, back = tables(tmp_path / "hand.sqlite"), tables(tmp_path / "back.sqlite")
    assert all(hand[t] for t in ("rank_steps", "rank_beats", "timer_steps", "step_skips"))
    assert hand == back


def test_a_batch_with_stored_rows_reads_the_new_ones_back(store: Store) -> None:
    recs = folder_records("z2", RUN)
    store.add(recs[: len(recs) // 2])
    before = store.timers.rows(RUN)
    store.add(recs)  # half stored before: the new half read back by id range
    after = store.timers.rows(RUN)
    assert len(after) > len(before)
    fresh = open_store(":memory:")
    fresh.add(recs)
    assert after["step"].tolist() == fresh.timers.rows(RUN)["step"].tolist()


def test_sqlite_numbers_a_new_batch_in_row_order_after_gpu_ids(tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "data" / "z2" / "train.log").read_text()
    rows = [record_row(r) for r in parse_text(text, RUN, "train.log", "n")[0]]
    with open_store(tmp_path / "s.sqlite") as store:
        first = store.backend.write(lambda db: db.insert_records(rows[:10]))
        gpu = store.backend.write(lambda db: db.allocate_ids(7))  # GPU samples take ids
        second = store.backend.write(lambda db: db.insert_records(rows[10:30]))
        again = store.backend.write(lambda db: db.insert_records(rows[25:40]))
    assert (first.new, first.first_id) == (10, 1)
    assert gpu == 11
    assert (second.new, second.first_id) == (20, 18)
    assert (again.new, again.first_id) == (10, None)  # five stored before: no promise
    ids = dict(sqlite_sql(tmp_path / "s.sqlite", "SELECT key, id FROM records"))
    assert [ids[r.key] for r in rows[:30]] == [*range(1, 11), *range(18, 38)]


def test_lines_the_server_decoded_fill_the_tables_as_their_bodies_do(
    tmp_path: Path,
) -> None:
    recs = [*real_records(), *folder_records("probe_monitored", "monitored")]  # collectives
    body = "\n".join(wire.encode(r) for r in recs).encode()
    batch = parse_batch_rows(body)
    summed = ("timer", "rank_step", "step")
    assert len(batch.decoded) == sum(r.KIND in summed for r in recs)
    with open_store(tmp_path / "decoded.sqlite") as store:
        store.add(batch)
    with open_store(tmp_path / "bodies.sqlite") as store:
        store.add(RowBatch(batch.rows, batch.samples))
    decoded, bodies = tables(tmp_path / "decoded.sqlite"), tables(tmp_path / "bodies.sqlite")
    assert all(decoded[t] for t in ("timer_steps", "rank_steps", "rank_comm", "step_skips"))
    assert decoded == bodies


def test_a_rank_step_with_a_collective_of_no_calls_is_read_from_its_body(
    tmp_path: Path,
) -> None:
    """A collective's ``calls`` left out reads as NULL from the body, 0 from the decoded line."""
    recs = [r for r in folder_records("probe_monitored", "probe") if r.KIND == "rank_step"]
    lines = [wire.encode(r) for r in recs if r.collectives][:3]  # type: ignore[attr-defined]
    assert len(lines) == 3
    body = "\n".join(_without_calls(line) for line in lines).encode()
    batch = parse_batch_rows(body)
    assert len(batch.decoded) == 3
    with open_store(tmp_path / "decoded.sqlite") as store:
        store.add(batch)
    with open_store(tmp_path / "bodies.sqlite") as store:
        store.add(RowBatch(batch.rows, batch.samples))
    decoded, bodies = tables(tmp_path / "decoded.sqlite"), tables(tmp_path / "bodies.sqlite")
    assert decoded["rank_comm"] and all(row[6] is None for row in decoded["rank_comm"])
    assert decoded == bodies


def _without_calls(line: str) -> str:
    """A rank step's line with every collective's ``calls`` left out."""
    obj = json.loads(line)
    for c in obj["collectives"]:
        del c["calls"]
    return json.dumps(obj)


def test_a_batch_cut_in_slices_keeps_each_decoded_line_with_its_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(store_module, "BATCH_ROWS", 40)
    rows = [record_row(r) for r in folder_records("z2", "z2")]
    decoded = {i: f"line {i}" for i, r in enumerate(rows) if r.kind == "timer"}
    sliced = list(split(RowBatch(rows, [], decoded)))
    assert len(sliced) > 2
    for start, (part, _, got) in zip(range(0, len(rows), 40), sliced, strict=True):
        assert got == {i - start: v for i, v in decoded.items() if start <= i < start + len(part)}
        assert got and all(part[i].kind == "timer" for i in got)
