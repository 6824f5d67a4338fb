"""The GPU tables in SQLite (:mod:`dsmon.store.gpu_tables`): ids and staging, SQLite's way.

Ids are reserved by moving ``sqlite_sequence``, the AUTOINCREMENT counter of ``records``, by
the batch's size: the write transaction holds SQLite's one write lock, so nobody else takes
ids meanwhile. A store an older dsmon wrote may lack the GPU tables; reads of it find none.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

from dsmon.store import gpu_sql
from dsmon.store.gpu_sql import STAGED
from dsmon.store.gpu_tables import GpuTables

DDL = gpu_sql.ddl(gpu_sql.SQLITE)
_MARKS = ", ".join("?" for _ in range(len(STAGED) + 1))
_STAGE = f"INSERT OR IGNORE INTO temp.gpu_batch VALUES ({_MARKS})"


class SQLiteGpuTables(GpuTables):
    """The GPU tables of one SQLite connection."""

    DIALECT = gpu_sql.SQLITE

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read; none from a store whose GPU tables do not exist yet."""
        try:
            return super().rows(sql, params)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise

    def keyed_by_series(self) -> bool:
        """Whether ``gpu_samples`` is a WITHOUT ROWID table (keyed by series and time)."""
        found = self.rows("SELECT sql FROM sqlite_master WHERE name = 'gpu_samples'")
        return bool(found) and "WITHOUT ROWID" in str(found[0][0]).upper()

    def _stream(self, sql: str, size: int) -> Iterator[list[Any]]:
        cur = self._conn.execute(sql)
        while rows := cur.fetchmany(size):
            yield rows

    def _stage(self, values: list[tuple[Any, ...]]) -> None:
        self._conn.execute(gpu_sql.temp_ddl(self.DIALECT))
        self._conn.execute("DELETE FROM temp.gpu_batch")
        self._conn.executemany(_STAGE, values)

    def _allocate(self, n: int) -> int:
        conn = self._conn
        row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'records'").fetchone()
        if row is None:
            top = conn.execute("SELECT MAX(id) FROM records").fetchone()[0] or 0
            conn.execute(
                "INSERT INTO sqlite_sequence (name, seq) VALUES ('records', ?)", (top + n,)
            )
            return int(top) + 1
        conn.execute("UPDATE sqlite_sequence SET seq = seq + ? WHERE name = 'records'", (n,))
        return int(row[0]) + 1
