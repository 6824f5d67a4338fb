"""Pages read one ahead, in a thread, while the caller works on the page before.

A long run's first look alternates two kinds of work: reading a page of 50k rows (SQLite
hands over a blob, Arrow decodes it) and folding it (pandas). SQLite and Arrow release the
GIL while they work, so reading the next page while this one is folded overlaps the two on a
second core: 0.13-0.18 s of the health checklist's 1.3-1.5 s first look at 100k steps
(``bench/README.md``). The reader stops when the page after the next is read: memory holds
at most two pages beyond the one in use (one waiting to be taken, one read and waiting).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterable, Iterator, Sized
from typing import Generic, TypeVar

T = TypeVar("T")
P = TypeVar("P", bound=Sized)

#: Seconds between looks at the stop flag while the reader waits for room.
POLL_S = 0.05


class _Failed:
    """What the reader raised, handed to the caller to raise in its own thread."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_END = object()


class ReadAhead(Generic[T]):
    """Iterates ``pages`` as they are, each read in a thread while the previous is used.

    The thread starts at once, so the page after the one the caller holds is being read
    while the caller works. An exception of ``pages`` is raised in the caller's thread at
    the point it would have been without the thread. :meth:`close` (also at the end of a
    ``for`` loop broken off, through ``with`` or the generator that holds it) stops the
    reader after the page it is reading and closes ``pages`` in the reader's thread.
    """

    def __init__(self, pages: Iterator[T]) -> None:
        self._pages = pages
        self._box: queue.Queue[object] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._done = False
        self._thread = threading.Thread(target=self._read, name="dsmon-read-ahead", daemon=True)
        self._thread.start()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        if self._done:
            raise StopIteration
        item = self._box.get()
        if item is _END:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failed):
            self._finish()
            raise item.exc
        return item  # type: ignore[return-value]

    def close(self) -> None:
        """Stop reading; returns once the reader has let go of ``pages``."""
        self._stop.set()
        self._finish()

    def __enter__(self) -> ReadAhead[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _finish(self) -> None:
        self._done = True
        self._thread.join()

    def _read(self) -> None:
        """The reader's loop: each page put in the box as soon as there is room."""
        try:
            for page in self._pages:
                if not self._put(page):
                    return
        except BaseException as exc:  # noqa: BLE001 (any: the caller must not wait forever)
            self._put(_Failed(exc))
            return
        finally:
            close = getattr(self._pages, "close", None)
            if close is not None:
                close()
        self._put(_END)

    def _put(self, item: object) -> bool:
        """Wait for room in the box; False when the caller stopped reading first."""
        while not self._stop.is_set():
            try:
                self._box.put(item, timeout=POLL_S)
            except queue.Full:
                continue
            return True
        return False


def read_ahead(pages: Iterable[P], full: int) -> Generator[P, None, None]:
    """``pages`` as they are, read one ahead (:class:`ReadAhead`) from a first page of ``full``.

    A first page of ``full`` rows or more says more follow (a long run's first look). It is
    read here: a live refresh reads one short page, and a thread for it would cost more than
    it saves.
    """
    them = iter(pages)
    first = next(them, None)
    if first is None:
        return
    if len(first) < full:
        yield first
        yield from them
        return
    with ReadAhead(them) as ahead:
        yield first
        yield from ahead
