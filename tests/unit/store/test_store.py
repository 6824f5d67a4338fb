from __future__ import annotations

import dataclasses
import sqlite3
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from shared_fixtures import DATA

from dsmon.load.files import import_paths
from dsmon.model import wire
from dsmon.model.records import (
    ConfigRecord,
    GpuSampleRecord,
    Record,
    Source,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
    record_key,
)
from dsmon.serve.batch import parse_batch_rows
from dsmon.store.errors import StoreError
from dsmon.store.records.filter import RecordFilter
from dsmon.store.records.keys import KEY_BYTES, key_digest
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store, open_store
from dsmon.store.url import absolute_url, redact_url, sqlite_file


def timer(
    run: str, step: int, fwd: float, *, rank: int | None = 0, node: str | None = None
) -> TimerRecord:
    return TimerRecord(
        src=Source(
            run=run, file="train.log", line=100 + step, offset=1000 * step, rank=rank, node=node
        ),
        ts=f"2026-11-29T14:11:{step:02d}.500",
        step=step,
        group="global",
        values_ms={"fwd": fwd, "bwd": 2 * fwd, "step": 1.5},
    )


def sample_run(run: str = "r1") -> list[Record]:
    recs: list[Record] = [timer(run, s, 10.0 + s) for s in range(1, 6)]
    recs.append(
        StepRecord(
            src=Source(run=run, file="train.log", line=200, offset=9000, rank=0),
            ts="2026-11-29T14:11:05.600",
            step=5,
            skipped=0,
            lr=(0.0001,),
            mom=((0.9, 0.999),),
        )
    )
    recs.append(
        ConfigRecord(
            src=Source(run=run, file="ds_config.json"),
            origin="file",
            config={"train_batch_size": 8},
        )
    )
    return recs


def test_add_is_idempotent(store: Store) -> None:
    recs = sample_run()
    assert store.add(recs) == 7
    assert store.add(recs) == 0
    assert store.add(recs[:2] + [timer("r1", 6, 16.0)]) == 1
    assert len(store.records("r1")) == 8


def test_records_round_trip_in_insertion_order(store: Store) -> None:
    recs = sample_run()
    store.add(recs)
    assert store.records("r1") == recs
    assert store.records("r1", "step") == [recs[5]]
    assert store.records("nope") == []


def test_runs_summarises_each_run(store: Store) -> None:
    store.add(sample_run("r1"))
    store.add(
        [
            timer("r2", 1, 3.0, rank=3, node="worker-1"),
            timer("r2", 2, 3.0, rank=None, node="worker-2"),
        ]
    )
    r1, r2 = store.runs()
    assert r1 == RunInfo(
        name="r1",
        first_ts="2026-11-29T14:11:01.500",
        last_ts="2026-11-29T14:11:05.600",
        n_records=7,
        nodes=(),
        ranks=(0,),
        last_step=5,
        kinds={"config": 1, "step": 1, "timer": 5},
        last_id=7,
    )
    assert (r2.name, r2.n_records, r2.nodes, r2.ranks, r2.last_step) == (
        "r2",
        2,
        ("worker-1", "worker-2"),
        (3,),
        2,
    )
    assert r2.last_id == 9


def test_runs_accumulate_across_adds(store: Store) -> None:
    store.add([timer("r1", 3, 1.0)])
    store.add([timer("r1", 1, 1.0), timer("r1", 7, 1.0)])
    (info,) = store.runs()
    assert (info.n_records, info.first_ts, info.last_ts, info.last_step, info.last_id) == (
        3,
        "2026-11-29T14:11:01.500",
        "2026-11-29T14:11:07.500",
        7,
        3,
    )


def test_step_time_and_id_filters(store: Store) -> None:
    store.add(sample_run())
    steps = [r.step for r in store.records("r1", "timer", step_min=2, step_max=4)]
    assert steps == [2, 3, 4]
    by_ts = store.records("r1", ts_min="2026-11-29T14:11:03.500", ts_max="2026-11-29T14:11:05.500")
    assert [r.step for r in by_ts] == [3, 4, 5]
    by_dt = store.records("r1", "timer", ts_min=datetime(2026, 11, 29, 14, 11, 4, 500000))
    assert [r.step for r in by_dt] == [4, 5]
    assert [r.step for r in store.records("r1", after_id=4)] == [5, 5, None]
    assert [r.step for r in store.records("r1", "timer", limit=2)] == [1, 2]


