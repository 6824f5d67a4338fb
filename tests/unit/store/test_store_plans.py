"""Every statement the stores run on the records table is served by an index, on both backends.

A statement that scans the records table, or sorts what it read from it, costs in proportion
to the whole run (or store) on every dashboard refresh or ingest batch. The SQLite half traces
what a realistic session of writes and reads actually runs and asks SQLite for each plan; the
PostgreSQL half (``$DSMON_TEST_PG_URL``) explains the store's statements with sequential scans
and sorts priced out, so a plan still holding one means no index can serve it.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import psycopg
from pg_support import ThrowawayPgStore
from store_support import restamped

from dsmon.model.records import Record
from dsmon.store import postgres as pg_sql
from dsmon.store.dialect import POSTGRES
from dsmon.store.ranks import sql as ranks_sql
from dsmon.store.records import sql as records_sql
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import Store, open_store
from dsmon.store.timers import sql as timers_sql

#: The filters the product reads with: a kind's frame (whole, then page by page), a kind's new
#: rows, and the ingest API's ``GET /v1/records`` without a kind.
PRODUCT_FILTERS = (
    RecordFilter("z2", "timer"),
    RecordFilter("z2", "timer", after_id=40, limit=1000),
    RecordFilter("z2", "event", after_id=40),
    RecordFilter("z2", None, after_id=40, limit=500),
    RecordFilter("z2", None),
)
#: Ranges the Store API offers (no page of the dashboard asks for them).
API_FILTERS = (
    RecordFilter("z2", "timer", step_min=3, step_max=9),
    RecordFilter("z2", "timer", ts_min="2023-01-01T00:00:00", ts_max="2030-01-01T00:00:00"),
    RecordFilter("z2", None, ts_min="2023-01-01T00:00:00"),
)


def session(store: Store, records: list[Record]) -> None:
    """The writes and reads a run's collectors, ingest server and dashboard make."""
    first, again = restamped(records)
    store.add(records[: len(records) // 2])
    store.add(first, live=True)
    store.add([*records, *again], live=True)  # half stored already, and steps to fill in
    assert store.restamps("z2") == len(again) > 0  # the writes did what the plans are of
    assert store.runs()[0].n_records == len(records) + len(first)
    store.last_id()
    for flt in (*PRODUCT_FILTERS, *API_FILTERS):
        store.id_records(flt)
        store.frames.frame(flt.run, flt.kind or "timer", after_id=flt.after_id, limit=flt.limit)
    list(store.scan("z2", "event", chunk=5))
    store.records("z2", "gpu")


def sqlite_plans(conn: sqlite3.Connection, statements: list[str]) -> dict[str, list[str]]:
    """EXPLAIN QUERY PLAN detail lines of each traced statement that reads the records table."""
    out: dict[str, list[str]] = {}
    for sql in statements:
        if "FROM records" in sql or "UPDATE records" in sql:
            out[sql] = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    return out


def whole_run_work(plan: list[str]) -> list[str]:
    """The lines of a SQLite plan that walk or sort the records table beyond what is asked."""
    return [
        line
        for line in plan
        if line.startswith("SCAN records") or line == "USE TEMP B-TREE FOR ORDER BY"
    ]


def test_sqlite_no_statement_scans_or_sorts_the_records_table(
    tmp_path: Path, z2_log_records: list[Record]
) -> None:
    store = open_store(tmp_path / "s.sqlite")
    conn = store.backend._conn
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    session(store, z2_log_records)
    conn.set_trace_callback(None)
    plans = sqlite_plans(conn, seen)
    store.close()
    bad = {sql: whole_run_work(plan) for sql, plan in plans.items() if whole_run_work(plan)}
    assert not bad, bad
    lines = {line for plan in plans.values() for line in plan}
    # the session did run what it is meant to check: each of these was planned at least once
    assert "SEARCH records USING INDEX records_run_id (run=? AND rowid>?)" in lines, lines
    assert "SEARCH records USING INDEX records_run_kind_id (run=? AND kind=? AND id>?)" in lines
    assert "SEARCH records USING INDEX sqlite_autoindex_records_1 (key=?)" in lines  # restamp
    assert "SEARCH records USING INTEGER PRIMARY KEY (rowid>?)" in lines  # bookkeeping


def pg_statements() -> list[tuple[str, tuple[object, ...]]]:
    """The records-table statements of the PostgreSQL store, with parameters to plan them."""
    reads = [flt.select("%s") for flt in (*PRODUCT_FILTERS, *API_FILTERS)]
    return [
        *((sql, tuple(params)) for sql, params in reads),
        (pg_sql.MOVE, ()),
        (pg_sql.RESTAMP, ()),
        (records_sql.MAX_ID, ()),
        (POSTGRES.q(ranks_sql.new_probe_records(POSTGRES)), (40,)),
    ]


def pg_plans(url: str, statements: list[tuple[str, tuple[object, ...]]]) -> dict[str, str]:
    """EXPLAIN of each statement with sequential scans and sorts priced out of the planner."""
    out: dict[str, str] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(pg_sql.STAGING)
        conn.execute("ANALYZE records")
        conn.execute("SET enable_seqscan = off")
        conn.execute("SET enable_sort = off")
        for sql, params in statements:
            rows = conn.execute("EXPLAIN " + sql, params).fetchall()  # type: ignore[arg-type]
            out[" ".join(sql.split())] = "\n".join(r[0] for r in rows)
    return out


def test_pg_no_statement_scans_or_sorts_the_records_table(z2_log_records: list[Record]) -> None:
    store = ThrowawayPgStore()
    try:
        session(store, z2_log_records)
        plans = pg_plans(store.url, pg_statements())
    finally:
        store.close()
    for sql, plan in plans.items():
        print(f"{sql}\n{plan}\n")  # the figures bench/README.md quotes (pytest -s)
    scans = {sql: plan for sql, plan in plans.items() if "Seq Scan on records" in plan}
    sorts = {
        sql: plan for sql, plan in plans.items() if sql.startswith("SELECT") and "Sort" in plan
    }
    assert not scans, scans
    assert not sorts, sorts
    assert (
        "records_run_id"
        in plans["SELECT id, body FROM records WHERE run = %s AND id > %s ORDER BY id LIMIT %s"]
    )


def test_sqlite_a_refresh_finds_the_timer_steps_changed_since_by_their_ids(
    tmp_path: Path,
) -> None:
    """A live refresh asks the lowest step changed after a recent id: the (run, id) index.

    SQLite answered ``MIN(step)`` by walking the primary key (run, step, rank) from the
    run's first step until an id was past the one asked: the whole run at every refresh.
    """
    store = open_store(tmp_path / "s.sqlite")
    conn = store.backend._conn
    plan = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + timers_sql.CHANGED_FROM,
                                             ("z2", 40, "z2", 40))]  # fmt: skip
    store.close()
    for table, _ in timers_sql.TABLES.values():
        assert f"SEARCH {table} USING COVERING INDEX {table}_run_id (run=? AND id>?)" in plan, plan
