"""The store: where records live, one object made of a backend and the parts that keep them.

A :class:`Store` holds a backend (a SQLite file or a PostgreSQL database: what differs
between the engines, :mod:`dsmon.store.backend`) and these parts, each with its tables:

- the record log (:mod:`dsmon.store.records`): every record in id order, with per-run
  bookkeeping. The store's own methods (:meth:`Store.add`, :meth:`~Store.runs`,
  :meth:`~Store.records`, ...) are the record log's;
- ``store.gpu`` (:mod:`dsmon.store.gpu`): GPU samples in typed tables with roll-ups, and the
  questions pages and rules ask of them (summary, buckets, newest samples);
- ``store.ranks`` (:mod:`dsmon.store.ranks`): per-step and per-rank tables of the probe's
  records, kept as they arrive;
- ``store.timers`` (:mod:`dsmon.store.timers`): the engine timers' step breakdown, kept as
  timer records arrive; ``store.skips`` (:mod:`dsmon.store.skips`): each run's newest
  skipped-step count;
- ``store.frames`` (:mod:`dsmon.store.frames`): a run's kinds as frames, read in pages, with
  sealed pages kept as Arrow tables.

A write is where the parts meet: a batch is split between the GPU tables and ``records``,
and the per-rank and timer tables take what it added, all in one transaction. Writes are idempotent
(a record's identity is :func:`dsmon.model.records.record_key`).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import operator
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from dsmon.model.records import GpuSampleRecord, Record
from dsmon.model.wire import EncodedRecord
from dsmon.store.backend import Backend, Db
from dsmon.store.dialect import Dialect
from dsmon.store.errors import StoreError
from dsmon.store.frames import sealed
from dsmon.store.frames.pages import Frames
from dsmon.store.gpu import sql as gpu_sql
from dsmon.store.gpu.rows import SampleRow, sample_row
from dsmon.store.gpu.samples import GpuSamples
from dsmon.store.ranks import sql as ranks_sql
from dsmon.store.ranks.tables import RANK_KINDS, RankTables
from dsmon.store.records import sql as records_sql
from dsmon.store.records.added import Added
from dsmon.store.records.filter import RecordFilter
from dsmon.store.records.log import SCAN_BODY_ROWS, SCAN_ROWS, RecordLog
from dsmon.store.records.rows import KIND_AT, RUN_AT, RecordRow, Row, as_row
from dsmon.store.records.runs import KindStats, RunInfo
from dsmon.store.skips import STEP_KIND, StepSkips
from dsmon.store.skips import ddl as skips_ddl
from dsmon.store.sqlite import SQLiteBackend
from dsmon.store.timers import sql as timers_sql
from dsmon.store.timers.tables import TimerTables
from dsmon.store.url import redact_url, sqlite_file

#: The kinds whose new records a write brings into summary tables (per-rank, timers, skips).
_SUMMED_KINDS = RANK_KINDS | {timers_sql.TIMER_KIND, STEP_KIND}
#: A row's run and kind, taken in compiled code (a field's name costs a lookup a row).
_RUN, _KIND = (
    operator.itemgetter(RUN_AT),
    operator.itemgetter(KIND_AT),
)
#: Records written per transaction: large enough to amortise the commit, small enough
#: that a reader never waits long and memory stays flat on a 500 MB import.
BATCH_ROWS = 5000


@dataclasses.dataclass(frozen=True, slots=True)
class RowBatch:
    """Records already made into what the store writes: ``records`` rows and GPU sample rows.

    The ingest server makes them of the lines it checked, without building records
    (``dsmon.serve.rows``); :meth:`Store.add` stores them as they are.
    """

    rows: list[Row]
    samples: list[SampleRow]
    #: The lines the server decoded of the kinds the summary tables read (timers, rank steps,
    #: step lines), by index in ``rows``: the tables read their fields here instead of
    #: decoding the bodies again (any row left out is decoded from its body). Not part of
    #: what the batch stores, so not compared.
    decoded: Mapping[int, Any] = dataclasses.field(default_factory=dict, compare=False)

    def __len__(self) -> int:
        return len(self.rows) + len(self.samples)


def schema(d: Dialect) -> tuple[str, ...]:
    """Every table of a store, each part's (see docs/store.md)."""
    return (
        *records_sql.ddl(d), *gpu_sql.ddl(d), *ranks_sql.ddl(d), *timers_sql.ddl(d), *skips_ddl(d),
        *sealed.ddl(d),
    )  # fmt: skip


