"""A live writer's WAL copied into the database file by a thread of its own.

In WAL mode SQLite appends each commit to the ``-wal`` file, and by default the commit that
takes the log past 1,000 pages (4 MB) also copies it all into the database file and syncs
both (a checkpoint). For the ingest server that was every third batch of 2,000 records, in
the request being answered: 3.2 of its 11 us a record of SQL were the commit, 1.3 without
the checkpoint. Servers that live on SQLite move the checkpoint off the writer's path, as
this does for the live writers (the ingest server, a dashboard's own ingest): after their
commits a thread with its own connection runs ``PRAGMA wal_checkpoint(PASSIVE)`` at most
every :data:`EVERY_S`, which waits for no reader and no writer, and SQLite releases the GIL
while it copies. The writer's own automatic checkpoint stays as a backstop at
:data:`BACKSTOP_PAGES`, should this thread fall behind or fail.
"""

from __future__ import annotations

import logging
import sqlite3
import threading

logger = logging.getLogger(__name__)

#: Least seconds between two background checkpoints (a pass copies what came since).
EVERY_S = 0.5
#: The writer's own checkpoint then happens only past this many WAL pages (64 MiB).
BACKSTOP_PAGES = 16384


class BackgroundCheckpoint:
    """Checkpoints ``path``'s WAL from a daemon thread, after :meth:`wrote` is called.

    The thread and its connection start with the first :meth:`wrote`; :meth:`close` ends
    them. A checkpoint that fails (a disk error, the file gone) is logged and tried again
    after the next write; the writer's backstop keeps the WAL bounded meanwhile.
    """

    def __init__(self, path: str, every_s: float | None = None) -> None:
        self.path = path
        self.every_s = EVERY_S if every_s is None else every_s
        self.passes = 0
        self._wrote = threading.Event()
        self._stop = threading.Event()
        self._start = threading.Lock()
        self._thread: threading.Thread | None = None

    def wrote(self) -> bool:
        """Note a commit: the thread checkpoints within :attr:`every_s`.

        True when this call started the thread: the writer then raises its own automatic
        checkpoint to :data:`BACKSTOP_PAGES`.
        """
        self._wrote.set()
        if self._thread is not None:
            return False
        with self._start:
            if self._thread is not None or self._stop.is_set():
                return False
            self._thread = threading.Thread(target=self._loop, name="dsmon-checkpoint", daemon=True)
            self._thread.start()
            return True

    def close(self, timeout_s: float = 10.0) -> None:
        """End the thread after its current checkpoint, if it runs one."""
        self._stop.set()
        self._wrote.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _loop(self) -> None:
        try:
            conn = sqlite3.connect(self.path, timeout=1.0, isolation_level=None)
        except sqlite3.Error as exc:
            logger.warning("dsmon: WAL checkpoints stay with the writer: %s", exc)
            return
        try:
            while not self._stop.is_set():
                self._wrote.wait()
                if self._stop.wait(self.every_s):  # commits of the next moments join this pass
                    break
                self._wrote.clear()
                self._checkpoint(conn)
        finally:
            conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.passes += 1
        except sqlite3.Error as exc:
            logger.warning("dsmon: background WAL checkpoint failed, next write retries: %s", exc)
