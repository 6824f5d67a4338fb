"""What every store backend shares: the row form of a record, the query filter, the Store contract.

A record is stored as its JSON-lines form (``dsmon.model.wire``) next to a few columns
(run, kind, step, ts, node, rank, file, line; run and kind are indexed with the id) and a
key made of :func:`dsmon.model.records.record_key` (:mod:`dsmon.store.keys`) that carries a
UNIQUE constraint, so writing the same record twice stores it once. SQLite
(``dsmon.store.sqlite``) and PostgreSQL (``dsmon.store.postgres``) differ only in SQL
dialect and connection handling; the mapping between rows and records, the filters and the
DataFrame view live here so both return the same answers.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, NamedTuple

from dsmon.model import wire
from dsmon.model.records import Record
from dsmon.model.units import parse_ts
from dsmon.model.wire import EncodedRecord
from dsmon.store.filters import RecordFilter, paged
from dsmon.store.frame_reads import FrameReads
from dsmon.store.gpu_reads import GpuReads
from dsmon.store.keys import key_digest
from dsmon.store.rank_tables import RankReads

#: Bumped when the tables change shape or what a column holds; a store of a version not in
#: :data:`READABLE_VERSIONS` is refused.
#: Indexes are not part of it: a dsmon of either index set reads and writes a store of the
#: other the same (only faster or slower), and a writer brings it to its own set.
SCHEMA_VERSION = 2
#: Versions this dsmon opens. Version 1 differs only in its keys (one digest of a record's
#: identity): it reads the same, and its first writer re-keys it (:mod:`dsmon.store.rekey`).
READABLE_VERSIONS = (1, 2)
#: Records written per transaction: large enough to amortise the commit, small enough
#: that a reader never waits long and memory stays flat on a 500 MB import.
BATCH_ROWS = 5000
#: Records decoded at a time by :meth:`Store.scan`: it never holds more record objects.
SCAN_ROWS = 1000


class StoreError(RuntimeError):
    """The store cannot be opened or used (bad URL, unreadable file, foreign schema)."""


def foreign_version(where: str, version: object) -> StoreError:
    """The error for a store of a schema version this dsmon does not read."""
    known = " or ".join(str(v) for v in READABLE_VERSIONS)
    return StoreError(
        f"cannot open store {where}: schema version {version}, this dsmon reads version {known}"
    )


class StoreDataError(StoreError):
    """The database refused the data itself (a value too long for an index, say).

    Sending the same records again can never succeed, unlike a database that is down or
    busy: the ingest server answers 400 for this, 503 for other store errors.
    """


class RecordRow(NamedTuple):
    """The columns one record is stored as (order = the INSERT column order)."""

    key: bytes
    run: str
    kind: str
    step: int | None
    ts: str | None
    node: str | None
    rank: int | None
    file: str | None
    line: int | None
    body: str


ROW_COLUMNS = RecordRow._fields


def record_row(rec: Record, body: str | None = None) -> RecordRow:
    """The row under which ``rec`` is stored (``body``: its JSON line, if already encoded)."""
    s = rec.src
    if body is None:
        body = wire.encode(rec)
    return RecordRow(
        key_digest(rec), s.run, rec.KIND, rec.step, rec.ts, s.node, s.rank, s.file, s.line, body
    )


def as_row(item: Record | EncodedRecord | RecordRow) -> RecordRow:
    """The row of a record, of a record with its line, or a row made already (as it is)."""
    if isinstance(item, RecordRow):
        return item
    if isinstance(item, EncodedRecord):
        return record_row(*item)
    return record_row(item)


def row_record(body: str) -> Record:
    """Rebuild a record from its stored body."""
    return wire.decode(body)


@dataclass(frozen=True, slots=True)
class RunInfo:
    """What the store knows about one run, cheap enough to ask on every dashboard refresh.

    ``last_step`` is the highest step the records name, heartbeats aside (:data:`IN_PROGRESS`).
    ``kinds`` counts records per kind; ``last_id`` is the id of the newest record, so a
    reader can ask for ``records(run, after_id=last_id)`` next time and get only what is new.
    ``received_at`` is when a live sender (the ingest server, the demo's replay) last stored
    records of the run, in this machine's local time: DeepSpeed prints many lines without a
    timestamp (timer lines, all of them at its default log level), so the records' own
    ``last_ts`` can stand still for hours while the run is well alive.
    """

    name: str
    first_ts: str | None
    last_ts: str | None
    n_records: int
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]
    last_step: int | None
    kinds: dict[str, int] = field(default_factory=dict)
    last_id: int = 0
    received_at: str | None = None


class KindStats(NamedTuple):
    """One (run, kind) line of the per-run bookkeeping table."""

    run: str
    kind: str
    n: int
    first_ts: str | None
    last_ts: str | None
    last_step: int | None
    last_id: int


def redact_url(url: str) -> str:
    """The URL with its password replaced by ``***``, fit for messages, logs and the UI.

    Here rather than with the PostgreSQL backend so that showing a store's name never loads
    a database driver.
    """
    return re.sub(r"^(\w+://[^:/@]*:)[^/?#]*@", r"\1***@", url)


def received_now() -> str:
    """The receive time noted for a live batch: local wall clock, as records' ``ts``."""
    return datetime.now().isoformat(timespec="milliseconds")


#: Kinds whose ``step`` is the step a rank is in, not one it finished: a rank's ``exited``
#: heartbeat names the step after its last, which never ran, so a run's ``last_step`` (the
#: status line, ``dsmon_run_last_step``) leaves them out.
IN_PROGRESS = frozenset({"heartbeat"})


def run_infos(
    stats: Iterable[KindStats],
    sources: Iterable[tuple[str, Any, Any]],
    activity: dict[str, tuple[int, str | None]] | None = None,
) -> list[RunInfo]:
    """Fold per-kind statistics and the (run, node, rank) pairs seen into one RunInfo per run."""
    nodes: dict[str, set[str]] = {}
    ranks: dict[str, set[int]] = {}
    for run, node, rank in sources:
        if node is not None and node != "":
            nodes.setdefault(run, set()).add(str(node))
        if rank is not None and rank >= 0:
            ranks.setdefault(run, set()).add(int(rank))
    by_run: dict[str, list[KindStats]] = {}
    for st in stats:
        by_run.setdefault(st.run, []).append(st)
    received = {run: at for run, (_, at) in (activity or {}).items()}
    return [
        _fold(name, rows, nodes.get(name, set()), ranks.get(name, set()), received.get(name))
        for name, rows in sorted(by_run.items())
    ]


def _fold(
    name: str, rows: list[KindStats], nodes: set[str], ranks: set[int], received_at: str | None
) -> RunInfo:
    """One run's RunInfo from its per-kind rows.

    A time no calendar has (an older dsmon stored ``2026-19-39`` as it came) is left out:
    it would sort as the run's newest and break every reader that computes with it.
    """
    firsts = [r.first_ts for r in rows if r.first_ts is not None and parse_ts(r.first_ts)]
    lasts = [r.last_ts for r in rows if r.last_ts is not None and parse_ts(r.last_ts)]
    steps = [r.last_step for r in rows if r.last_step is not None and r.kind not in IN_PROGRESS]
    return RunInfo(
        name=name,
        first_ts=min(firsts) if firsts else None,
        last_ts=max(lasts) if lasts else None,
        n_records=sum(r.n for r in rows),
        nodes=tuple(sorted(nodes)),
        ranks=tuple(sorted(ranks)),
        last_step=max(steps) if steps else None,
        kinds={r.kind: r.n for r in sorted(rows, key=lambda r: r.kind)},
        last_id=max(r.last_id for r in rows),
        received_at=received_at,
    )


def restamp_candidates(rows: list[RecordRow]) -> dict[str, list[RecordRow]]:
    """The rows of a batch that may fill a stored row's missing step, by run."""
    out: dict[str, list[RecordRow]] = {}
    for row in rows:
        if row.step is not None:
            out.setdefault(row.run, []).append(row)
    return out


def batched(
    records: Iterable[Record | EncodedRecord | RecordRow], size: int = BATCH_ROWS
) -> Iterator[list[RecordRow]]:
    """Rows in lists of ``size``, so an import streams instead of holding every record."""
    batch: list[RecordRow] = []
    for rec in records:
        batch.append(as_row(rec))
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class Store(ABC, GpuReads, FrameReads, RankReads):
    """The store contract every backend fulfils; reads are built on :meth:`_select`.

    Writes are idempotent (a record's identity is :func:`dsmon.model.records.record_key`), reads
    return records in insertion order, and ids grow monotonically so ``after_id`` polling
    never misses a record.
    """

    @abstractmethod
    def prepare_writes(self) -> None:
        """Bring a store an older dsmon wrote to this dsmon's layout now, not at the first write.

        A server calls it before it takes requests: on a big store the upgrade (re-keying,
        :mod:`dsmon.store.rekey`) takes minutes, longer than a collector waits for an answer.
        """

    @abstractmethod
    def add(
        self, records: Iterable[Record | EncodedRecord | RecordRow], *, live: bool = False
    ) -> int:
        """Store the records not stored yet and commit; returns how many were new.

        A :class:`RecordRow` is stored as it is: the ingest server makes them of the lines
        it checked, without building records (``dsmon.serve.rows``).

        ``live``: they come from a live sender, so the run's ``received_at`` is set to now.
        """

    @abstractmethod
    def runs(self) -> list[RunInfo]:
        """Every run in the store, by name."""

    @abstractmethod
    def last_id(self, run: str | None = None) -> int:
        """Id of the newest record (of ``run``, or of any run); 0 when there is none."""

    @abstractmethod
    def restamps(self, run: str) -> int:
        """How many stored records of ``run`` have had their step filled in after the fact.

        A live collector sends a record at once, without its step when the log has not named
        one yet, and again once it has (``LogParser(live=True)``); the store then fills the
        step of the row it has, in place. Readers that keep rows in memory
        (``dsmon.view.cache.RunFrames``) compare this count to know when to read them again.
        """

    @abstractmethod
    def check_writable(self) -> None:
        """Commit a write that changes nothing, or raise :class:`StoreError` saying why not.

        Reading proves little: a store on a full disk, a read-only mount or a corrupt file
        still answers reads while every write fails. The ingest server's ``/healthz`` asks.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""

    @abstractmethod
    def _select(self, flt: RecordFilter) -> list[tuple[int, str]]:
        """``(id, body)`` of the matching rows in id order, at most ``flt.limit``."""

    def _select_bodies(self, flt: RecordFilter) -> list[tuple[int, bytes]]:
        """``(id, body)`` as :meth:`_select`, the body as UTF-8 bytes: what frame readers parse.

        A backend that can hand out the stored bytes spares decoding them to ``str`` and
        encoding them again (a long run's first load reads 100 MB of them).
        """
        return [(rec_id, body.encode("utf-8")) for rec_id, body in self._select(flt)]

    def _select_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """``(id, record)`` of the matching records in id order.

        A backend that keeps some kinds outside the records table merges them in here.
        """
        return [(rec_id, row_record(body)) for rec_id, body in self._select(flt)]

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
        return [rec for _, rec in self._select_records(flt)]

    def scan(self, run: str, kind: str, chunk: int = SCAN_ROWS) -> Iterator[Record]:
        """Every record of one kind of a run in id order, read ``chunk`` rows per query.

        For passes over a whole big run (the import summary) that must not hold it all.
        """
        return paged(self._select_records, run, kind, chunk)

    def id_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """``(id, record)`` pairs: what a client paging with ``after_id`` must be told."""
        return self._select_records(flt)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
