"""How the SQLite store talks to its connection: failures as store errors, explicit transactions.

Apart from :mod:`dsmon.store.sqlite` because these two rules hold for every statement the
store runs, whatever it stores: a failure the user can act on (a locked, full or corrupt file)
reaches callers as a :class:`~dsmon.store.base.StoreError`, never as a bare ``sqlite3`` error,
and a write transaction takes the write lock up front. Kept here, they are stated once, and
the store's module is left with what it stores and how.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager

from dsmon.store.base import StoreDataError, StoreError


@contextmanager
def store_errors(path: str) -> Iterator[None]:
    """SQLite failures at run time (locked too long, disk full, corrupt file) as StoreError.

    Misuse (a closed store) stays a ``sqlite3.ProgrammingError``: that is a bug, not a
    condition the user can fix.
    """
    try:
        yield
    except (sqlite3.OperationalError, sqlite3.DatabaseError) as exc:
        if isinstance(exc, sqlite3.ProgrammingError):
            raise
        if isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError):
            raise StoreDataError(f"store {path}: {exc}") from None
        raise StoreError(f"store {path}: {exc}") from None


class Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error).

    IMMEDIATE takes the write lock up front: a deferred transaction that reads first and
    writes later can fail with SQLITE_BUSY without waiting, when another writer got there
    in between. Reads that must see one snapshot (``BEGIN``) take no lock.
    """

    def __init__(self, conn: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE") -> None:
        self._conn = conn
        self._begin = begin

    def __enter__(self) -> None:
        self._conn.execute(self._begin)

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        if exc_type is None:
            self._conn.execute("COMMIT")
        elif self._conn.in_transaction:
            # SQLite rolls back by itself on some errors (a full disk): a ROLLBACK then
            # would fail and hide the error that matters.
            self._conn.execute("ROLLBACK")