def test_last_id(store: Store) -> None:
    assert store.last_id() == 0
    assert store.last_id("r1") == 0
    store.add(sample_run("r1"))
    store.add(sample_run("r2"))
    assert store.last_id("r1") == 7
    assert store.last_id("r2") == 14
    assert store.last_id() == 14
    assert store.records("r2", after_id=store.last_id("r2")) == []


def test_frame_widens_timers(store: Store) -> None:
    store.add(sample_run())
    f = store.frames.frame("r1", "timer", step_min=4)
    assert list(f.columns[:7]) == ["id", "step", "ts", "node", "rank", "file", "line"]
    assert f["id"].tolist() == [4, 5]
    assert f["fwd_ms"].tolist() == [14.0, 15.0]
    assert f["bwd_ms"].tolist() == [28.0, 30.0]
    assert f["step_ms"].tolist() == [1.5, 1.5]
    assert f["group"].tolist() == ["global", "global"]
    assert f["ts"].iloc[0] == pd.Timestamp("2026-11-29 14:11:04.500")
    assert str(f["step"].dtype) == "Int64"


def test_frame_of_absent_kind_is_empty_with_columns(store: Store) -> None:
    store.add(sample_run())
    f = store.frames.frame("r1", "throughput")
    assert f.empty
    assert "samples_per_s" in f.columns
    assert str(f["samples_per_s"].dtype) == "float64"


def test_same_position_in_another_run_is_another_record(store: Store) -> None:
    a = timer("a", 1, 1.0)
    b = dataclasses.replace(a, src=dataclasses.replace(a.src, run="b"))
    assert store.add([a, b]) == 2


def test_real_run_round_trips(store: Store, z2_log_records: list[Record]) -> None:
    assert store.add(z2_log_records) == len(z2_log_records)
    assert store.records("z2") == z2_log_records
    (info,) = store.runs()
    assert info.kinds["timer"] == 90
    assert info.last_step == 30
    assert info.ranks == (0,)


def test_last_step_is_the_last_step_a_rank_finished(store: Store) -> None:
    """A real probed job of 20 steps: each rank's ``exited`` heartbeat names step 21."""
    import_paths(store, [DATA / "probe_straggler"], run="strag")
    (info,) = store.runs()
    assert info.kinds["heartbeat"] > 0 and info.kinds["rank_step"] == 40
    assert info.last_step == 20


def test_rows_the_server_made_store_what_records_store(
    store: Store, z2_log_records: list[Record]
) -> None:
    """The ingest server hands the store rows, not records: same records, runs and dedup."""
    gpu = [
        GpuSampleRecord(
            src=Source(run="z2", node="n1"),
            ts=f"2026-11-29T14:11:0{i}.882",
            gpu_index=0,
            power_w=612.345,
            mem_used_bytes=1 << 30,
        )
        for i in range(3)
    ]
    body = "\n".join(wire.encode(r) for r in [*z2_log_records, *gpu]).encode()
    batch = parse_batch_rows(body)
    assert (len(batch.rows), len(batch.samples)) == (len(z2_log_records), 3)
    assert store.add(batch, live=True) == len(z2_log_records) + 3
    assert store.add([*z2_log_records, *gpu]) == 0  # the same keys as the records'
    assert store.add(batch, live=True) == 0  # and a batch sent again adds nothing
    assert store.records("z2", "gpu") == gpu
    assert [r for r in store.records("z2") if r.KIND != "gpu"] == z2_log_records
    (info,) = store.runs()
    assert (info.kinds["timer"], info.last_step, info.ranks) == (90, 30, (0,))
    assert info.received_at is not None


