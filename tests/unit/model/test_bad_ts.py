"""A record with an impossible timestamp already in a store (written by an older dsmon).

Every entry point refuses such a time now (tests/unit/serve/test_ingest_batch.py, tests/unit/parse/test_field_all.py),
but a store written before that may hold one. The row here goes in with plain SQL, as an old
dsmon stored it, bookkeeping included; every page must still draw, and ``dsmon import`` and
the frames must treat the time as unknown instead of failing.
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from dashboard_support import DATA, app_at, gpu_samples, record_uncaught, shared_store

from cli.main import main
from dsmon.model.frames import records_frame
from dsmon.model.records import EventRecord, Record, Source, StepRecord
from dsmon.model.wire import encode
from dsmon.store.records.keys import key_digest
from dsmon.store.store import open_store

BAD_TS = "2026-19-39T25:61:00.000"  # month 19, day 39: no such moment
PAGES = ("health", "steps", "training", "autotuner", "compare", "gpus", "communication", "flops")


def bad_records(run: str, step: int) -> list[Record]:
    """A step line, a crash and a GPU sample, each stamped ``BAD_TS``."""
    return [
        StepRecord(src=Source(run=run, file="old.log", line=1, rank=0), ts=BAD_TS, step=step),
        EventRecord(
            src=Source(run=run, file="old.log", line=2, rank=0),
            ts=BAD_TS,
            name="traceback",
            detail={"exception": "RuntimeError"},
        ),
        dataclasses.replace(gpu_samples(run, seconds=1)[0], ts=BAD_TS),
    ]


def insert_bad_row(path: Path, run: str, step: int) -> None:
    """Store records with ``BAD_TS`` the way a store before the check held them."""
    with sqlite3.connect(path) as conn:
        for rec in bad_records(run, step):
            s = rec.src
            conn.execute(
                "INSERT INTO records (key, run, kind, step, ts, node, rank, file, line, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key_digest(rec), run, rec.KIND, rec.step, BAD_TS, s.node, s.rank, s.file, s.line,
                 encode(rec)),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO run_kinds (run, kind, n, first_ts, last_ts, last_step, last_id) "
                "VALUES (?, ?, 1, ?, ?, NULL, (SELECT MAX(id) FROM records)) "
                "ON CONFLICT (run, kind) DO UPDATE SET n = n + 1, last_ts = excluded.last_ts, "
                "last_id = excluded.last_id",
                (run, rec.KIND, BAD_TS, BAD_TS),
            )


@pytest.fixture(scope="module")
def bad_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("bad-ts") / "store.sqlite"
    shutil.copy(shared_store(), path)
    insert_bad_row(path, "z2", 5)
    return str(path)


@pytest.mark.parametrize("page", PAGES)
def test_every_page_draws_with_a_bad_timestamp_stored(
    bad_store: str, page: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", bad_store)
    uncaught = record_uncaught(monkeypatch)
    at = app_at(bad_store, "z2", page)
    assert not at.exception and not uncaught, uncaught
    heading = at.header[0].value  # Compare names its runs in its status lines, not here
    assert heading == "Compare" if page == "compare" else heading.endswith("· z2")


def test_frame_coerces_a_bad_timestamp_and_counts_it() -> None:
    recs = [
        StepRecord(src=Source(run="r", line=1), ts="2026-11-29T14:11:01.000", step=1),
        StepRecord(src=Source(run="r", line=2), ts=BAD_TS, step=2),
    ]
    frame = records_frame("step", recs)
    assert frame["ts"].iloc[0] == pd.Timestamp("2026-11-29T14:11:01")
    assert frame["ts"].isna().tolist() == [False, True]
    assert frame.attrs["bad_ts"] == 1
    assert "bad_ts" not in records_frame("step", recs[:1]).attrs


def test_import_into_a_store_holding_a_bad_timestamp(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s.sqlite"
    open_store(store).close()
    run_dir = tmp_path / "z2"
    shutil.copytree(DATA / "z2", run_dir)
    assert main(["import", str(run_dir), "--store", str(store)]) == 0
    insert_bad_row(store, "z2", 5)
    capsys.readouterr()
    assert main(["import", str(run_dir), "--store", str(store)]) == 0
    out = capsys.readouterr().out
    assert "Imported    " in out and "(0 new)" in out
