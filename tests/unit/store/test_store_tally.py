"""A batch of new rows is added up in Python; the bookkeeping must be what the SQL made of it.

``dsmon.store.records.tally`` stands in for the statements that read a batch back from
``records`` by id range. Two stores get the same real records: one as a batch of new rows
(added up in Python), the other with a row sent again (added up by the statements). Their
``run_kinds`` and ``run_sources`` must be the same, ids included.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dsmon.model.records import Record
from dsmon.store.records import rows
from dsmon.store.records.rows import RecordRow, record_row
from dsmon.store.records.tally import kind_rows, source_rows
from dsmon.store.store import Store, open_store


def _bookkeeping(store: Store) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    return store.backend.read(
        lambda db: (
            [tuple(r) for r in db.rows("SELECT * FROM run_kinds ORDER BY run, kind")],
            [tuple(r) for r in db.rows("SELECT * FROM run_sources ORDER BY run, node, rank")],
        )
    )


def test_rows_added_up_in_python_keep_the_books_the_statements_keep(
    z2_log_records: list[Record], tmp_path: Path
) -> None:
    other = [  # another run, no node or rank, every other record without a time
        dataclasses.replace(
            r,
            src=dataclasses.replace(r.src, run="b", node=None, rank=None),
            ts=None if i % 2 else r.ts,
        )
        for i, r in enumerate(z2_log_records[::3])
    ]
    rows = [record_row(r) for r in [*z2_log_records, *other]]
    assert any(r.ts is None for r in rows) and any(r.step is None for r in rows)
    assert any(r.ts is not None for r in rows) and any(r.step is not None for r in rows)
    with (
        open_store(tmp_path / "python.sqlite") as by_rows,
        open_store(tmp_path / "sql.sqlite") as by_sql,
    ):
        assert by_rows.add(rows) == len(rows)  # every row new: added up in Python
        # one row again, last (an ignored row takes an id): the statements add them up
        assert by_sql.add([*rows, rows[0]]) == len(rows)
        assert _bookkeeping(by_rows) == _bookkeeping(by_sql)
        kinds, sources = _bookkeeping(by_rows)
    assert {k[0] for k in kinds} == {"z2", "b"} and ("b", "", -1) in sources


def _row(ts: str | None, step: int | None, rank: int | None = 0) -> RecordRow:
    return RecordRow(b"k", "r", "timer", step, ts, "n", rank, "f", 1, "{}")


def test_kind_rows_skip_missing_times_and_steps() -> None:
    rows = [
        _row("2026-11-29T14:11:10.0", 4),
        _row(None, None, None),
        _row("2026-11-29T14:11:09.0", 2),
    ]
    assert kind_rows(rows, 10) == [
        ("r", "timer", 3, "2026-11-29T14:11:09.0", "2026-11-29T14:11:10.0", 4, 12)
    ]
    assert source_rows(rows) == [("r", "n", -1), ("r", "n", 0)]


def test_kind_rows_of_interleaved_kinds_keep_falsy_steps() -> None:
    def row(run: str, kind: str, step: int | None, ts: str | None) -> RecordRow:
        return RecordRow(b"k", run, kind, step, ts, None, None, None, None, "{}")

    rows = [
        row("r", "step", None, "2026-11-29T14:11:10"),
        row("q", "step", 0, None),  # step 0 is a step: MAX(step) 0, not NULL
        row("r", "timer", 5, None),
        row("r", "step", 0, "2026-11-29T14:11:08"),
        row("q", "step", None, None),
    ]
    assert sorted(kind_rows(rows, 1)) == [
        ("q", "step", 2, None, None, 0, 5),
        ("r", "step", 2, "2026-11-29T14:11:08", "2026-11-29T14:11:10", 0, 4),
        ("r", "timer", 1, None, None, 5, 3),
    ]
    assert source_rows(rows) == [("q", "", -1), ("r", "", -1)]


def test_the_positions_writers_read_rows_by_name_their_columns() -> None:
    """The writers read the server's plain tuples by position: each is its column's."""
    named = {"key": rows.KEY_AT, "run": rows.RUN_AT, "kind": rows.KIND_AT, "step": rows.STEP_AT,
             "ts": rows.TS_AT, "rank": rows.RANK_AT, "line": rows.LINE_AT, "body": rows.BODY_AT}  # fmt: skip
    assert {name: rows.ROW_COLUMNS[at] for name, at in named.items()} == {n: n for n in named}
