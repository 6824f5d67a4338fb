"""What a store raises: a store it cannot use, and data the database itself refuses."""

from __future__ import annotations


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad URL, unreadable file, foreign schema)."""


class StoreDataError(StoreError):
    """The database refused the data itself (a value too long for an index, say).

    Sending the same records again can never succeed, unlike a database that is down or
    busy: the ingest server answers 400 for this, 503 for other store errors.
    """
