"""What every store backend shares: the row form of a record, the query filter, the Store contract.

A record is stored as its JSON-lines form (``dsmon.model.wire``) next to a few columns
(run, kind, step, ts, node, rank, file, line; run and kind are indexed with the id) and a
key made of :func:`dsmon.model.records.record_key` (:func:`identity_digest`) that carries a
UNIQUE constraint, so writing the same record twice stores it once. SQLite
(``dsmon.store.sqlite``) and PostgreSQL (``dsmon.store.postgres``) differ only in SQL
dialect and connection handling; the mapping between rows and records, the filters and the
DataFrame view live here so both return the same answers.
"""

from __future__ import annotations

import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from hashlib import blake2b as _blake2b
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple

from dsmon.model import wire
from dsmon.model.records import Record, record_key
from dsmon.model.units import parse_ts
from dsmon.model.wire import EncodedRecord
from dsmon.store.gpu_reads import GpuReads

if TYPE_CHECKING:  # pandas loads only when a frame is asked for: collectors never need it
    import pandas as pd
    import pyarrow as pa

    from dsmon.store.frame_chunks import ChunkKey

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
#: Frames of fewer rows are read in Python: Arrow's fixed cost per call is not worth it.
ARROW_MIN_ROWS = 2000
#: Rows read at a time by :meth:`Store.frame` of a whole kind (the dashboard's page size), and
#: so the rows of a kept chunk (:mod:`dsmon.store.frame_chunks`): what a first look still
#: parses as JSON is the last, unsealed page, at most this many rows.
FRAME_PAGE_ROWS = 50_000
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


def key_digest(rec: Record) -> bytes:
    """The record's identity as a compact UNIQUE key for any backend (:func:`identity_digest`)."""
    return identity_digest(*record_key(rec))


#: Bytes of a key: where the record came from, its place there, its whole identity (8 each).
KEY_BYTES = 24
_MAX_ORDER = (1 << 64) - 1
_DIGITS = frozenset("0123456789")


def identity_digest(run: str, node: str, file: str, pos: str, sub: int, kind: str) -> bytes:
    """The key of a record's identity (``record_key``'s tuple), in three 8-byte parts.

    A digest of the whole identity alone lands each new record at a random place in the
    UNIQUE index: at 300k records that was 9 of an insert's 15 us, and it grows with the
    store. So the key starts with a digest of the source (run, node, file) and the record's
    place in it (byte offset, line, or time), big-endian: a log's records sort in the order
    they are written, and each insert lands next to the one before. The last part, a digest
    of the whole identity, keeps apart the records of one place (several from one line).
    Apart from :func:`key_digest` so that the ingest server can key a checked line without
    building its record.
    """
    whole = f"{run}\x1f{node}\x1f{file}\x1f{pos}\x1f{sub}\x1f{kind}".encode()
    order = min(_position_order(pos), _MAX_ORDER).to_bytes(8, "big")
    return _source_digest(run, node, file) + order + _blake2b(whole, digest_size=8).digest()


@functools.lru_cache(maxsize=4096)
def _source_digest(run: str, node: str, file: str) -> bytes:
    """The first part of a key; cached, as a batch holds the lines of a few files."""
    return _blake2b(f"{run}\x1f{node}\x1f{file}".encode(), digest_size=8).digest()


def _position_order(pos: str) -> int:
    """A number that grows with a record's place in its source (``source_position``'s text).

    ``o<offset>`` and ``l<line>`` give the number; a time (``t<ts>``, a GPU sample's
    ``g<index>@<ts>``) gives its digits as one number, padded so that a longer fraction of a
    second sorts after a shorter one. Anything else gives 0: the key stays unique, only
    its place in the index is random.
    """
    if pos[:1] in ("o", "l") and pos[1:].isascii() and pos[1:].isdigit():
        return int(pos[1:])
    digits = "".join(c for c in pos.partition("@")[2] or pos[1:] if c in _DIGITS)[:19]
    return int(digits.ljust(19, "0")) if digits else 0


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
    steps = [r.last_step for r in rows if r.last_step is not None]
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


def _iso(value: str | datetime | None) -> str | None:
    """Timestamps compare as the ISO strings records carry (millisecond precision, no zone)."""
    if value is None or isinstance(value, str):
        return value
    return value.replace(tzinfo=None).isoformat(timespec="milliseconds")


