"""What only the PostgreSQL backend has to get right (the shared contract runs in test_store.py).

Needs the server of scripts/start-postgres.sh ($DSMON_TEST_PG_URL); skipped without it,
except in CI where it must run.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.client
import json
import threading
from collections.abc import Iterator

import psycopg
import pytest
from pg_support import ThrowawayPgStore, create_schema, drop_schema, pg_url

from dsmon.model import wire
from dsmon.model.records import GpuSampleRecord, Record, Source, StepRecord, TimerRecord
from dsmon.serve.run import start_ingest_server
from dsmon.store import postgres as pg_sql
from dsmon.store.errors import StoreDataError, StoreError
from dsmon.store.postgres import PostgresBackend
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import open_store
from dsmon.store.url import redact_url


def timers(run: str, start: int, n: int, node: str = "n1") -> list[Record]:
    return [
        TimerRecord(
            src=Source(run=run, file="train.log", line=i + 1, offset=i * 100, node=node, rank=0),
            ts=f"2026-11-29T14:11:{i % 60:02d}.{i % 1000:03d}",
            step=i + 1,
            group="global",
            values_ms={"fwd": float(i)},
        )
        for i in range(start, start + n)
    ]


@pytest.fixture
def pg() -> Iterator[ThrowawayPgStore]:
    store = ThrowawayPgStore()
    yield store
    store.close()


def test_redact_url() -> None:
    assert redact_url("postgresql://dsmon:s3cr@t@db:5432/x") == "postgresql://dsmon:***@db:5432/x"
    assert redact_url("postgresql://dsmon@db/x") == "postgresql://dsmon@db/x"


def test_open_store_dispatches_postgresql_urls(pg: ThrowawayPgStore) -> None:
    with open_store(pg.url) as other:
        assert isinstance(other.backend, PostgresBackend)
        assert other.add(timers("r", 0, 3)) == 3
    assert pg.last_id("r") == 3


def test_unreachable_server_is_a_store_error_without_the_password() -> None:
    pg_url()  # skip like the others when no server was started
    with pytest.raises(StoreError) as err:
        open_store("postgresql://dsmon:hunter2@127.0.0.1:1/none")
    assert "hunter2" not in str(err.value)
    assert str(err.value).startswith(
        "store postgresql://dsmon:***@127.0.0.1:1/none: connection failed"
    )


def test_reconnects_after_the_server_drops_the_connection(pg: ThrowawayPgStore) -> None:
    assert pg.add(timers("r", 0, 10)) == 10
    conn = pg.backend._conn
    assert conn is not None
    with psycopg.connect(pg_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (conn.info.backend_pid,))
    assert pg.add(timers("r", 5, 10)) == 5  # retried on a new connection, overlap ignored
    assert [r.step for r in pg.records("r")] == list(range(1, 16))


def gpu_samples(run: str, start: int, n: int, node: str) -> list[Record]:
    """``n`` one-second polls of one GPU, from second ``start``."""
    return [
        GpuSampleRecord(
            src=Source(run=run, node=node),
            ts=f"2026-11-29T14:{sec // 60 % 60:02d}:{sec % 60:02d}.000",
            gpu_index=0,
            util_gpu_pct=float(sec % 100),
        )
        for sec in range(start, start + n)
    ]


@pytest.mark.parametrize("with_gpu", [False, True])
def test_concurrent_writers_never_let_an_after_id_reader_miss_a_record(
    pg: ThrowawayPgStore, with_gpu: bool
) -> None:
    """GPU sample ids are taken under the writers' lock too: they commit in order."""
    writers = [open_store(pg.url) for _ in range(3)]
    seen: dict[int, Record] = {}
    done = threading.Event()

    def write(k: int) -> None:
        for b in range(20):
            batch = timers("r", (k * 20 + b) * 25, 25, node=f"n{k}")
            if with_gpu:
                batch += gpu_samples("r", b * 10, 10, node=f"n{k}")
            writers[k].add(batch)

    def read() -> None:
        cursor = 0
        while True:
            last_round = done.is_set()
            for rec_id, rec in pg.id_records(RecordFilter("r", after_id=cursor)):
                assert rec_id > cursor
                seen[rec_id] = rec
                cursor = rec_id
            if last_round:
                return

    threads = [threading.Thread(target=write, args=(k,)) for k in range(3)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    reader.join()
    for w in writers:
        w.close()
    assert len(seen) == 3 * 20 * (25 + (10 if with_gpu else 0))
    assert [seen[i] for i in sorted(seen)] == pg.records("r")
    assert pg.last_id("r") == pg.last_id() == max(seen)


def test_schema_is_created_once_by_concurrent_openers() -> None:
    name, url = create_schema()
    errors: list[Exception] = []

    def open_one() -> None:
        try:
            open_store(url).close()
        except StoreError as exc:
            errors.append(exc)

    try:
        threads = [threading.Thread(target=open_one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    finally:
        drop_schema(name)


def test_tables_indexes_and_collation(pg: ThrowawayPgStore) -> None:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        found = conn.execute(
            "SELECT tablename, indexname FROM pg_indexes WHERE schemaname = %s", (pg.schema,)
        ).fetchall()
        indexes = {index for _, index in found}
        collation = conn.execute(
            "SELECT collation_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'records' AND column_name = 'ts'",
            (pg.schema,),
        ).fetchone()
    assert {
        "records_run_kind_id",
        "records_run_id",
        "gpu_samples_pkey",  # id: samples in the order they arrive, found by time via blocks
        "gpu_rollup_pkey",
    } <= indexes
    # the key's, and the two every read needs (tests/test_store_plans.py): each costs inserts
    assert {index for table, index in found if table == "records"} == {
        "records_pkey",
        "records_key_key",
        "records_run_kind_id",
        "records_run_id",
    }
    assert collation == ("C",)


def test_ingest_server_writes_into_postgresql(pg: ThrowawayPgStore) -> None:
    token = "pg-ingest-token-0123456789"
    records = timers("served", 0, 50)
    body = gzip.compress("\n".join(wire.encode(r) for r in records).encode())
    with start_ingest_server(pg.url, token, "127.0.0.1", 0) as srv:
        for expected in (50, 0):
            conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
            headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"}
            conn.request("POST", "/v1/records", body, headers)
            resp = conn.getresponse()
            assert (resp.status, json.loads(resp.read())) == (
                200,
                {"accepted": 50, "inserted": expected},
            )
            conn.close()
    assert pg.records("served") == records


def test_a_value_the_database_refuses_is_a_data_error(pg: ThrowawayPgStore) -> None:
    """Too long for the B-tree index: permanent, so the server answers 400, not a 503 retry."""
    # Incompressible, or PostgreSQL compresses it into the index after all.
    name = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(100))
    with pytest.raises(StoreDataError, match="index row"):
        pg.add(timers(name, 0, 1))
    pg.check_writable()  # the store still takes writes
    assert pg.add(timers("ok", 0, 1)) == 1


def test_a_refused_batch_leaves_no_gpu_series_behind(pg: ThrowawayPgStore) -> None:
    """The series a rolled-back batch created is created again with the next one."""
    name = "".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(100))
    polls = gpu_samples("r", 0, 5, node="n1")
    with pytest.raises(StoreDataError):
        pg.add([*polls, *timers(name, 0, 1)])  # one batch: the samples roll back too
    assert pg.records("r") == []
    assert pg.add(polls) == 5
    assert pg.records("r", "gpu") == polls
    assert pg.gpu.summary("r")["samples"].tolist() == [5]


def test_after_id_read_of_one_kind_uses_the_run_kind_id_index(pg: ThrowawayPgStore) -> None:
    many = timers("r", 0, 3000)
    steps = [
        StepRecord(src=dataclasses.replace(t.src, line=t.src.line + 5000), step=t.step)
        for t in many[:100]
    ]
    pg.add([*steps, *many])  # 100 steps, then 3000 rows of another kind
    where, params = RecordFilter("r", "step", after_id=90).where("%s")
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("ANALYZE records")
        conn.execute("SET enable_seqscan = off")  # a table this small is cheaper to scan
        plan = conn.execute(
            f"EXPLAIN SELECT id, body FROM records WHERE {where} ORDER BY id", params
        ).fetchall()
    text = " ".join(r[0] for r in plan)
    assert "records_run_kind_id" in text, text
    assert [r.step for r in pg.records("r", "step", after_id=90)] == list(range(91, 101))


def test_batch_bookkeeping_never_reads_the_records_table(pg: ThrowawayPgStore) -> None:
    pg.add(timers("r", 0, 3000))
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute(pg_sql.STAGING)
        conn.execute("ANALYZE records")
        plan = [r[0] for r in conn.execute("EXPLAIN " + pg_sql.MOVE).fetchall()]
    # run_kinds and run_sources are folded from the INSERT's RETURNING rows
    assert any("Insert on records" in line for line in plan), plan
    assert not [line for line in plan if "Scan" in line and " on records" in line], plan
