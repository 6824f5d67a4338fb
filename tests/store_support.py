"""Store helpers several store and server tests share: restamped records, kept sealed pages."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest
from sql_support import Rows, sql_rows

from dsmon.model.frames import records_frame
from dsmon.model.records import Record
from dsmon.store.base import RecordFilter, Store


def restamped(records: list[Record]) -> tuple[list[Record], list[Record]]:
    """Records first sent without their step, then with it (as a live collector does)."""
    late = [
        dataclasses.replace(r, src=dataclasses.replace(r.src, file="late.log"))
        for r in records
        if r.step is not None
    ]
    return [dataclasses.replace(r, step=None) for r in late], late


def kept_chunks(store: Store) -> Rows:
    return sql_rows(store, "SELECT kind, after_id, page_rows, restamps FROM frame_chunks")


def fetched_pages(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Each read of JSON bodies from now on: its kind and how many rows it fetched."""
    reads: list[tuple[str, int]] = []
    real = store._select_bodies

    def counting(flt: RecordFilter) -> list[tuple[int, bytes]]:
        rows = real(flt)
        reads.append((str(flt.kind), len(rows)))
        return rows

    monkeypatch.setattr(store, "_select_bodies", counting)
    return reads


def kept_tails(store: Store) -> Rows:
    """The kept tails (last pages not full) as (kind, after_id)."""
    return sql_rows(store, f"SELECT kind, after_id FROM frame_chunks WHERE page_rows = {-PAGE}")


def frame_from_records(store: Store, run: str, kind: str) -> pd.DataFrame:
    pairs = store.id_records(RecordFilter(run, kind))
    return records_frame(kind, [r for _, r in pairs], [i for i, _ in pairs])


PAGE = 7