@dataclass(frozen=True, slots=True)
class RecordFilter:
    """The query every read shares: one run, optionally one kind, step/time/id ranges.

    Ranges are inclusive; ``after_id`` is exclusive (records newer than one already seen).
    """

    run: str
    kind: str | None = None
    step_min: int | None = None
    step_max: int | None = None
    ts_min: str | datetime | None = None
    ts_max: str | datetime | None = None
    after_id: int | None = None
    limit: int | None = None

    def whole_kind(self) -> bool:
        """Whether this reads a kind's records by id alone (no step or time range)."""
        ranges = (self.step_min, self.step_max, self.ts_min, self.ts_max)
        return self.kind is not None and all(v is None for v in ranges)

    def where(self, ph: str = "?") -> tuple[str, list[Any]]:
        """The SQL WHERE clause and its parameters, with ``ph`` as the placeholder."""
        conds: list[tuple[str, Any]] = [("run = {}", self.run)]
        optional = (
            ("kind = {}", self.kind),
            ("step >= {}", self.step_min),
            ("step <= {}", self.step_max),
            ("ts >= {}", _iso(self.ts_min)),
            ("ts <= {}", _iso(self.ts_max)),
            ("id > {}", self.after_id),
        )
        conds += [(sql, v) for sql, v in optional if v is not None]
        return " AND ".join(sql.format(ph) for sql, _ in conds), [v for _, v in conds]

    def select(self, ph: str = "?", body: str = "body") -> tuple[str, list[Any]]:
        """``SELECT id, <body>`` of the matching records-table rows in id order, and parameters.

        ``body``: the SQL the body is read as (``CAST(body AS BLOB)`` for its bytes).
        """
        where, params = self.where(ph)
        sql = f"SELECT id, {body} FROM records WHERE {where} ORDER BY id"
        if self.limit is not None:
            sql += f" LIMIT {ph}"
            params.append(self.limit)
        return sql, params


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


