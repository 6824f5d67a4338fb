"""The ingest server keeps the sealed pages of the runs it writes, in the background.

A dashboard opening a run decodes the pages kept as typed columns
(:mod:`dsmon.store.frames.sealed`) and parses only the rest of its JSON. A page is kept by the
first reader of the whole page; but a dashboard following a live run reads a few new rows at
a time, never a whole page, so a run sent live for a day had no page kept: its first look
after a dashboard restart, or a post-mortem the next morning, parsed all of its JSON. The
server that writes the run keeps its pages as they fill instead: every :data:`SEAL_EVERY_S`,
for each run that grew, :meth:`dsmon.store.frames.pages.Frames.keep_sealed` parses only the pages
sealed since the last pass. A run that grew and then stopped for a pass (ended, or quiet
for :data:`SEAL_EVERY_S`) gets the last page of each kind kept as well, not full: a sparse
kind (a throughput line every ten steps) may have no full page at all, and its rows lie all
over the store file, which a cold disk reads slowly.

The thread starts with the first write and works only after writes; a pass holds the store's
lock only for its reads and its one insert per page, as a dashboard's read would.
"""

from __future__ import annotations

import logging
import threading

from dsmon.store.errors import StoreError
from dsmon.store.store import Store

logger = logging.getLogger(__name__)

#: Seconds between passes. A page of a kind is 50,000 records; even a busy run fills one a
#: minute, and a pass that finds nothing new costs one read of the run list.
SEAL_EVERY_S = 30.0


class PageSealer:
    """Keeps the sealed pages of the runs written to ``store``, ``every_s`` after writes.

    ``every_s``: seconds between passes (default :data:`SEAL_EVERY_S`).
    """

    def __init__(self, store: Store, every_s: float | None = None) -> None:
        self.store = store
        self.every_s = SEAL_EVERY_S if every_s is None else every_s
        self._wrote = threading.Event()
        self._stop = threading.Event()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None
        self._seen: dict[str, int] = {}  # run -> its last id at the last pass
        self._grew: set[str] = set()  # runs that grew in the last pass: tails to keep

    def wrote(self) -> None:
        """Note that records were stored (the first call starts the thread)."""
        self._wrote.set()
        if self._thread is None:
            with self._start:
                if self._thread is None and not self._stop.is_set():
                    self._thread = threading.Thread(
                        target=self._loop, name="dsmon-seal", daemon=True
                    )
                    self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread (after the run it is on): call before the store is closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            if self._wrote.is_set() or self._grew:
                self._wrote.clear()
                try:
                    self.seal()
                except Exception:
                    if self._stop.is_set():
                        return  # the store was closed under a long pass, at shutdown
                    raise

    def seal(self) -> int:
        """One pass: the pages sealed since the last one, of every run that grew; how many.

        The runs that grew in the last pass and not since get their last pages kept too.
        A store error is logged and the pass ends; the next one tries again.
        """
        kept = 0
        try:
            for info in self.store.runs():
                if self._stop.is_set():
                    break
                if info.last_id > self._seen.get(info.name, 0):
                    kept += self.store.frames.keep_sealed(info.name)
                    self._seen[info.name] = info.last_id
                    self._grew.add(info.name)
                elif info.name in self._grew:
                    kept += self.store.frames.keep_sealed(info.name, tail=True)
                    self._grew.discard(info.name)
        except StoreError as exc:
            logger.warning("dsmon ingest: keeping sealed pages failed, next pass retries: %s", exc)
        if kept:
            logger.info("dsmon ingest: kept %d sealed page(s) as typed columns", kept)
        return kept
