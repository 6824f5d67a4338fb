"""SQL run on a store's database directly, as another program (or an older dsmon) would.

Tests that build a store as an older dsmon left it, or look at what a store wrote, go past
the Store interface; this runs ``?``-placeholder SQL on either backend the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import psycopg

from dsmon.store.base import Store
from dsmon.store.postgres import PgStore
from dsmon.store.sqlite import SQLiteStore

Rows = list[tuple[object, ...]]


def sqlite_sql(path: str | Path, sql: str, rows: Sequence[Sequence[object]] = ()) -> Rows:
    """Run ``sql`` once, or once per row of ``rows`` in one transaction (then returns [])."""
    with sqlite3.connect(path, isolation_level=None) as conn:
        if len(rows) > 1:
            conn.execute("BEGIN")  # one transaction, not one fsync per row
            conn.executemany(sql, rows)
            conn.execute("COMMIT")
            return []
        return conn.execute(sql, rows[0] if rows else ()).fetchall()


def pg_sql(url: str, sql: str, rows: Sequence[Sequence[object]] = ()) -> Rows:
    """:func:`sqlite_sql` for a PostgreSQL database (``?`` placeholders, autocommit)."""
    with psycopg.connect(url, autocommit=True) as conn, conn.cursor() as cur:
        sql = sql.replace("?", "%s")
        if len(rows) > 1:
            cur.executemany(sql, rows)
            return []
        cur.execute(sql, rows[0] if rows else ())
        return cur.fetchall() if cur.description else []


def sql_rows(store: Store, sql: str, rows: Sequence[Sequence[object]] = ()) -> Rows:
    """Run SQL on the store's database directly."""
    if isinstance(store, SQLiteStore):
        return sqlite_sql(store.path, sql, rows)
    assert isinstance(store, PgStore)
    return pg_sql(store.url, sql, rows)
