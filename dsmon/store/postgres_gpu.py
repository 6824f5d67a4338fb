"""The GPU tables in PostgreSQL (:mod:`dsmon.store.gpu_tables`): ids and staging, its way.

A batch of samples is COPYed into a temporary table (duplicates within the batch dropped
first: COPY cannot skip them), and its ids are reserved in one call on the ``records``
identity's own sequence. The caller holds the writers' table lock while it does so, as it
does when inserting records, so ids commit in the order they were handed out and a reader
paging with ``after_id`` never steps over a sample still in flight.

A store an older dsmon wrote kept GPU samples as ``records`` rows; its first writer moves
them here (:func:`dsmon.store.gpu_store.move_gpu_records`) and notes in ``dsmon_meta`` that
it did, so later writers do not look again.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg

from dsmon.store import gpu_sql
from dsmon.store.gpu_sql import STAGED
from dsmon.store.gpu_store import move_gpu_records
from dsmon.store.gpu_tables import GpuTables

DDL = gpu_sql.ddl(gpu_sql.POSTGRES)
TEMP_DDL = gpu_sql.temp_ddl(gpu_sql.POSTGRES)
#: The ``dsmon_meta`` row that says GPU samples are kept in the GPU tables.
LAYOUT = "gpu_layout"
_COPY = f"COPY pg_temp.gpu_batch ({', '.join(STAGED)}, abs_ms) FROM STDIN"
_ALLOCATE = """
SELECT setval(seq, nextval(seq) + %s - 1)
FROM (SELECT pg_get_serial_sequence('records', 'id') AS seq) AS s
"""


class PgGpuTables(GpuTables):
    """The GPU tables through one PostgreSQL connection (a transaction holding the lock)."""

    DIALECT = gpu_sql.POSTGRES

    def keyed_by_series(self) -> bool:
        """Whether the primary key of ``gpu_samples`` starts with its series, not its id."""
        found = self.rows(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
            "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'gpu_samples'::regclass "
            "AND i.indisprimary"
        )
        return "series" in {name for (name,) in found}

    def _stream(self, sql: str, size: int) -> Iterator[list[Any]]:
        # a server-side cursor: the rows stay in PostgreSQL until fetched
        with self._conn.cursor(name="dsmon_stream") as cur:
            cur.execute(self._q(sql))
            while rows := cur.fetchmany(size):
                yield rows

    def _stage(self, values: list[tuple[Any, ...]]) -> None:
        conn: psycopg.Connection[Any] = self._conn
        conn.execute("DELETE FROM pg_temp.gpu_batch")
        first: dict[tuple[Any, Any], tuple[Any, ...]] = {}
        for row in values:
            first.setdefault((row[0], row[1]), row)
        with conn.cursor().copy(_COPY) as copy:
            for row in first.values():
                copy.write_row(row)

    def _allocate(self, n: int) -> int:
        found = self._conn.execute(_ALLOCATE, (n,)).fetchone()
        return int(found[0]) - n + 1

    def move_once(self) -> None:
        """Move an older dsmon's GPU records here unless done before (under the writers' lock)."""
        done = self.rows("SELECT 1 FROM dsmon_meta WHERE name = ?", (LAYOUT,))
        if done:
            return
        move_gpu_records(self)
        self.mark_typed()

    def mark_typed(self) -> None:
        """Note that this store keeps GPU samples in the GPU tables."""
        self.execute(
            "INSERT INTO dsmon_meta (name, value) VALUES (?, 'typed') ON CONFLICT DO NOTHING",
            (LAYOUT,),
        )