def test_key_digest_follows_record_key() -> None:
    a = timer("r", 1, 1.0)
    assert key_digest(a) == key_digest(dataclasses.replace(a, values_ms={"fwd": 99.0}))
    assert key_digest(a) != key_digest(timer("r", 2, 1.0))
    assert len(key_digest(a)) == KEY_BYTES
    assert record_key(a) == ("r", "", "train.log", "o1000", 0, "timer")


def test_filter_builds_sql() -> None:
    flt = RecordFilter("r", "timer", step_min=2, ts_max="2026-01-01T00:00:00.000", after_id=5)
    assert flt.where("%s") == (
        "run = %s AND kind = %s AND step >= %s AND ts <= %s AND id > %s",
        ["r", "timer", 2, "2026-01-01T00:00:00.000", 5],
    )


# --- SQLite specifics ---------------------------------------------------------------------


def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with open_store(path):
        pass
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
    store = open_store(path)
    assert store.backend._conn.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    store.close()


def test_only_the_wal_switch_of_a_new_file_is_unsynced(tmp_path: Path) -> None:
    """A new store's switch to WAL skips its syncs; every write after it is synced as usual
    (``synchronous`` NORMAL: 1), on a new file and on an existing one."""
    for _ in ("new", "existing"):
        store = open_store(tmp_path / "s.sqlite")
        conn = store.backend._conn
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store.close()


def test_sqlite_indexes_exist(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    open_store(path).close()
    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'records'"
    ).fetchall()
    conn.close()
    # the key's UNIQUE index, and the two the reads need (tests/unit/store/test_store_plans.py)
    assert {r[0] for r in rows} == {
        "sqlite_autoindex_records_1",
        "records_run_kind_id",
        "records_run_id",
    }


