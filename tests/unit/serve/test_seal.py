"""The ingest server keeps the sealed pages of a run sent live (``dsmon.serve.seal``).

A dashboard following a live run never reads a whole page, so without the server no page of
a run sent live would be kept, and its first look later would parse all its JSON.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from server_support import TOKEN, post
from store_support import fetched_pages, frame_from_records, kept_chunks, kept_tails

from dsmon.model.records import Record
from dsmon.serve import seal
from dsmon.serve.run import start_ingest_server
from dsmon.serve.seal import PageSealer
from dsmon.store.errors import StoreError
from dsmon.store.frames import pages as frame_pages
from dsmon.store.records.runs import RunInfo
from dsmon.store.sqlite import SQLiteBackend
from dsmon.store.store import Store, open_store


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 7 rows read by Arrow, and a pass every 0.1 s."""
    monkeypatch.setattr(frame_pages, "FRAME_PAGE_ROWS", 7)
    monkeypatch.setattr(frame_pages, "ARROW_MIN_ROWS", 1)
    monkeypatch.setattr(seal, "SEAL_EVERY_S", 0.1)


def _kept_now(store: Store) -> int:
    """Pages kept so far."""
    return len(kept_chunks(store))


def _until(check: object, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)


@pytest.mark.slow  # real time: waits for the server's background passes
def test_the_server_keeps_the_pages_of_a_run_sent_live(
    tmp_path: Path, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.sqlite"
    half = len(z2_log_records) // 2
    with start_ingest_server(str(path), TOKEN, port=0) as srv:
        assert post(srv, z2_log_records[:half])[0] == 200
        reader = open_store(path)
        _until(lambda: _kept_now(reader) > 0)
        first = _kept_now(reader)
        assert post(srv, z2_log_records[half:])[0] == 200
        _until(lambda: _kept_now(reader) > first)
        time.sleep(0.5)  # a pass may be on its way through the kinds
        _until(lambda: kept_tails(reader))  # the run stopped: a pass later, its last pages
    kept = kept_chunks(reader)
    assert {k for k, *_ in kept} >= {"timer", "step"}
    reads = fetched_pages(reader, monkeypatch)
    for kind in ("timer", "step"):
        pd.testing.assert_frame_equal(
            reader.frames.frame("z2", kind), frame_from_records(reader, "z2", kind)
        )
    assert sorted(reads) == [("step", 0), ("timer", 0)]  # a dashboard's first look: no JSON
    reader.close()


def test_a_run_that_stops_growing_gets_its_last_pages_kept_once(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = open_store(tmp_path / "s.sqlite")
    sealer = PageSealer(store)
    store.add(z2_log_records)
    assert sealer.seal() > 0 and not kept_tails(store)  # it grew: full pages only
    tails = sealer.seal()  # it did not grow since: each kind's last page Arrow reads
    assert tails == len(kept_tails(store)) > 0
    assert sealer.seal() == 0 and len(kept_tails(store)) == tails  # once
    store.close()


def test_no_pass_without_a_write_and_none_after_stop(tmp_path: Path) -> None:
    store = open_store(tmp_path / "s.sqlite")
    sealer = PageSealer(store, every_s=0.05)
    sealer.stop()
    sealer.wrote()  # after stop: no thread starts
    assert sealer._thread is None
    store.close()


class _Down(Store):
    def runs(self) -> list[RunInfo]:
        raise StoreError("store x: connection refused")


def test_a_store_error_ends_the_pass_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = _Down(SQLiteBackend(tmp_path / "s.sqlite"))
    with caplog.at_level(logging.WARNING):
        assert PageSealer(store).seal() == 0
    expected = "keeping sealed pages failed, next pass retries: store x: connection refused"
    assert expected in caplog.text
    store.close()


class _ClosedUnder(Store):
    """A store closed while a pass works on it (the server stopping during a long pass)."""

    sealer: PageSealer

    def runs(self) -> list[RunInfo]:
        self.sealer._stop.set()
        raise sqlite3.ProgrammingError("Cannot operate on a closed database.")


def test_a_pass_cut_short_by_shutdown_ends_quietly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _ClosedUnder(SQLiteBackend(tmp_path / "s.sqlite"))
    sealer = store.sealer = PageSealer(store, every_s=0.01)
    errors: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    sealer.wrote()
    assert sealer._thread is not None
    sealer._thread.join(5)
    assert not sealer._thread.is_alive() and errors == []
    store.close()