class Store:
    """A store of records on one backend; see the module docstring for its parts.

    Args:
        backend: the database; a new one gets the tables, an existing one's schema version
            is checked.

    Raises:
        StoreError: the store cannot be opened, or is of another schema version.
    """

    def __init__(self, backend: Backend) -> None:
        backend.prepare(schema(backend.dialect))
        self.backend = backend
        self.gpu = GpuSamples(backend)
        self.ranks = RankTables(backend)
        self.timers = TimerTables(backend)
        self.skips = StepSkips(backend)
        self._log = RecordLog(backend, self.gpu)
        self.frames = Frames(backend, self._log)

    @property
    def url(self) -> str:
        """The store as it was named (a path, or a URL with its password)."""
        return self.backend.url

    # --- writes -----------------------------------------------------------------------------

    def add(
        self,
        records: Iterable[Record | EncodedRecord | RecordRow] | RowBatch,
        *,
        live: bool = False,
    ) -> int:
        """Store the records not stored yet, committing every few thousand; returns how many.

        A :class:`RecordRow`, and a :class:`RowBatch`, are stored as they are: the ingest
        server makes them of the lines it checked, without building records
        (``dsmon.serve.rows``).

        ``live``: they come from a live sender, so the run's ``received_at`` is set to now.
        """
        inserted = 0
        for rows, samples, decoded in split(records):
            write = functools.partial(
                self._write, rows=rows, samples=samples, live=live, decoded=decoded
            )
            inserted += self.backend.write(write, undo=self.gpu.forget)
        if live and inserted:
            self.backend.wrote_live()
        return inserted

    def _write(
        self,
        db: Db,
        rows: list[Row],
        samples: list[SampleRow],
        live: bool,
        decoded: Mapping[int, Any],
    ) -> int:
        """One batch, in the write transaction: GPU samples, records, per-rank and timer tables.

        ``decoded``: lines of ``rows`` decoded already, by index (:attr:`RowBatch.decoded`).
        """
        if live:
            self._log.note_received(db, {*map(_RUN, rows), *(s.key.run for s in samples)})
        new = self.gpu.add(db, samples)
        if rows:
            kinds = set(map(_KIND, rows))
            before = self._log.max_id(db) if kinds & _SUMMED_KINDS else 0
            inserted = db.insert_records(rows)
            if inserted.new and kinds & _SUMMED_KINDS:
                if inserted.first_id is None:
                    added = Added(before, kinds)
                else:  # every row new, their ids known: no part reads them back
                    added = Added(before, kinds, rows, inserted.first_id, decoded)
                self.ranks.update(db, added)
                self.timers.update(db, added)
                self.skips.update(db, added)
            if inserted.new < len(rows) and timers_sql.TIMER_KIND in kinds:  # restamps, or twice
                stamped = [
                    r.key
                    for r in map(RecordRow._make, rows)  # plain tuples from the server
                    if r.kind == timers_sql.TIMER_KIND and r.step is not None
                ]
                self.timers.restamped(db, stamped)
            new += inserted.new
        return new

    def check_writable(self) -> None:
        """Commit a write that changes nothing, or raise :class:`StoreError` saying why not.

        Reading proves little: a store on a full disk, a read-only mount or a corrupt file
        still answers reads while every write fails. The ingest server's ``/healthz`` asks.
        """
        self.backend.check_writable()

    # --- the record log ---------------------------------------------------------------------

    def runs(self) -> list[RunInfo]:
        """Every run in the store, by name."""
        return self._log.runs()

    def kind_stats(self, run: str) -> list[KindStats]:
        """Per kind of ``run``: what the bookkeeping keeps as records are written.

        Each kind's newest ``ts`` and highest ``step`` are there without reading a record:
        the run's state asks for them (``dsmon.health.gather``), never a whole frame.
        """
        return self._log.kind_stats(run)

    def last_id(self, run: str | None = None) -> int:
        """Id of the newest record (of ``run``, or of any run); 0 when there is none."""
        return self._log.last_id(run)

    def restamps(self, run: str) -> int:
        """How many stored records of ``run`` have had their step filled in after the fact.

        See :meth:`dsmon.store.records.log.RecordLog.restamps`: readers that keep rows in
        memory compare it to know when to read them again.
        """
        return self._log.restamps(run)

    def records(
        self,
        run: str,
        kind: str | None = None,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        ts_min: str | datetime | None = None,
        ts_max: str | datetime | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> list[Record]:
        """Records of a run in insertion order, filtered as :class:`RecordFilter` describes."""
        return self._log.records(
            run, kind, step_min=step_min, step_max=step_max, ts_min=ts_min, ts_max=ts_max,
            after_id=after_id, limit=limit,
        )  # fmt: skip

    def id_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """``(id, record)`` pairs: what a client paging with ``after_id`` must be told."""
        return self._log.select_records(flt)

    def scan(self, run: str, kind: str, chunk: int = SCAN_ROWS) -> Iterator[Record]:
        """Every record of one kind of a run in id order, read ``chunk`` rows per query."""
        return self._log.scan(run, kind, chunk)

    def scan_bodies(self, run: str, kind: str, chunk: int = SCAN_BODY_ROWS) -> Iterator[bytes]:
        """The stored JSON (UTF-8) of every record of one kind of a run (all but GPU samples)."""
        return self._log.scan_bodies(run, kind, chunk)

    # --- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connection."""
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(url: str | Path, *, create: bool = True) -> Store:
    """Open the store a URL names: a path or ``sqlite:///path`` (SQLite), ``postgresql://...``.

    PostgreSQL's driver loads only for a PostgreSQL URL. ``create=False``: a SQLite file
    that is not there is an error, not a new empty store (a command that only reads one
    must not leave a file behind for a mistyped name).

    Raises:
        StoreError: the URL names an unknown or unavailable backend, no file is there
            (``create=False``), or the store cannot be opened or is of another schema version.
    """
    path = sqlite_file(url)
    backend: Backend
    if path is not None and not create and not Path(path).exists():
        raise StoreError(f"no store at {path}")
    if path is not None:
        backend = SQLiteBackend(path)
    else:
        try:
            postgres = importlib.import_module("dsmon.store.postgres")
        except ImportError as exc:
            raise StoreError(
                f"cannot open store {redact_url(url)}: PostgreSQL backend: {exc}"
            ) from None
        backend = postgres.PostgresBackend(str(url))
    try:
        return Store(backend)
    except BaseException:
        backend.close()
        raise


def split(
    records: Iterable[Record | EncodedRecord | RecordRow] | RowBatch,
) -> Iterator[tuple[list[Row], list[SampleRow], Mapping[int, Any]]]:
    """Records in batches: rows for the records table, GPU samples for their own tables.

    A :class:`RowBatch` (the ingest server's checked lines) is cut in slices, not looked at
    one record at a time (a microsecond a record, 5 % of ingest), with its decoded lines by
    index in the slice; so is a list of :class:`RecordRow` alone. Other records are made
    into rows here.
    """
    if isinstance(records, RowBatch):
        checked, sampled, decoded = records.rows, records.samples, records.decoded
        for start in range(0, max(len(checked), len(sampled)), BATCH_ROWS):
            end = start + BATCH_ROWS
            if start or end < len(checked):
                decoded = {i - start: v for i, v in records.decoded.items() if start <= i < end}
            yield checked[start:end], sampled[start:end], decoded
        return
    if isinstance(records, list) and all(type(r) is RecordRow for r in records):
        for start in range(0, len(records), BATCH_ROWS):
            yield records[start : start + BATCH_ROWS], [], {}
        return
    rows: list[Row] = []
    samples: list[SampleRow] = []
    for item in records:
        made = item if isinstance(item, RecordRow) else stored_as(item)  # rows: no call
        if isinstance(made, RecordRow):
            rows.append(made)
        else:
            samples.append(made)
        if len(rows) + len(samples) >= BATCH_ROWS:
            yield rows, samples, {}
            rows, samples = [], []
    if rows or samples:
        yield rows, samples, {}


def stored_as(item: Record | EncodedRecord) -> RecordRow | SampleRow:
    """What one record is stored as: a GPU sample with a time as a sample row, else a row."""
    rec = item.record if isinstance(item, EncodedRecord) else item
    sample = sample_row(rec) if isinstance(rec, GpuSampleRecord) else None
    return as_row(item) if sample is None else sample
