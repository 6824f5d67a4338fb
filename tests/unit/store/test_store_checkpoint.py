"""Live writers' WAL checkpoints run in a thread of their own (``dsmon.store.sqlite``).

The ingest server's writes (``Store.add(..., live=True)``) leave the copying of the WAL into
the database file to a background thread; the writer's own automatic checkpoint stays only
as a backstop. Checked on real stores with the real records of a corpus run: the copy
happens (the database file grows while the writer never checkpoints), nothing is lost, other
writes keep SQLite's default, and a thread that cannot work leaves the writer working.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import time
from pathlib import Path

import pytest

from dsmon.model.records import Record
from dsmon.store import sqlite
from dsmon.store.sqlite import BACKSTOP_PAGES, SQLiteBackend
from dsmon.store.store import Store, open_store


def _copies(records: list[Record], n: int) -> list[Record]:
    """``records`` as if read from ``n`` files: distinct keys, real bodies."""
    return [
        dataclasses.replace(r, src=dataclasses.replace(r.src, file=f"node{i}/train.log"))
        for i in range(n)
        for r in records
    ]


def _backend(store: Store) -> SQLiteBackend:
    assert isinstance(store.backend, SQLiteBackend)
    return store.backend


def _autocheckpoint(store: Store) -> int:
    return int(_backend(store)._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0])


def _until(check: object, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)
    return bool(check())  # type: ignore[operator]


def test_live_writes_are_checkpointed_by_the_thread_not_the_writer(
    tmp_path: Path, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite, "CHECKPOINT_EVERY_S", 0.05)
    path = tmp_path / "s.sqlite"
    store = open_store(path)
    empty = os.path.getsize(path)
    records = _copies(z2_log_records, 20)
    assert store.add(records, live=True) == len(records)
    assert _autocheckpoint(store) == BACKSTOP_PAGES  # far above what this wrote
    # the records reach the database file itself, copied by the thread
    keeper = _backend(store)._checkpoints
    assert keeper is not None and keeper.every_s == 0.05
    assert _until(lambda: keeper.passes >= 1 and os.path.getsize(path) > empty + 500_000)
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM records").fetchone()[0] == len(records)


def test_other_writes_keep_sqlites_own_checkpoints(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = open_store(tmp_path / "s.sqlite")
    store.add(z2_log_records)  # an import, say: no thread
    keeper = _backend(store)._checkpoints
    assert keeper is not None and keeper._thread is None
    assert _autocheckpoint(store) == 1000
    store.close()


def test_close_ends_the_thread(tmp_path: Path, z2_log_records: list[Record]) -> None:
    store = open_store(tmp_path / "s.sqlite")
    store.add(z2_log_records, live=True)
    keeper = _backend(store)._checkpoints
    thread = keeper._thread if keeper else None
    assert thread is not None and thread.is_alive()
    store.close()
    assert not thread.is_alive()


def test_a_thread_that_cannot_open_the_store_leaves_the_writer_working(
    tmp_path: Path,
    z2_log_records: list[Record],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def refused(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    store = open_store(tmp_path / "s.sqlite")
    monkeypatch.setattr(sqlite.sqlite3, "connect", refused)  # (the thread's only)
    half = len(z2_log_records) // 2
    with caplog.at_level(logging.WARNING):
        assert store.add(z2_log_records[:half], live=True) == half
        assert _until(lambda: "WAL checkpoints stay with the writer" in caplog.text)
    assert store.add(z2_log_records[half:], live=True) == len(z2_log_records) - half
    store.close()
