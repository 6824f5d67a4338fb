"""What a backend gives the store's parts: its connection seen through its dialect, and turns.

The parts of a store (:mod:`dsmon.store.records`, :mod:`dsmon.store.gpu`,
:mod:`dsmon.store.ranks`, :mod:`dsmon.store.frames`) write their SQL once, with ``?``
placeholders, and run it on a :class:`Db`. A backend (:mod:`dsmon.store.sqlite`,
:mod:`dsmon.store.postgres`) supplies what differs between the engines and nothing else:

- how a statement reaches the database and what its failures mean (a :class:`StoreError`,
  never a driver's exception);
- turns: :meth:`Backend.read`, :meth:`Backend.snapshot` (several reads that see one state),
  :meth:`Backend.write` (one transaction; writers take turns, so ids commit in the order they
  are handed out and a reader paging with ``after_id`` never steps over one still in flight);
- the few writes each engine does its own way, for speed: storing a batch of records with
  their bookkeeping (:meth:`Db.insert_records`), reserving ids for GPU samples and staging
  them (:meth:`Db.allocate_ids`, :meth:`Db.stage_samples`).

Parts are handed the backend, never the store: none of them can reach another's tables but
through SQL, or the store's other parts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from dsmon.store.dialect import Dialect

if TYPE_CHECKING:
    from dsmon.store.records.rows import Inserted, Row

T = TypeVar("T")


class Db(ABC):
    """One connection, inside the backend's current read or transaction."""

    dialect: ClassVar[Dialect]

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read written with ``?`` placeholders."""
        return list(self.conn.execute(self.dialect.q(sql), params).fetchall())

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run a statement written with ``?`` placeholders."""
        self.conn.execute(self.dialect.q(sql), params)

    def execute_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        """Run a statement written with ``?`` placeholders once per row."""
        self.conn.cursor().executemany(self.dialect.q(sql), list(rows))

    def insert_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run an ``INSERT ... VALUES (?, ...)`` of one row once per row, in order.

        What each row does is what it does alone: an upsert of a row that a row before it in
        ``rows`` inserted updates that row. An engine may carry many rows in one statement
        (SQLite), where a statement of many rows does just that.
        """
        self.execute_many(sql, rows)

    @abstractmethod
    def insert_records(self, rows: list[Row]) -> Inserted:
        """Store the rows not stored yet with their bookkeeping; how many were new, and ids.

        The bookkeeping is ``run_kinds`` and ``run_sources`` of the new rows, and the step of
        stored rows that lacked one filled in from their copy in ``rows`` (a restamp, counted
        in ``run_activity``). ``first_id`` is given only where every row was new and the
        engine numbered them in row order (:class:`~dsmon.store.records.rows.Inserted`).
        """

    @abstractmethod
    def allocate_ids(self, n: int) -> int:
        """Reserve ``n`` ids of the records' sequence; returns the first."""

    @abstractmethod
    def stage_samples(self, values: list[tuple[Any, ...]]) -> None:
        """Empty the GPU staging table and put rows in; the first of a (series, t_ms) wins."""


class Backend(ABC):
    """A database the store lives in: one connection per backend object, shared by threads.

    ``url`` is the store as it was named; ``name`` as messages show it (no password).
    """

    dialect: ClassVar[Dialect]
    url: str
    name: str

    @abstractmethod
    def prepare(self, ddl: Sequence[str]) -> None:
        """Create the tables (``ddl``) in a new store, or check an existing store's version.

        Raises:
            StoreError: the store is of another schema version (:func:`schema.refused`).
        """

    @abstractmethod
    def read(self, fn: Callable[[Db], T]) -> T:
        """``fn`` of the connection, its reads committed as they run."""

    @abstractmethod
    def snapshot(self, fn: Callable[[Db], T]) -> T:
        """``fn`` of the connection, whose reads all see the store in one state."""

    @abstractmethod
    def write(self, fn: Callable[[Db], T], undo: Callable[[], None] | None = None) -> T:
        """``fn`` in one write transaction, committed before this returns, writers in turn.

        ``undo`` is called when an attempt rolls back, commit included: what the caller
        cached of the transaction's rows (GPU series) does not exist.
        """

    @abstractmethod
    def write_briefly(self, fn: Callable[[Db], None]) -> None:
        """``fn`` in a write of its own that waits for other writers only briefly.

        For what a reader keeps on the side (sealed pages): a page being drawn must not wait
        as long as a writer may.

        Raises:
            StoreError: it could not write (busy, read-only, full).
        """

    @abstractmethod
    def wrote_live(self) -> None:
        """Note that a live sender's records were committed (SQLite checkpoints its log)."""

    @abstractmethod
    def check_writable(self) -> None:
        """Commit a write that changes nothing, or raise :class:`StoreError` saying why not."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""
