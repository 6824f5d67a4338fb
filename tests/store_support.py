"""Store helpers several store and server tests share: restamped records, kept sealed pages,
a real run's records as ``dsmon import`` reads them, stored in batches."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pandas as pd
import pytest
from locations import DATA
from sql_support import Rows, store_sql

from dsmon.load.files import import_paths
from dsmon.model.frames import records_frame
from dsmon.model.records import Record
from dsmon.store.records.filter import RecordFilter
from dsmon.store.store import Store, open_store


def restamped(records: list[Record]) -> tuple[list[Record], list[Record]]:
    """Records first sent without their step, then with it (as a live collector does)."""
    late = [
        dataclasses.replace(r, src=dataclasses.replace(r.src, file="late.log"))
        for r in records
        if r.step is not None
    ]
    return [dataclasses.replace(r, step=None) for r in late], late


PAGE = 7


def kept_chunks(store: Store) -> Rows:
    return store_sql(store, "SELECT kind, after_id, page_rows, restamps FROM sealed_pages")


def fetched_pages(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each read of JSON bodies from now on: its kind and how many rows it fetched."""
    reads: list[tuple[str, int]] = []
    real = store._log.select_bodies

    def counting(flt: RecordFilter) -> list[tuple[int, bytes]]:
        rows = real(flt)
        reads.append((str(flt.kind), len(rows)))
        return rows

    monkeypatch.setattr(store._log, "select_bodies", counting)
    return reads


def kept_tails(store: Store) -> Rows:
    """The kept tails (last pages not full) as (kind, after_id)."""
    return store_sql(store, f"SELECT kind, after_id FROM sealed_pages WHERE page_rows = {-PAGE}")


def frame_from_records(store: Store, run: str, kind: str) -> pd.DataFrame:
    pairs = store.id_records(RecordFilter(run, kind))
    return records_frame(kind, [r for _, r in pairs], [i for i, _ in pairs])


def folder_records(folder: str, run: str) -> list[Record]:
    """The records of a real run folder of tests/data, read as ``dsmon import`` reads them."""
    tmp = open_store(":memory:")
    import_paths(tmp, [DATA / folder], run=run)
    recs = [r for _, r in tmp.id_records(RecordFilter(run))]
    tmp.close()
    return recs


def add_in_batches(store: Store, recs: Sequence[Record], size: int) -> None:
    """Store ``recs`` ``size`` at a time, as a live collector's batches come."""
    for start in range(0, len(recs), size):
        store.add(recs[start : start + size])
