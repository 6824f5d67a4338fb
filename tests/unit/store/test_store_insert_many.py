"""An INSERT of one row run for many rows: SQLite carries them many to a statement.

``Db.insert_many`` is what the summary tables' upserts and the GPU staging run a batch's rows
with. SQLite's runs them 200, 50, 10 and 1 to a statement; each row must do what it does
alone, in order: an upsert of a key that a row before it in the same statement inserted
updates that row (the highest id wins here, as in the timer tables), an ``OR IGNORE`` keeps
the first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dsmon.store.backend import Db
from dsmon.store.sqlite import many_values
from dsmon.store.store import open_store
from dsmon.store.timers import sql

#: Timer rows whose keys repeat within a statement and across statements, ids in no order.
ROWS = [
    ("r", step % 37, step % 3, (step * 7919) % 1000, float(step), None, 1.5, None, 2.0)
    for step in range(263)  # 200 + 50 + 10 + 1 + 1 + 1 rows: every size of statement
]
#: An ``OR IGNORE`` of rows whose keys repeat: the first of each key stays.
FIRST = "INSERT OR IGNORE INTO step_skips (run, step, id, skipped) VALUES (?, ?, ?, ?)"
SKIPS = [(f"r{i % 41}", i, 263 - i, float(i)) for i in range(263)]


def filled(path: Path, many: bool) -> list[tuple[object, ...]]:
    """The timer tables after the rows went in, many to a statement or one at a time."""
    with open_store(path) as store:

        def write(db: Db) -> None:
            if many:
                db.insert_many(sql.upsert("global"), ROWS)
                db.insert_many(FIRST, SKIPS)
            else:
                db.execute_many(sql.upsert("global"), ROWS)
                db.execute_many(FIRST, SKIPS)

        store.backend.write(write)
        return store.backend.read(
            lambda db: (
                db.rows("SELECT * FROM timer_steps ORDER BY run, step, rank")
                + db.rows("SELECT * FROM step_skips ORDER BY run")
            )
        )


def test_rows_many_to_a_statement_do_what_they_do_one_at_a_time(tmp_path: Path) -> None:
    many, one = filled(tmp_path / "many.sqlite", True), filled(tmp_path / "one.sqlite", False)
    assert len(many) == 111 + 41  # (step % 37, step % 3) keys, and runs
    assert many == one


def test_only_an_insert_of_one_row_of_values_is_taken() -> None:
    assert many_values(FIRST, 2).endswith("VALUES (?, ?, ?, ?), (?, ?, ?, ?)")
    with pytest.raises(ValueError, match="not an INSERT"):
        many_values("INSERT INTO t SELECT * FROM u", 2)
