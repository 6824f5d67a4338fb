"""What a store with typed GPU tables does the same on every backend.

Both the SQLite and the PostgreSQL store keep GPU samples in :mod:`dsmon.store.gpu_tables`
and other records in ``records``: a batch is split between them, reads merge the two in id
order, the GPU questions are answered in SQL (:mod:`dsmon.store.gpu_sql_read`), and a store
an older dsmon wrote (GPU samples as ``records`` rows) has them moved by its first writer.
A backend says only how it runs a call on its connection (:meth:`TypedGpuStore._on_gpu`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

from dsmon.model.records import KINDS, GpuSampleRecord, Record
from dsmon.store.base import (
    BATCH_ROWS,
    EncodedRecord,
    RecordFilter,
    RecordRow,
    Store,
    as_row,
    row_record,
)
from dsmon.store.gpu_reads import GpuFold, iso_text
from dsmon.store.gpu_rows import SampleRow, cut_ms, sample_row
from dsmon.store.gpu_tables import GpuTables

T = TypeVar("T")


class TypedGpuStore(Store):
    """A store whose GPU samples live in the GPU tables (samples without a time stay records)."""

    BODY_KINDS = frozenset(KINDS.keys() - {"gpu"})

    @abstractmethod
    def _on_gpu(self, fn: Callable[[GpuTables], T]) -> T:
        """``fn`` of the GPU tables on the store's connection, in one read snapshot.

        Under the store's lock and error rules.
        """

    def _select_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """Records-table rows merged in id order with GPU samples from their own tables.

        Both are read in one snapshot: a batch committed between two reads could otherwise
        show its GPU samples but not an older batch's records, and a reader paging with
        ``after_id`` would step over those for good.
        """
        if flt.kind not in (None, "gpu") or flt.step_min is not None or flt.step_max is not None:
            return [(i, row_record(body)) for i, body in self._select(flt)]
        return self._on_gpu(lambda t: _merged(t, flt))

    #: A read that says whether the store's per-rank tables hold its records (a row: yes).
    RANKS_READY: ClassVar[str]
    _ranks_ready = False

    def _on_ranks(self, fn: Callable[[GpuTables], T]) -> T | None:
        """``fn`` of the per-rank tables once a writer built them (:mod:`.rank_tables`)."""
        if not self._ranks_ready:
            self._ranks_ready = bool(self._on_gpu(lambda t: t.rows(self.RANKS_READY)))
            if not self._ranks_ready:
                return None
        return self._on_gpu(fn)

    def _gpu_fold(
        self,
        run: str,
        n_buckets: int | None,
        ts_max: str | None,
        gpus: Sequence[str] | None,
        since: GpuFold | None = None,
    ) -> GpuFold:
        """The fold from the roll-ups (or, for a replay cut-off, the samples) in SQL."""
        from dsmon.store import gpu_sql_read as read

        return self._on_gpu(lambda t: read.gpu_fold(t, run, n_buckets, ts_max, gpus, since))

    def _gpu_latest(self, run: str, ts_max: int | None) -> list[GpuSampleRecord]:
        from dsmon.store import gpu_sql_read as read

        return self._on_gpu(lambda t: read.latest(t, run, ts_max))


def _merged(tables: GpuTables, flt: RecordFilter) -> list[tuple[int, Record]]:
    """Records-table rows and GPU samples matching ``flt``, in id order.

    The records-table rows are other kinds, samples without a time and samples an older
    dsmon stored that no writer has moved yet.
    """
    sql, params = flt.select("?")
    rows: list[tuple[int, Record]] = [(int(i), row_record(b)) for i, b in tables.rows(sql, params)]
    t_range = (cut_ms(iso_text(flt.ts_min)), cut_ms(iso_text(flt.ts_max)))
    gpu = tables.select(flt.run, flt.after_id, t_range, flt.limit)
    if not gpu:
        return rows
    merged = sorted(rows + gpu, key=lambda pair: pair[0])  # type: ignore[operator]
    return merged if flt.limit is None else merged[: flt.limit]


def split(
    records: Iterable[Record | EncodedRecord | RecordRow],
) -> Iterator[tuple[list[RecordRow], list[SampleRow]]]:
    """Records in batches: rows for the records table, GPU samples for their own tables.

    A :class:`RecordRow` (the ingest server makes them of checked lines) goes as it is; a
    list of nothing else (a batch of the ingest server without GPU samples) is cut in
    slices, not looked at one record at a time (a microsecond a record, 5 % of ingest).
    """
    if isinstance(records, list) and all(type(r) is RecordRow for r in records):
        for start in range(0, len(records), BATCH_ROWS):
            yield records[start : start + BATCH_ROWS], []
        return
    rows: list[RecordRow] = []
    samples: list[SampleRow] = []
    for item in records:
        made = item if isinstance(item, RecordRow) else _stored_as(item)  # rows: no call
        if isinstance(made, RecordRow):
            rows.append(made)
        else:
            samples.append(made)
        if len(rows) + len(samples) >= BATCH_ROWS:
            yield rows, samples
            rows, samples = [], []
    if rows or samples:
        yield rows, samples


def _stored_as(item: Record | EncodedRecord) -> RecordRow | SampleRow:
    """What one record is stored as: a GPU sample with a time as a sample row, else a row."""
    rec = item.record if isinstance(item, EncodedRecord) else item
    sample = sample_row(rec) if isinstance(rec, GpuSampleRecord) else None
    return as_row(item) if sample is None else sample


#: Old GPU rows converted per step of a migration: memory stays flat on a store of millions.
MOVE_CHUNK = 20_000
#: The next chunk of them: a walk of the id order from the last one moved, never a re-scan.
MOVE_GPU_ROWS = "SELECT id, body FROM records WHERE kind = 'gpu' AND id > ? ORDER BY id LIMIT ?"


def move_gpu_records(tables: GpuTables) -> int:
    """Move GPU samples an older dsmon kept as records into the GPU tables (new ids).

    Runs in the caller's write transaction, :data:`MOVE_CHUNK` rows at a time; returns how
    many were moved. Samples without a time stay records, as new ones do.
    """
    total, after = 0, 0
    while True:
        found = tables.rows(MOVE_GPU_ROWS, (after, MOVE_CHUNK))
        if not found:
            return total
        total += _move_chunk(tables, found)
        after = found[-1][0]


def _move_chunk(tables: GpuTables, found: list[Any]) -> int:
    """Move one chunk of old GPU rows; how many were new in the GPU tables."""
    moved: list[SampleRow] = []
    ids: list[tuple[int]] = []
    for rec_id, body in found:
        rec = row_record(body)
        row = sample_row(rec) if isinstance(rec, GpuSampleRecord) else None
        if row is not None:
            moved.append(row)
            ids.append((rec_id,))
    if not moved:
        return 0
    tables.execute_many("DELETE FROM records WHERE id = ?", ids)
    counts: dict[str, int] = {}
    for row in moved:
        counts[row.key.run] = counts.get(row.key.run, 0) + 1
    tables.execute_many(
        "UPDATE run_kinds SET n = n - ? WHERE run = ? AND kind = 'gpu'",
        [(n, run) for run, n in counts.items()],
    )
    tables.execute("DELETE FROM run_kinds WHERE kind = 'gpu' AND n <= 0")
    return tables.add(moved)
