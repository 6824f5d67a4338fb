"""Sealed pages of a run's records kept as typed columns: a long run opens without its JSON.

A store keeps each record as its JSON body, and a frame of a kind was parsed from those
bodies on every first look: at 100k steps, the timers alone are 100 MB of JSON and most of
the Health page's first render. But a page of :data:`dsmon.store.frames.pages.FRAME_PAGE_ROWS`
records is sealed once full: ids only grow, so no record can join it later. The first
reader to parse a full page therefore keeps its Arrow table (``arrow_table``) in the
``sealed_pages`` table, compressed Arrow IPC, and every later reader of the same page
(another dashboard process, ``dsmon check --store``, a restart) decodes that instead of the
JSON. The ingest server keeps the pages of the runs it writes as they fill
(``dsmon.serve.seal``), and ``dsmon import`` those of what it imported, so that even a run
no one has read yet opens from kept pages. This is how time-series stores seal blocks; the
JSON bodies stay the record of truth.

A kept page is found by what reading the page again would be: run, kind, the id the page
starts after and its length; it records the id of the page's last record, where the next
page starts. It is used only while it still says what the JSON says:

- ``restamps``: the run's count of rows whose step was filled in later
  (:meth:`dsmon.store.records.log.RecordLog.restamps`); a restamp anywhere in the run makes
  its kept pages stale, and the next reader parses the JSON and replaces them. Restamps happen
  once or twice per log (when a collector's step clock first resolves): one more parse;
- ``page_format``: a digest of the kind's columns and of this module's layout, so a dsmon whose
  record model changed never takes another dsmon's page for its own.

A kind's last page, not full yet, is kept as a *tail* (:func:`tail_key`) by a reader that
parsed it with Arrow, by ``dsmon import`` and by the ingest server once a run stops growing.
It is used only while no record of the kind came after its last row; otherwise the page is
read from JSON and the tail kept again, and it is dropped once its page fills. A sparse
kind (a throughput line every ten steps) has its rows spread over the whole store file, so
without a tail its first read from a cold disk is a random read per row.

Keeping a page is best effort: a store opened on a read-only file, or a writer holding the
lock too long, only means the next reader parses the JSON again.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import TYPE_CHECKING, NamedTuple

from dsmon.store.dialect import Dialect

if TYPE_CHECKING:  # Arrow and pandas load with the first frame: the stores' writers never need them
    import pyarrow as pa

logger = logging.getLogger(__name__)

#: Bumped when what a kept page holds changes in a way the kind's schema does not show.
LAYOUT = "1"
#: Arrow IPC's compression: zstd at its default level makes a page of 50,000 timer rows
#: 0.6 MB instead of 9.5, and decodes in a few milliseconds.
COMPRESSION = "zstd"


class PageKey(NamedTuple):
    """Which page a kept table holds, and the state of the run it was read in."""

    run: str
    kind: str
    after_id: int  # the page is the first ``rows`` records of the kind after this id
    rows: int
    restamps: int
    format: str


@functools.cache
def page_format(kind: str) -> str:
    """A digest of how ``kind`` is read into columns: a page of another format is not used."""
    from dsmon.model.arrow_frames import arrow_schema
    from dsmon.model.frames import field_dtypes

    found = arrow_schema(kind)
    text = f"{LAYOUT}|{found.schema if found else None}|{sorted(field_dtypes(kind).items())}"
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def encode(table: pa.Table) -> bytes:
    """A table as compressed Arrow IPC (its schema metadata kept)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=COMPRESSION)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())


def decode(data: bytes) -> pa.Table | None:
    """The table of :func:`encode`, or None (and a warning) when the bytes do not decode."""
    import pyarrow as pa

    try:
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
    except (pa.ArrowInvalid, OSError) as exc:
        logger.warning("dsmon: a kept page does not decode (%s); reading JSON", exc)
        return None


def ddl(d: Dialect) -> tuple[str, ...]:
    """The table of kept pages (see docs/store.md)."""
    return (
        f"""CREATE TABLE IF NOT EXISTS sealed_pages (
            run TEXT NOT NULL,
            kind TEXT NOT NULL,
            after_id BIGINT NOT NULL,
            page_rows INTEGER NOT NULL,
            last_id BIGINT NOT NULL,
            restamps BIGINT NOT NULL,
            page_format TEXT NOT NULL,
            data {d.blob} NOT NULL,
            PRIMARY KEY (run, kind, after_id, page_rows)
        )""",
    )


SELECT = (
    "SELECT data FROM sealed_pages WHERE run = ? AND kind = ? AND after_id = ?"
    " AND page_rows = ? AND restamps = ? AND page_format = ?"
)
UPSERT = (
    "INSERT INTO sealed_pages"
    " (run, kind, after_id, page_rows, restamps, page_format, last_id, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (run, kind, after_id, page_rows) DO UPDATE SET"
    " restamps = excluded.restamps, page_format = excluded.page_format,"
    " last_id = excluded.last_id, data = excluded.data"
)
#: The kept pages of a kind that are still good, as ``after_id -> last_id``: the pages after
#: them are found without decoding any (:meth:`dsmon.store.frames.pages.Frames.keep_sealed`).
CHAIN = (
    "SELECT after_id, last_id FROM sealed_pages WHERE run = ? AND kind = ?"
    " AND page_rows = ? AND restamps = ? AND page_format = ?"
)
DELETE = "DELETE FROM sealed_pages WHERE run = ? AND kind = ? AND after_id = ? AND page_rows = ?"


def tail_key(key: PageKey) -> PageKey:
    """Where the last page of a kind is kept while it is not full: ``rows`` negated.

    Apart from the full page's key, so that :data:`CHAIN` (the pages after which the next
    starts) never follows a page that may still grow.
    """
    return key._replace(rows=-abs(key.rows))


def delete_params(key: PageKey) -> tuple[object, ...]:
    """The parameters of :data:`DELETE`, in its order."""
    return (key.run, key.kind, key.after_id, key.rows)


def select_params(key: PageKey) -> tuple[object, ...]:
    """The parameters of :data:`SELECT`, in its order."""
    return (key.run, key.kind, key.after_id, key.rows, key.restamps, key.format)


def chain_params(key: PageKey) -> tuple[object, ...]:
    """The parameters of :data:`CHAIN` (``key.after_id`` is not one)."""
    return (key.run, key.kind, key.rows, key.restamps, key.format)


def upsert_params(key: PageKey, last_id: int, data: bytes) -> tuple[object, ...]:
    """The parameters of :data:`UPSERT`, in its order."""
    return (*select_params(key), last_id, data)
