"""SQL run on a store's database directly, as another program would.

Tests that look at what a store wrote, or change it behind its back, go past the Store
interface; this runs ``?``-placeholder SQL on either backend the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path

import psycopg

from dsmon.store.store import Store

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


def store_sql(store: Store, sql: str, rows: Sequence[Sequence[object]] = ()) -> Rows:
    """:func:`sqlite_sql` or :func:`pg_sql` on the database of ``store``."""
    run = sqlite_sql if store.backend.dialect.name == "sqlite" else pg_sql
    return run(store.url, sql, rows)
