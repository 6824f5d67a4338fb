"""A run's records of one kind as frames: read in pages, from kept sealed pages where it can.

The dashboard, ``dsmon check --store`` and the summary read a run's records of one kind as a
DataFrame (:func:`dsmon.model.frames.records_frame`'s columns). A whole kind is read
:data:`FRAME_PAGE_ROWS` records at a time, so only one page's JSON is in memory; a full page
is sealed, and its Arrow table is kept in the store and decoded by later readers instead of
the JSON (:mod:`dsmon.store.frames.sealed`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from dsmon.store.backend import Backend, Db
from dsmon.store.errors import StoreError
from dsmon.store.frames import sealed
from dsmon.store.frames.sealed import PageKey
from dsmon.store.records.filter import RecordFilter
from dsmon.store.records.log import BODY_KINDS, RecordLog

if TYPE_CHECKING:  # pandas and Arrow load with the first frame: collectors never need them
    import pandas as pd
    import pyarrow as pa

logger = logging.getLogger(__name__)
#: Frames of fewer rows are read in Python: Arrow's fixed cost per call is not worth it.
ARROW_MIN_ROWS = 2000
#: Rows read at a time by :meth:`Frames.frame` of a whole kind (the dashboard's page size),
#: and so the rows of a kept sealed page: what a first look still parses as JSON is the last,
#: unsealed page, at most this many rows.
FRAME_PAGE_ROWS = 50_000


class Frames:
    """Frames of a run's kinds, read from the record log and the pages kept of it."""

    def __init__(self, backend: Backend, log: RecordLog) -> None:
        self._backend = backend
        self._log = log

    def frame(
        self,
        run: str,
        kind: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        ts_min: str | datetime | None = None,
        ts_max: str | datetime | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame:
        """One row per record of one kind: see :func:`dsmon.model.frames.records_frame`.

        A whole kind of JSON bodies is read in pages (:meth:`pages`) and joined. In one
        read, a long run's timers had their JSON bodies, the bodies joined for Arrow and
        Arrow's table in memory at once: 4.6 GB at peak for a frame of 0.9 GB (2.5 million
        timer rows). The dashboard keeps the same pages apart (``dsmon.view.cache``), so
        ``dsmon check --store`` sees the frames its Health page sees.
        """
        flt = RecordFilter(run, kind, step_min, step_max, ts_min, ts_max, after_id, limit)
        if limit is None and kind in BODY_KINDS:
            return _joined(list(self._pages(flt)))
        return self._one_read(flt)

    def keep_sealed(self, run: str, *, tail: bool = False) -> int:
        """Keep the table of each sealed page of ``run`` not kept yet; how many it kept.

        ``dsmon import`` calls it, and the ingest server as a run grows
        (``dsmon.serve.seal``): the first look at the run then decodes kept pages instead of
        parsing the JSON (:mod:`dsmon.store.frames.sealed`). The kept pages are passed over by
        their ids, unread; one page is held at a time. ``tail``: each kind's last page, not
        full, is kept too (a run that stopped growing: an import, a run gone quiet).
        """
        info = next((i for i in self._log.runs() if i.name == run), None)
        kinds = {} if info is None else info.kinds
        kept = 0
        for kind, n in sorted(kinds.items()):
            if kind in BODY_KINDS and (n >= FRAME_PAGE_ROWS or (tail and n > 0)):
                flt = RecordFilter(run, kind, limit=FRAME_PAGE_ROWS)
                kept += self._keep_kind(flt, n, tail)
        if kept:  # what parsing the pages freed, back to the system (not to Arrow's pool)
            _release_unused()
        return kept

    def _keep_kind(self, flt: RecordFilter, n: int, tail: bool) -> int:
        """:meth:`keep_sealed` of one kind of ``n`` records, walked page by page as :meth:`_pages`.

        Only their tables: frames no one reads added a tenth to its time and peak memory. The
        last page, not full, is read only for ``tail``: the server asks every 30 s, and
        parsing a growing run's last pages each time cost it a third of a second a kind.
        """
        restamps = self._log.restamps(flt.run)
        after, chain, passed = 0, self._kept_chain(self._page_key(flt, restamps)), 0
        while after in chain:
            after, passed = chain[after], passed + 1
        kept = 0
        while n - passed * FRAME_PAGE_ROWS >= FRAME_PAGE_ROWS:  # a full page not kept yet
            table, rows = self._page_table(replace(flt, after_id=after or None), restamps)
            size = len(rows) if table is None else table.num_rows
            if size < FRAME_PAGE_ROWS:
                break
            after = int(rows[-1][0] if table is None else table.column("id")[size - 1].as_py())
            passed += 1
            if table is not None:  # a page Arrow cannot read is never kept
                kept += 1
        if tail and n > passed * FRAME_PAGE_ROWS:
            table, _ = self._page_table(replace(flt, after_id=after or None), restamps, least=1)
            kept += int(table is not None and table.num_rows < FRAME_PAGE_ROWS)
        return kept

    def pages(self, run: str, kind: str, *, after_id: int | None = None) -> Iterator[pd.DataFrame]:
        """:meth:`frame` of the rows after ``after_id``, :data:`FRAME_PAGE_ROWS` rows a page.

        Only one page's stored JSON is in memory at a time. The last page is shorter than the
        others (empty when the rows fill whole pages).
        """
        return self._pages(RecordFilter(run, kind, after_id=after_id))

    def _pages(self, flt: RecordFilter) -> Iterator[pd.DataFrame]:
        """The pages of ``flt``'s rows: those of a whole kind from kept pages where they can.

        The run's restamp count, part of every kept page's key, is read once for all the pages.
        Tails are for the pages of a kind read from its start (no ``after_id``, or 0 as the
        dashboard's first look asks): a refresh reads from the last id it saw, and a tail
        kept there would never be asked for again.
        """
        sealable = str(flt.kind) in BODY_KINDS and flt.whole_kind()
        after, restamps = flt.after_id, self._log.restamps(flt.run) if sealable else 0
        tails = not flt.after_id
        while True:
            one = replace(flt, after_id=after, limit=FRAME_PAGE_ROWS)
            page = self._page(one, restamps, tails) if sealable else self._one_read(one)
            yield page
            if len(page) < FRAME_PAGE_ROWS:
                break
            after = int(page["id"].iloc[-1])
        if after != flt.after_id:  # pages read past the first: see keep_sealed
            _release_unused()

    def _page(self, flt: RecordFilter, restamps: int, tails: bool) -> pd.DataFrame:
        """One page of a whole kind: from its kept table, else from JSON (then kept if full)."""
        from dsmon.model.arrow_frames import table_frame

        table, rows = self._page_table(flt, restamps, tails=tails)
        return self._one_read(flt, rows) if table is None else table_frame(str(flt.kind), table)

    def _page_table(
        self, flt: RecordFilter, restamps: int, *, tails: bool = True, least: int | None = None
    ) -> tuple[pa.Table | None, list[tuple[int, bytes]]]:
        """A page's Arrow table: kept, else its JSON parsed (and kept: see below).

        None when Arrow cannot read the JSON, with the ``(id, body)`` rows it was given; the
        rows are ``[]`` when the table was kept. A full page is kept. With ``tails``, so is a
        kind's last page, not full, as a *tail* (:func:`sealed.tail_key`) when Arrow
        reads it (Arrow reads ``least`` rows or more, :data:`ARROW_MIN_ROWS` unless given); a
        tail is used while no record of the kind came after it. A sparse kind's rows lie all
        over the store file (a throughput line every ten steps): reading the 10,000 of a
        100k-step run from a cold disk took 26 s (`bench/README.md`).
        """
        from dsmon.model.arrow_frames import arrow_table

        kind, limit, key = str(flt.kind), int(flt.limit or 0), self._page_key(flt, restamps)
        table = self._kept(key)
        if table is not None and table.num_rows == limit:
            return table, []
        kept_tail = self._kept(sealed.tail_key(key)) if tails else None
        if kept_tail is not None and self._ends_kind(flt, kept_tail):
            return kept_tail, []
        rows = self._log.select_bodies(flt)
        least = ARROW_MIN_ROWS if least is None else least
        table = arrow_table(kind, *_unzipped(rows)) if len(rows) >= least else None
        if table is None or not table.num_rows:
            return table, rows
        last = int(table.column("id")[-1].as_py())
        if table.num_rows == limit:
            self._save(key, last, sealed.encode(table))
            if kept_tail is not None:  # the page filled: its tail says nothing more
                self._drop(sealed.tail_key(key))
        elif tails:
            self._save(sealed.tail_key(key), last, sealed.encode(table))
        return table, rows

    def _kept(self, key: PageKey) -> pa.Table | None:
        """The kept table ``key`` names, None if there is none, it cannot be read or decoded."""
        try:
            found = self._backend.read(lambda db: db.rows(sealed.SELECT, sealed.select_params(key)))
        except StoreError:  # unreadable: the page is parsed from JSON
            return None
        return sealed.decode(bytes(found[0][0])) if found else None

    def _kept_chain(self, key: PageKey) -> dict[int, int]:
        """The good kept pages of ``key``'s kind, ``after_id -> last_id`` (not ``key.after_id``)."""
        try:
            rows = self._backend.read(lambda db: db.rows(sealed.CHAIN, sealed.chain_params(key)))
        except StoreError as exc:  # the pages are parsed again
            logger.info("dsmon: kept pages not readable: %s", exc)
            return {}
        return {int(a): int(b) for a, b in rows}

    def _save(self, key: PageKey, last_id: int, data: bytes) -> None:
        """Keep a sealed page's table for later readers; best effort (:mod:`.sealed`).

        A page being drawn waits for other writers only briefly (a writer may hold SQLite's
        lock for seconds); the next reader can keep the page as well.
        """
        params = sealed.upsert_params(key, last_id, data)
        self._write(key, "kept", lambda db: db.execute(sealed.UPSERT, params))

    def _drop(self, key: PageKey) -> None:
        """Forget a kept page (a tail whose page filled); a tail left behind is never used."""
        params = sealed.delete_params(key)
        self._write(key, "dropped", lambda db: db.execute(sealed.DELETE, params))

    def _write(self, key: PageKey, done: str, fn: Callable[[Db], None]) -> None:
        """``fn`` in a brief write of its own: a read-only file or role parses JSON next time."""
        try:
            self._backend.write_briefly(fn)
        except StoreError as exc:
            logger.info("dsmon: sealed page of %s not %s: %s", key.kind, done, exc)

    def _ends_kind(self, flt: RecordFilter, table: pa.Table) -> bool:
        """Whether no record of ``flt``'s kind came after the last row of ``table``."""
        if not table.num_rows:
            return False
        last = int(table.column("id")[-1].as_py())
        return not self._log.select_bodies(replace(flt, after_id=last, limit=1))

    @staticmethod
    def _page_key(flt: RecordFilter, restamps: int) -> PageKey:
        """The key of the page ``flt`` reads, in the run's state of ``restamps``."""
        kind = str(flt.kind)
        return PageKey(
            flt.run, kind, flt.after_id or 0, int(flt.limit or 0), restamps,
            sealed.page_format(kind),
        )  # fmt: skip

    def _one_read(
        self, flt: RecordFilter, rows: list[tuple[int, bytes]] | None = None
    ) -> pd.DataFrame:
        """The frame of the rows ``flt`` selects, from their JSON bodies where kept, in one go.

        ``rows``: the bodies already read, when Arrow refused them (the Python reader's turn).
        """
        from dsmon.model.arrow_frames import arrow_frame
        from dsmon.model.frames import bodies_frame, records_frame

        kind = str(flt.kind)
        if kind not in BODY_KINDS:
            pairs = self._log.select_records(flt)
            return records_frame(kind, [rec for _, rec in pairs], [i for i, _ in pairs])
        tried = rows is not None
        rows = self._log.select_bodies(flt) if rows is None else rows
        ids, bodies = _unzipped(rows)
        fast = arrow_frame(kind, ids, bodies) if len(rows) >= ARROW_MIN_ROWS and not tried else None
        return fast if fast is not None else bodies_frame(kind, ids, bodies)


def _release_unused() -> None:
    """What Arrow freed of the pages read, back to the system: pandas cannot reuse it."""
    from dsmon.model.arrow_frames import release_unused

    release_unused()


def _unzipped(rows: list[tuple[int, bytes]]) -> tuple[list[int], list[bytes]]:
    """Ids and bodies of ``(id, body)`` rows, as two lists."""
    return [i for i, _ in rows], [b for _, b in rows]


def _joined(pages: list[pd.DataFrame]) -> pd.DataFrame:
    """Pages of one frame as one (the empty last page left out)."""
    from dsmon.model.joined import concat

    if len(pages) > 1 and pages[-1].empty:
        pages = pages[:-1]
    if len(pages) == 1:
        return pages[0]
    return concat(pages)
