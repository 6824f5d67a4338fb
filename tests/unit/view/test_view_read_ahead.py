"""Pages read one ahead in a thread (dsmon.view.read_ahead): same pages, errors, early stops.

The threads are real; the events make each test wait for what it checks instead of sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from dsmon.view.read_ahead import ReadAhead, read_ahead

WAIT_S = 10.0


class Source:
    """Pages of ``size`` rows each, recording which were read and whether it was closed."""

    def __init__(self, sizes: list[int], fail_at: int | None = None) -> None:
        self.sizes = sizes
        self.fail_at = fail_at
        self.read: list[int] = []
        self.readers: list[threading.Thread] = []
        self.closed = threading.Event()
        self.reached = [threading.Event() for _ in sizes]

    @property
    def threads(self) -> set[str]:
        """Names of the threads that read a page."""
        return {t.name for t in self.readers}

    def pages(self) -> Iterator[list[int]]:
        try:
            for i, size in enumerate(self.sizes):
                if i == self.fail_at:
                    raise OSError(f"page {i} unreadable")
                self.readers.append(threading.current_thread())
                self.read.append(i)
                self.reached[i].set()
                yield [i] * size
        finally:
            self.closed.set()


def test_pages_come_as_they_are_and_in_order() -> None:
    source = Source([5, 5, 5, 2])
    assert list(read_ahead(source.pages(), full=5)) == [[0] * 5, [1] * 5, [2] * 5, [3] * 2]
    assert source.closed.is_set()
    assert "dsmon-read-ahead" in source.threads  # the pages after the first: in the reader


def test_a_short_first_page_is_read_without_a_thread() -> None:
    source = Source([2])
    assert list(read_ahead(source.pages(), full=5)) == [[0] * 2]
    assert source.threads == {threading.current_thread().name}


def test_the_next_page_is_read_while_the_caller_holds_one() -> None:
    source = Source([5, 5, 5])
    pages = read_ahead(source.pages(), full=5)
    assert next(pages) == [0] * 5
    assert source.reached[1].wait(WAIT_S)  # page 1 read with nobody asking for it
    pages.close()
    assert source.read[:2] == [0, 1]


def test_an_error_of_the_source_is_raised_in_the_callers_thread_where_it_was() -> None:
    source = Source([5, 5, 5], fail_at=2)
    got = []
    with pytest.raises(OSError, match="page 2 unreadable"):
        for page in read_ahead(source.pages(), full=5):
            got.append(page[0])
    assert got == [0, 1]
    assert source.closed.is_set()


def test_stopping_early_stops_the_reader_and_closes_the_source() -> None:
    source = Source([5] * 100)
    pages = ReadAhead(source.pages())
    assert next(pages) == [0] * 5
    pages.close()
    assert source.closed.is_set()  # close() returns once the reader let go
    assert len(source.read) <= 3  # the page taken, the one waiting, the one being read
    assert not any(t.is_alive() for t in source.readers)
    with pytest.raises(StopIteration):
        next(pages)
