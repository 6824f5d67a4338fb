"""Benchmark: reading a long run's frames from kept sealed pages against parsing their JSON.

Builds a store of ``--steps`` optimizer steps of what DeepSpeed 0.19 prints on rank 0 with
``wall_clock_breakdown`` (the records of ``bench/pages.py``: three timer lines, a step line
and every tenth step a ThroughputTimer line), then reads the timer and step frames of the
run with ``Store.frames.frame`` (what the dashboard's first look and ``dsmon check --store`` do)
three ways, each on a fresh store object:

- ``json``: no page kept (the table emptied first): every page parsed from its JSON, the
  full ones then kept;
- ``chunks``: the same read again: the full pages decoded from their kept tables;
- ``keep``: ``Store.frames.keep_sealed`` on the run with no page kept (what ``dsmon import`` and the
  ingest server add to their work).

It checks that the frames read from chunks equal the frames read from JSON, and prints the
seconds of each and the ratio json/chunks. ``--store-url postgresql://...`` measures a
PostgreSQL store instead of a SQLite file in a temporary folder; it must name an empty
database (or schema), which is left filled.

Usage: ``python bench/frame_chunks.py [--steps 100000] [--store-url URL]``
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dsmon.store.store import Store, open_store  # noqa: E402
from dsmon.store.url import sqlite_file  # noqa: E402
from pages import RUN, steps  # noqa: E402  (the records of bench/pages.py)

KINDS = ("timer", "step")


def _drop_chunks(url: str) -> None:
    """Empty the store's sealed_pages table: the next read is its first reader's."""
    sql = "DELETE FROM sealed_pages"
    path = sqlite_file(url)
    if path is None:
        from psycopg import connect

        with connect(url, autocommit=True) as conn:
            conn.execute(sql)
        return
    import sqlite3

    with sqlite3.connect(path) as conn:
        conn.execute(sql)


def _timed(url: str, what: str) -> tuple[float, dict[str, pd.DataFrame]]:
    """Seconds of one read of the run's frames (or of keep_sealed), on a fresh store object."""
    store: Store = open_store(url)
    start = time.perf_counter()
    frames: dict[str, pd.DataFrame] = {}
    if what == "keep":
        store.frames.keep_sealed(RUN)
    else:
        frames = {kind: store.frames.frame(RUN, kind) for kind in KINDS}
    seconds = time.perf_counter() - start
    store.close()
    return seconds, frames


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--store-url", help="postgresql://... (default: SQLite in a temp folder)")
    args = ap.parse_args()
    url = args.store_url or str(Path(tempfile.mkdtemp()) / "chunks.sqlite")
    with open_store(url) as store:
        start = time.perf_counter()
        store.add(steps(1, args.steps))
        info = next(i for i in store.runs() if i.name == RUN)
    print(f"store: {'PostgreSQL' if args.store_url else 'SQLite'}")
    print(
        f"stored {args.steps:,} steps ({info.kinds.get('timer', 0):,} timer, "
        f"{info.kinds.get('step', 0):,} step records) in {time.perf_counter() - start:.0f} s"
    )
    with open_store(url) as store:  # imports and first calls, out of the figures
        store.frames.frame(RUN, "throughput")
    _drop_chunks(url)
    json_s, parsed = _timed(url, "json")
    chunk_s, decoded = _timed(url, "chunks")
    for kind in KINDS:
        pd.testing.assert_frame_equal(decoded[kind], parsed[kind])
    _drop_chunks(url)
    keep_s, _ = _timed(url, "keep")
    print(f"timer and step frames from JSON: {json_s:.2f} s")
    print(f"the same from kept chunks: {chunk_s:.2f} s (frames equal)")
    print(f"keep_chunks with none kept: {keep_s:.2f} s")
    print(f"ratio json/chunks: {json_s / chunk_s:.1f}")


if __name__ == "__main__":
    main()