def test_sqlite_reader_in_another_connection_sees_commits(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    writer, reader = open_store(path), open_store(path)
    writer.add(sample_run())
    assert reader.last_id("r1") == 7
    writer.add([timer("r1", 9, 1.0)])
    assert [r.step for r in reader.records("r1", after_id=7)] == [9]
    writer.close()
    reader.close()


def test_sqlite_plan_uses_an_index(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    open_store(path).close()
    conn = sqlite3.connect(path)
    plan = conn.execute(
        "EXPLAIN QUERY PLAN SELECT id, body FROM records "
        "WHERE run = ? AND kind = ? AND step >= ? AND step <= ? ORDER BY id",
        ("r", "timer", 1, 5),
    ).fetchall()
    conn.close()
    # the rows of the run's kind in id order, filtered by step: no sort
    assert [str(r[-1]) for r in plan] == [
        "SEARCH records USING INDEX records_run_kind_id (run=? AND kind=?)"
    ]


def test_open_store_urls(tmp_path: Path) -> None:
    assert sqlite_file("sqlite:///rel/x.db") == "rel/x.db"
    assert sqlite_file("sqlite:////abs/x.db") == "/abs/x.db"
    assert sqlite_file("x.db") == "x.db"
    assert sqlite_file("postgresql://u@h/db") is None
    with open_store(f"sqlite:///{tmp_path}/u.sqlite") as s:
        assert s.add(sample_run()) == 7
    assert (tmp_path / "u.sqlite").exists()
    with pytest.raises(StoreError, match="unknown URL scheme"):
        open_store("mysql://host/db")
    with pytest.raises(StoreError, match="three slashes"):
        open_store("sqlite://x.db")
    with pytest.raises(StoreError, match="cannot open store"):
        open_store(tmp_path / "missing-dir" / "x.sqlite")


def test_a_url_for_another_folder_names_the_same_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dashboard runs in the checkout: the store it is handed must not move with it."""
    monkeypatch.chdir(tmp_path)
    assert absolute_url("s.sqlite") == str(tmp_path / "s.sqlite")
    assert absolute_url("sqlite:///d/s.sqlite") == f"sqlite:///{tmp_path}/d/s.sqlite"
    assert sqlite_file(absolute_url("sqlite:///d/s.sqlite")) == str(tmp_path / "d" / "s.sqlite")
    url = "postgresql://dsmon:pw@db:5432/x"
    assert absolute_url(url) == url
    assert redact_url(url) == "postgresql://dsmon:***@db:5432/x"
    assert redact_url("postgresql://dsmon@db/x") == "postgresql://dsmon@db/x"


def test_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open store"):
        open_store(path)


def test_store_is_a_context_manager(tmp_path: Path) -> None:
    with open_store(tmp_path / "c.sqlite") as s:
        s.add([ThroughputRecord(src=Source(run="t", line=1), samples_per_s=1.5)])
    with pytest.raises(sqlite3.ProgrammingError):
        s.runs()


def test_check_writable_commits_nothing_visible(store: Store) -> None:
    """The ``/healthz`` probe: a real commit, and the store reads the same after it."""
    store.add(sample_run())
    before = (store.runs(), store.last_id(), store.records("r1"))
    store.check_writable()
    assert (store.runs(), store.last_id(), store.records("r1")) == before


def test_check_writable_fails_on_a_store_that_refuses_writes(tmp_path: Path) -> None:
    store = open_store(tmp_path / "ro.sqlite")
    store.backend._conn.execute("PRAGMA query_only = 1")  # as a read-only file or mount would
    with pytest.raises(StoreError, match="attempt to write a readonly database"):
        store.check_writable()
    assert store.last_id() == 0  # reads still answer: why /healthz must write
    store.close()


def _plans(conn: sqlite3.Connection, statements: list[str]) -> list[str]:
    """EXPLAIN QUERY PLAN detail lines of the statements that read the records table."""
    out: list[str] = []
    for sql in statements:
        if "FROM records" in sql:
            out += [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    return out


def test_sqlite_after_id_read_walks_only_newer_rows(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = open_store(tmp_path / "s.sqlite")
    conn = store.backend._conn
    store.add(z2_log_records)
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    store.frames.frame("z2", "timer", after_id=store.last_id("z2") - 3)
    conn.set_trace_callback(None)
    plans = _plans(conn, seen)
    store.close()
    assert plans, seen
    assert all("records_run_kind_id (run=? AND kind=? AND id>?)" in p for p in plans), plans


def test_sqlite_bookkeeping_reads_only_the_batch(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = open_store(tmp_path / "s.sqlite")
    conn = store.backend._conn
    store.add(z2_log_records[: len(z2_log_records) // 2])
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    store.add(z2_log_records)  # half stored already: inserts, bookkeeping and restamps
    conn.set_trace_callback(None)
    plans = _plans(conn, seen)
    store.close()
    assert any("rowid>?" in p for p in plans), plans
    assert not [p for p in plans if p.startswith("SCAN records")], plans


@pytest.mark.parametrize("n", [1, 9, 61, 457])
def test_a_batch_of_any_size_is_stored_once_in_order(store: Store, n: int) -> None:
    """SQLite inserts rows many to a statement (200, 50, 10, 1): every size goes in, in
    order, and rows stored before (every third here) are left as they are."""
    recs = [
        dataclasses.replace(timer("r", 1, 1.0), src=Source(run="r", file="f", offset=i))
        for i in range(n)
    ]
    assert store.add(recs[::3]) == len(recs[::3])
    assert store.add(recs) == n - len(recs[::3])
    stored = store.records("r")
    assert sorted(stored, key=lambda r: r.src.offset or 0) == recs
    later = [r for r in stored if (r.src.offset or 0) % 3]
    assert later == [r for r in recs if (r.src.offset or 0) % 3]  # in the batch's order


def test_a_sqlite_with_few_parameters_a_statement_inserts_all(tmp_path: Path) -> None:
    """SQLite before 3.32 takes 999 ``?`` a statement: 200 rows (2,000) do not fit."""
    with open_store(tmp_path / "old.sqlite") as store:
        conn = store.backend._conn
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        recs = [
            dataclasses.replace(timer("r", 1, 1.0), src=Source(run="r", file="f", offset=i))
            for i in range(457)
        ]
        assert store.add(recs) == 457
        assert store.records("r") == recs
