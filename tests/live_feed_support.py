"""A real run's records stored a few at a time, as a live collector sends them, with a check
after every refresh of the dashboard's frames: shared by the tests of what the dashboard keeps
as a run grows (sorted figures, trace positions)."""

from __future__ import annotations

from collections.abc import Callable

from lanes import LIVE_RECORDS, head
from locations import DATA
from shared_fixtures import read_log

from dsmon.model.records import Record
from dsmon.store.store import Store
from dsmon.view.cache import RunFrames


def records_of(name: str) -> list[Record]:
    """The records of the real run ``tests/data/<name>/train.log``; in the fast lane, its
    first :data:`lanes.LIVE_RECORDS`."""
    return list(head(read_log(DATA / name / "train.log", name), LIVE_RECORDS))


def feed(
    store: Store, run: str, recs: list[Record], chunk: int, check: Callable[[RunFrames], int]
) -> tuple[RunFrames, int]:
    """Store ``recs`` ``chunk`` at a time, refreshing and checking after each; the checks' sum."""
    frames, total = RunFrames(store, run), 0
    for start in range(0, len(recs), chunk):
        store.add(recs[start : start + chunk])
        frames.refresh()
        total += check(frames)
    return frames, total
