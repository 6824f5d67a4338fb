"""The record log: a run's records in id order, whichever table keeps them.

Every record is a row of ``records`` (:mod:`dsmon.store.records.rows`) but GPU samples with
a time, which the GPU part keeps in typed tables (:mod:`dsmon.store.gpu.samples`) under ids
of the same sequence. A read of a run's records of every kind, or of its GPU samples, merges
the two in id order, in one snapshot. Reads return records in insertion order, and ids grow
with every insert, so a reader polling with ``after_id`` never misses a record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from dsmon.model.records import KINDS, Record
from dsmon.store.backend import Backend, Db
from dsmon.store.gpu.rows import cut_ms, iso_text
from dsmon.store.gpu.samples import GpuSamples
from dsmon.store.records import sql
from dsmon.store.records.filter import RecordFilter, paged
from dsmon.store.records.rows import row_record
from dsmon.store.records.runs import KindStats, RunInfo, received_now, run_infos

#: Kinds whose every record is a row of ``records`` with its JSON body (all but GPU
#: samples): frames of them are built from the bodies directly.
BODY_KINDS = frozenset(KINDS.keys() - {"gpu"})
#: Records decoded at a time by :meth:`RecordLog.scan`: it never holds more record objects.
SCAN_ROWS = 1000
#: Bodies read per query by :meth:`RecordLog.scan_bodies` (about 300 bytes each).
SCAN_BODY_ROWS = 5000


class RecordLog:
    """The records of every run: reads in id order, the bookkeeping, a write's share of both."""

    def __init__(self, backend: Backend, gpu: GpuSamples) -> None:
        self._backend = backend
        self._gpu = gpu

    # --- reads -----------------------------------------------------------------------------

    def select(self, flt: RecordFilter) -> list[tuple[int, str]]:
        """``(id, body)`` of the matching rows of ``records`` in id order, at most ``flt.limit``."""
        query, params = flt.select("?")
        return self._backend.read(lambda db: db.rows(query, params))

    def select_bodies(self, flt: RecordFilter) -> list[tuple[int, bytes]]:
        """``(id, body)`` as :meth:`select`, the body as UTF-8 bytes: what frame readers parse.

        SQLite hands out the stored bytes, which spares decoding them to ``str`` and encoding
        them again (a long run's first load reads 100 MB of them).
        """
        body = self._backend.dialect.body_bytes
        if body is None:
            return [(rec_id, text.encode("utf-8")) for rec_id, text in self.select(flt)]
        query, params = flt.select("?", body=body)
        return self._backend.read(lambda db: db.rows(query, params))

    def select_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """``(id, record)`` of the matching records in id order, GPU samples merged in.

        Both tables are read in one snapshot: a batch committed between two reads could
        otherwise show its GPU samples but not an older batch's records, and a reader paging
        with ``after_id`` would step over those for good.
        """
        if flt.kind not in (None, "gpu") or flt.step_min is not None or flt.step_max is not None:
            return [(rec_id, row_record(body)) for rec_id, body in self.select(flt)]
        return self._backend.snapshot(lambda db: self._merged(db, flt))

    def _merged(self, db: Db, flt: RecordFilter) -> list[tuple[int, Record]]:
        """Rows of ``records`` (other kinds, samples without a time) and GPU samples, by id."""
        query, params = flt.select("?")
        rows: list[tuple[int, Record]] = [(i, row_record(b)) for i, b in db.rows(query, params)]
        t_range = (cut_ms(iso_text(flt.ts_min)), cut_ms(iso_text(flt.ts_max)))
        gpu = self._gpu.select(db, flt.run, flt.after_id, t_range, flt.limit)
        if not gpu:
            return rows
        merged = sorted(rows + gpu, key=lambda pair: pair[0])  # type: ignore[operator]
        return merged if flt.limit is None else merged[: flt.limit]

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
        flt = RecordFilter(run, kind, step_min, step_max, ts_min, ts_max, after_id, limit)
        return [rec for _, rec in self.select_records(flt)]

    def scan(self, run: str, kind: str, chunk: int = SCAN_ROWS) -> Iterator[Record]:
        """Every record of one kind of a run in id order, read ``chunk`` rows per query.

        For passes over a whole big run (the import summary) that must not hold it all.
        """
        return paged(self.select_records, run, kind, chunk)

    def scan_bodies(self, run: str, kind: str, chunk: int = SCAN_BODY_ROWS) -> Iterator[bytes]:
        """The stored JSON (UTF-8) of every record of one kind of a run, ``chunk`` rows a query.

        For a pass over a few fields of millions of records (the import summary's timers):
        building each record, as :meth:`scan` does, cost twice decoding its JSON. Only for
        kinds whose every record has a body (:data:`BODY_KINDS`: all but GPU samples).
        """
        if kind not in BODY_KINDS:
            raise ValueError(f"kind {kind!r}: not every record of it is stored as JSON")
        return paged(self.select_bodies, run, kind, chunk)

    def runs(self) -> list[RunInfo]:
        """Every run, from the bookkeeping tables (no scan of the records), read in one state."""

        def tables(db: Db) -> tuple[list[KindStats], list[Any], list[Any]]:
            stats = [KindStats(*row) for row in db.rows(sql.KIND_STATS)]
            return stats, db.rows(sql.SOURCES), db.rows(sql.ACTIVITY)

        stats, sources, activity = self._backend.snapshot(tables)
        return run_infos(stats, sources, {run: (int(n), at) for run, n, at in activity})

    def kind_stats(self, run: str) -> list[KindStats]:
        """Per kind of ``run``: count, first and last time, last step, last id (no scan)."""
        rows = self._backend.read(lambda db: db.rows(sql.RUN_KIND_STATS, (run,)))
        return [KindStats(*row) for row in rows]

    def last_id(self, run: str | None = None) -> int:
        """Id of the newest record of ``run`` (or of the whole store); 0 if there is none."""
        if run is None:
            return self._backend.read(lambda db: max(self.max_id(db), self._gpu.max_id(db)))
        found = self._backend.read(lambda db: db.rows(sql.RUN_LAST_ID, (run,)))
        return int(found[0][0] or 0) if found else 0

    def restamps(self, run: str) -> int:
        """How many stored records of ``run`` have had their step filled in after the fact.

        A live collector sends a record at once, without its step when the log has not named
        one yet, and again once it has (``LogParser(live=True)``); the store then fills the
        step of the row it has, in place. Readers that keep rows in memory
        (``dsmon.view.cache.RunFrames``, sealed pages) compare this count to know when to
        read them again.
        """
        found = self._backend.read(lambda db: db.rows(sql.RESTAMPS, (run,)))
        return int(found[0][0]) if found else 0

    # --- a write's share, in the caller's transaction --------------------------------------

    @staticmethod
    def max_id(db: Db) -> int:
        """The newest id of ``records`` (0: none): rows a write stores come after it."""
        found = db.rows(sql.MAX_ID)
        return int(found[0][0] or 0) if found else 0

    @staticmethod
    def note_received(db: Db, runs: Iterable[str]) -> None:
        """Note that ``runs`` are being sent to now (see ``RunInfo.received_at``)."""
        now = received_now()
        db.execute_many(sql.RECEIVED, [(run, now) for run in sorted(runs)])