class Store(ABC, GpuReads):
    """The store contract every backend fulfils; reads are built on :meth:`_select`.

    Writes are idempotent (a record's identity is :func:`dsmon.model.records.record_key`), reads
    return records in insertion order, and ids grow monotonically so ``after_id`` polling
    never misses a record.
    """

    #: Kinds whose every record is a records-table row with its JSON body: frames of them
    #: are built from the bodies directly (``dsmon.model.frames.bodies_frame``).
    BODY_KINDS: frozenset[str] = frozenset()

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

    def _load_chunk(self, key: ChunkKey) -> bytes | None:
        """The kept page ``key`` names (:mod:`dsmon.store.frame_chunks`), None if there is none.

        A backend that keeps no chunks parses every page from JSON.
        """
        return None

    def _kept_chain(self, key: ChunkKey) -> dict[int, int]:
        """The good kept pages of ``key``'s kind, ``after_id -> last_id`` (``key.after_id`` unused)."""
        return {}

    def _save_chunk(self, key: ChunkKey, last_id: int, data: bytes) -> None:
        """Keep a sealed page's table for later readers; best effort (see :mod:`frame_chunks`)."""

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
        after = 0
        while True:
            rows = self._select_records(RecordFilter(run, kind, after_id=after, limit=chunk))
            for _, rec in rows:
                yield rec
            if len(rows) < chunk:
                return
            after = rows[-1][0]

    def id_records(self, flt: RecordFilter) -> list[tuple[int, Record]]:
        """``(id, record)`` pairs: what a client paging with ``after_id`` must be told."""
        return self._select_records(flt)

    def frame(
        self,
        run: str,
        kind: str,
        *,
        step_min: int | None = None,
        step_max: int | None = None,
        ts_min: str | datetime | None = None,
        ts_max: str | datetime | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> pd.DataFrame:
        """One row per record of one kind: see :func:`dsmon.model.frames.records_frame`.

        A whole kind of JSON bodies is read in pages (:meth:`frame_pages`) and joined. In one
        read, a long run's timers had their JSON bodies, the bodies joined for Arrow and
        Arrow's table in memory at once: 4.6 GB at peak for a frame of 0.9 GB (2.5 million
        timer rows). The dashboard keeps the same pages apart (``dsmon.view.cache``), so
        ``dsmon check --store`` sees the frames its Health page sees.
        """
        flt = RecordFilter(run, kind, step_min, step_max, ts_min, ts_max, after_id, limit)
        if limit is None and kind in self.BODY_KINDS:
            return _joined(list(self._pages(flt)))
        return self._one_read(flt)

    def keep_chunks(self, run: str) -> int:
        """Keep a chunk of each sealed page of ``run`` not kept yet; how many it kept.

        ``dsmon import`` calls it, and the ingest server as a run grows
        (``dsmon.serve.seal``): the first look at the run then decodes chunks instead of
        parsing the JSON (:mod:`dsmon.store.frame_chunks`). The kept pages are passed over by
        their ids, unread; one page is held at a time.
        """
        info = next((i for i in self.runs() if i.name == run), None)
        kinds = {} if info is None else info.kinds
        kept = 0
        for kind, n in sorted(kinds.items()):
            if kind in self.BODY_KINDS and n >= FRAME_PAGE_ROWS:
                kept += self._keep_kind(RecordFilter(run, kind, limit=FRAME_PAGE_ROWS))
        return kept

    def _keep_kind(self, flt: RecordFilter) -> int:
        """:meth:`keep_chunks` of one kind: its pages walked as :meth:`_pages` walks them.

        Only their tables: frames no one reads added a tenth to its time and peak memory.
        """
        after, chain = 0, self._kept_chain(self._chunk_key(flt))
        while after in chain:
            after = chain[after]
        kept = 0
        while True:
            flt = replace(flt, after_id=after or None)
            table, rows = self._page_table(flt)
            n = len(rows) if table is None else table.num_rows
            if n < FRAME_PAGE_ROWS:
                return kept
            after = int(rows[-1][0] if table is None else table.column("id")[n - 1].as_py())
            kept += table is not None

    def frame_pages(
        self, run: str, kind: str, *, after_id: int | None = None
    ) -> Iterator[pd.DataFrame]:
        """:meth:`frame` of the rows after ``after_id``, :data:`FRAME_PAGE_ROWS` rows a page.

        Only one page's stored JSON is in memory at a time. The last page is shorter than the
        others (empty when the rows fill whole pages).
        """
        return self._pages(RecordFilter(run, kind, after_id=after_id))

    def _pages(self, flt: RecordFilter) -> Iterator[pd.DataFrame]:
        after = flt.after_id
        while True:
            page = self._page(replace(flt, after_id=after, limit=FRAME_PAGE_ROWS))
            yield page
            if len(page) < FRAME_PAGE_ROWS:
                return
            after = int(page["id"].iloc[-1])

    def _page(self, flt: RecordFilter) -> pd.DataFrame:
        """One page of a whole kind: from its kept chunk, else from JSON (then kept if full)."""
        from dsmon.model.arrow_frames import table_frame

        if str(flt.kind) not in self.BODY_KINDS or not flt.whole_kind():
            return self._one_read(flt)
        table, rows = self._page_table(flt)
        return self._one_read(flt, rows) if table is None else table_frame(str(flt.kind), table)

    def _page_table(self, flt: RecordFilter) -> tuple[pa.Table | None, list[tuple[int, bytes]]]:
        """A page's Arrow table (its chunk, else its JSON parsed and kept when the page is full).

        None when Arrow cannot read the JSON, with the ``(id, body)`` rows it was given; the
        rows are ``[]`` when the table came from a chunk.
        """
        from dsmon.model.arrow_frames import arrow_table
        from dsmon.store import frame_chunks as chunks

        kind, limit, key = str(flt.kind), int(flt.limit or 0), self._chunk_key(flt)
        data = self._load_chunk(key)
        table = None if data is None else chunks.decode(data)
        if table is not None and table.num_rows == limit:
            return table, []
        rows = self._select_bodies(flt)
        table = arrow_table(kind, *_unzipped(rows)) if len(rows) >= ARROW_MIN_ROWS else None
        if table is not None and table.num_rows == limit:
            last = int(table.column("id")[limit - 1].as_py())
            self._save_chunk(key, last, chunks.encode(table))
        return table, rows

    def _chunk_key(self, flt: RecordFilter) -> ChunkKey:
        """The chunk of the page ``flt`` reads, in the run's state now."""
        from dsmon.store import frame_chunks as chunks

        kind = str(flt.kind)
        return chunks.ChunkKey(
            flt.run, kind, flt.after_id or 0, int(flt.limit or 0), self.restamps(flt.run),
            chunks.chunk_format(kind),
        )  # fmt: skip

    def _one_read(
        self, flt: RecordFilter, rows: list[tuple[int, bytes]] | None = None
    ) -> pd.DataFrame:
        """The frame of the rows ``flt`` selects, from their JSON bodies where kept, in one go.

        ``rows``: the bodies already read, when Arrow refused them (the Python reader's turn).
        """
        from dsmon.model.arrow_frames import arrow_frame
        from dsmon.model.frames import bodies_frame, records_frame

        kind = str(flt.kind)
        if kind not in self.BODY_KINDS:
            pairs = self._select_records(flt)
            return records_frame(kind, [rec for _, rec in pairs], [i for i, _ in pairs])
        tried = rows is not None
        rows = self._select_bodies(flt) if rows is None else rows
        ids, bodies = _unzipped(rows)
        fast = arrow_frame(kind, ids, bodies) if len(rows) >= ARROW_MIN_ROWS and not tried else None
        return fast if fast is not None else bodies_frame(kind, ids, bodies)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _unzipped(rows: list[tuple[int, bytes]]) -> tuple[list[int], list[bytes]]:
    """Ids and bodies of ``(id, body)`` rows, as two lists."""
    return [i for i, _ in rows], [b for _, b in rows]


def _joined(pages: list[pd.DataFrame]) -> pd.DataFrame:
    """Pages of one frame as one (the empty last page left out), ``bad_ts`` counts summed."""
    from dsmon.model.joined import concat

    if len(pages) > 1 and pages[-1].empty:
        pages = pages[:-1]
    if len(pages) == 1:
        return pages[0]
    whole = concat(pages)
    bad = sum(p.attrs.get("bad_ts", 0) for p in pages)
    if bad:
        whole.attrs["bad_ts"] = bad
    return whole
