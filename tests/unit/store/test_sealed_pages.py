"""Sealed pages kept as Arrow tables: later readers decode them instead of the JSON.

A kept page must give the frame the JSON gives, be found again by the next reader of the
same page, go stale when a restamp changes the run's rows, and never be trusted when it does
not decode or was written for other columns. Keeping one is best effort: a reader that cannot
write (another writer holds the lock) still gets its frame.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from sql_support import store_sql
from store_support import (
    PAGE,
    fetched_pages,
    frame_from_records,
    kept_chunks,
    kept_tails,
    restamped,
)

from dsmon.model.records import Record
from dsmon.store import sqlite
from dsmon.store.frames import pages as frame_pages
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import Store, open_store

KINDS = ("timer", "step")


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages of 7 rows, read by Arrow: the corpus run then fills several pages per kind."""
    monkeypatch.setattr(frame_pages, "FRAME_PAGE_ROWS", PAGE)
    monkeypatch.setattr(frame_pages, "ARROW_MIN_ROWS", 1)


def _body_reads(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds of every read of JSON bodies the store makes from now on."""
    reads: list[str] = []
    real = store._log.select_bodies

    def counting(flt: RecordFilter) -> list[tuple[int, bytes]]:
        reads.append(str(flt.kind))
        return real(flt)

    monkeypatch.setattr(store._log, "select_bodies", counting)
    return reads


def test_full_pages_are_kept_and_read_back_as_the_same_frames(
    store: Store, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add(z2_log_records)
    first = {kind: store.frames.frame("z2", kind) for kind in KINDS}
    kept = kept_chunks(store)
    for kind in KINDS:
        full = [k for k, _, rows, _ in kept if k == kind and rows == PAGE]
        assert len(full) == len(first[kind]) // PAGE > 0
    # a tail for each kind whose last page is not full (timers; the 7 steps fill theirs)
    assert (
        [k for k, _ in kept_tails(store)] == [k for k in KINDS if len(first[k]) % PAGE] == ["timer"]
    )
    reads = fetched_pages(store, monkeypatch)
    for kind in KINDS:
        again = store.frames.frame("z2", kind)
        pd.testing.assert_frame_equal(again, first[kind])
        pd.testing.assert_frame_equal(again, frame_from_records(store, "z2", kind))
    # no JSON: each kind's tail is used once a probe finds nothing after it
    assert sorted(reads) == sorted((kind, 0) for kind in KINDS)


def test_a_tail_is_used_until_its_kind_grows_and_dropped_once_its_page_fills(
    store: Store, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    timers = [r for r in z2_log_records if r.KIND == "timer"]
    cut = 3 * PAGE + 2  # three full pages and a tail of two
    store.add(timers[:cut])
    assert len(store.frames.frame("z2", "timer")) == cut
    (tail,) = kept_tails(store)
    store.add(timers[cut : cut + 1])  # the last page grows by one: the tail is stale
    reads = fetched_pages(store, monkeypatch)
    pd.testing.assert_frame_equal(
        store.frames.frame("z2", "timer"), frame_from_records(store, "z2", "timer")
    )
    assert reads == [("timer", 1), ("timer", 3)]  # the probe finds a row: the page from JSON
    assert kept_tails(store) == [tail]  # kept again, three rows now
    reads.clear()
    pd.testing.assert_frame_equal(
        store.frames.frame("z2", "timer"), frame_from_records(store, "z2", "timer")
    )
    assert reads == [("timer", 0)]
    store.add(timers[cut + 1 : 4 * PAGE + 1])  # the page fills, one more row after it
    pd.testing.assert_frame_equal(
        store.frames.frame("z2", "timer"), frame_from_records(store, "z2", "timer")
    )
    assert len([k for k, _, rows, _ in kept_chunks(store) if rows == PAGE]) == 4
    assert kept_tails(store) == [
        ("timer", max(a for _, a, _, _ in kept_chunks(store)))
    ]  # the new one


def test_a_read_from_a_later_id_keeps_no_tail(store: Store, z2_log_records: list[Record]) -> None:
    """A refresh reads from the last id it saw: a tail kept there would never be read."""
    store.add(z2_log_records)
    timers = store.frames.frame("z2", "timer")
    tails = kept_tails(store)
    for at in (2, len(timers) // 2, len(timers) - 3):  # off the pages' grid
        after = int(timers["id"].iloc[at])
        pages = list(store.frames.pages("z2", "timer", after_id=after))
        got = pd.concat(pages, ignore_index=True)  # (the timer columns of these rows)
        want = timers.iloc[at + 1 :].reset_index(drop=True)[got.columns]
        assert len(got) == len(want) > 0
        pd.testing.assert_frame_equal(got, want, check_dtype=False)
        assert kept_tails(store) == tails


def test_pages_of_the_dashboard_reader_come_from_kept_pages_too(
    store: Store, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    store.add(z2_log_records)
    whole = store.frames.frame("z2", "timer")
    reads = _body_reads(store, monkeypatch)
    pages = list(store.frames.pages("z2", "timer"))
    assert [len(p) for p in pages[:-1]] == [PAGE] * (len(whole) // PAGE)
    pd.testing.assert_frame_equal(pd.concat(pages, ignore_index=True), whole)
    assert reads == ["timer"]


def test_the_dashboards_first_look_keeps_and_uses_tails(
    store: Store, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard reads a kind from id 0, not None: that is a kind's start too."""
    from dsmon.view.cache import RunFrames

    store.add(z2_log_records)
    first = RunFrames(store, "z2").frame("timer")
    assert [k for k, _ in kept_tails(store)] == ["timer"]
    reads = fetched_pages(store, monkeypatch)
    pd.testing.assert_frame_equal(RunFrames(store, "z2").frame("timer"), first)
    assert reads == [("timer", 0)]  # the probe after the tail, no JSON


def test_a_restamp_makes_the_runs_kept_pages_stale(
    store: Store, z2_log_records: list[Record]
) -> None:
    first, again = restamped(z2_log_records)
    store.add([*z2_log_records, *first])
    stepless = store.frames.frame("z2", "timer")
    assert stepless["step"].isna().any()
    assert {r for *_, r in kept_chunks(store)} == {0}
    store.add(again)  # the late copies bring the steps: rows in sealed pages change
    assert store.restamps("z2") > 0
    filled = store.frames.frame("z2", "timer")
    assert filled["step"].notna().all()
    pd.testing.assert_frame_equal(filled, frame_from_records(store, "z2", "timer"))
    assert {r for k, _, _, r in kept_chunks(store) if k == "timer"} == {store.restamps("z2")}


@pytest.mark.parametrize(
    "spoil",
    ["UPDATE sealed_pages SET data = ?", "UPDATE sealed_pages SET page_format = 'other'"],
)
def test_a_kept_page_that_does_not_decode_or_is_of_other_columns_is_not_used(
    spoil: str,
    store: Store,
    z2_log_records: list[Record],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store.add(z2_log_records)
    first = store.frames.frame("z2", "timer")
    store_sql(store, spoil, [(b"not arrow",)] if "?" in spoil else [])
    reads = _body_reads(store, monkeypatch)
    with caplog.at_level(logging.WARNING):
        pd.testing.assert_frame_equal(store.frames.frame("z2", "timer"), first)
    assert len(reads) == len(first) // PAGE + 1  # every page from JSON again
    assert ("does not decode" in caplog.text) == ("?" in spoil)
    reads.clear()
    store.frames.frame("z2", "timer")  # the JSON reads kept good pages in their place
    assert reads == ["timer"]


def test_a_reader_that_cannot_write_still_gets_its_frame(
    tmp_path: Path, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ingest server holds the lock: the page waits a moment, not the writers' 30 s."""
    path = tmp_path / "s.sqlite"
    store = open_store(path)
    store.add(z2_log_records)
    monkeypatch.setattr(sqlite, "BRIEF_WAIT_MS", 50)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        frame = store.frames.frame("z2", "timer")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    pd.testing.assert_frame_equal(frame, frame_from_records(store, "z2", "timer"))
    assert not kept_chunks(store)
    store.frames.frame("z2", "timer")  # the lock is free now: the next reader keeps them
    assert kept_chunks(store)
    store.close()


def test_an_import_keeps_the_sealed_pages_of_what_it_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``dsmon import`` reads each sealed page once: the first look after it decodes them."""
    from dashboard_support import DATA

    from cli.import_ import import_and_summarise

    store = open_store(tmp_path / "s.sqlite")
    import_and_summarise(store, [DATA / "z2"], run="imported")
    assert {k for k, *_ in kept_chunks(store)} >= set(KINDS)
    partial = {k for k, n in store.runs()[0].kinds.items() if n % PAGE}
    # the last pages too, those Arrow reads (not events, configs, flops profiles: JSON)
    assert {"timer", "throughput"} <= {k for k, _ in kept_tails(store)} <= partial
    reads = fetched_pages(store, monkeypatch)
    for kind in KINDS:
        pd.testing.assert_frame_equal(
            store.frames.frame("imported", kind), frame_from_records(store, "imported", kind)
        )
    assert sorted(reads) == sorted((kind, 0) for kind in KINDS)  # no JSON at all
    store.close()


def test_keeping_again_keeps_only_the_pages_sealed_since(
    store: Store, z2_log_records: list[Record], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kept pages are passed over by their ids: a growing run's new pages only are read."""
    half = len(z2_log_records) // 2
    store.add(z2_log_records[:half])
    first = store.frames.keep_sealed("z2")
    assert first == len(kept_chunks(store)) > 0
    reads = _body_reads(store, monkeypatch)
    assert store.frames.keep_sealed("z2") == 0
    kept = {k for k, *_ in kept_chunks(store)}  # (events, which Arrow cannot read, are read again)
    assert [r for r in reads if r in kept] == []  # no page filled since: nothing read
    store.add(z2_log_records[half:])
    reads.clear()
    added = store.frames.keep_sealed("z2")
    assert added > 0 and len(kept_chunks(store)) == first + added
    kept = {k for k, *_ in kept_chunks(store)}
    assert len([r for r in reads if r in kept]) == added  # the new full pages, no last page
    for kind in KINDS:
        pd.testing.assert_frame_equal(
            store.frames.frame("z2", kind), frame_from_records(store, "z2", kind)
        )
