"""In-memory frames of a run that grow by only what is new, shared by every dashboard session.

A refresh every 1-2 s must not re-read a day of samples. :class:`RunFrames` loads a kind
once, then on each :meth:`RunFrames.refresh` asks the store for ids above the last one it
saw (``after_id``), appends them, and bumps that kind's version. Derived views (breakdowns,
grids, figures' inputs) are memoised on those versions and the replay cut-off, so a refresh
with nothing new costs one ``last_id`` query. The object is thread-safe: Streamlit runs
sessions on separate threads and keeps this one in ``st.cache_resource``.

Replay ("the dashboard as it stood at step N") is a filter on the cached frames
(``dsmon.view.cutoff.Cutoff``), never a second copy of the data.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from dsmon.analysis.percentiles import Percentiles
from dsmon.model.records import Record, record_key
from dsmon.store.frames import pages as frame_pages
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store
from dsmon.view.chunks import Chunks
from dsmon.view.cutoff import OPEN, Cutoff, existed_at
from dsmon.view.fold import FinishedRows, StepFn, StepFold
from dsmon.view.gpu_buckets import LiveGpuBuckets
from dsmon.view.group_positions import GroupPositions
from dsmon.view.memo import Memo
from dsmon.view.quantiles import StepQuantiles, ValuesFn
from dsmon.view.read_ahead import read_ahead

T = TypeVar("T")

#: The kind kept out of frames: the store buckets GPU samples for each query.
GPU = "gpu"
#: Kinds read through the store's summaries, never loaded as frames live (GPU samples, the
#: probe's per-rank records): their version is how many the store holds.
STORED_KINDS = frozenset({GPU, "rank_step", "heartbeat"})
#: Prefix of a kind in :meth:`RunFrames.memo` whose version is what the store holds of it, so
#: the memo reads none of its rows (``stored:timer``): for a view that reads the store's
#: summaries of the kind, or only some of its rows, as the checklist does.
STORED_PREFIX = "stored:"
#: Memoised derived views kept per run (oldest dropped first).
MEMO_SIZE = 64
#: And their estimated bytes per run (``dsmon.view.memo``): replay positions of a long run
#: are each a query of their own, as big as the run's per-step series (50 MB at 100k steps).
#: Above a live page's own set at a million steps, so live views never push each other out.
MEMO_BYTES = 1 << 30
#: Rows of a kind with folds (``folds`` of :class:`RunFrames`) from which the rows all its
#: folds took in are let go (``dsmon.view.chunks``). A smaller kind is held whole: letting go
#: of it would save little.
SPILL_MIN_ROWS = 50_000


class WholeFrameRead(ResourceWarning):
    """A whole frame was asked of a kind whose rows the folds had let go: all are held again.

    A page that reads a long run's whole timer or step frame (instead of asking a fold,
    :meth:`RunFrames.fold`) makes the cache read back every row it had let go and hold them
    from then on: a gigabyte at a million steps. Replay positions ask for it on purpose
    (:meth:`RunFrames.frame` with a cut-off); anything else reading a live, long run whole
    should fold instead. The test suite turns this warning into an error.
    """


class RunFrames:
    """Frames and records of one run, extended incrementally; see the module docstring.

    Args:
        store: where records come from.
        run: the run name.
        transforms: optional per-kind function applied to each newly fetched chunk before
            it is appended (e.g. ``dsmon.analysis.gpus.prepare`` for ``gpu``), so a long
            run's frame is kept compact and the work is done once per row.
        folds: the step-local folds of each kind that pages ask for (``name -> fn``, as
            :meth:`fold` takes them). They are fed whenever a page's worth of a kind's rows
            is held (a long run read page by page, or a live one that grew by that much),
            and a kind of :data:`SPILL_MIN_ROWS` rows or more holds only the rows they have
            not all taken in: a million steps' timer rows are never in memory at once.
    """

    def __init__(
        self,
        store: Store,
        run: str,
        transforms: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] | None = None,
        folds: Mapping[str, Mapping[str, StepFn]] | None = None,
    ) -> None:
        self.store = store
        self.run = run
        self._transforms = transforms or {}
        self._fold_fns = folds or {}
        self._lock = threading.RLock()
        self._frames: dict[str, Chunks] = {}
        self._folds: dict[str, StepFold] = {}
        self._quantiles: dict[tuple[str, ...], FinishedRows[Any]] = {}  # (fold, figure)
        self._positions: dict[tuple[str, ...], FinishedRows[Any]] = {}  # (fold, *key columns)
        self._kind_folds: dict[str, list[StepFold]] = {}  # the folds over each kind
        self._newest: dict[str, pd.Timestamp] = {}
        self._arrived: dict[str, pd.Timestamp] = {}  # when a refresh last brought rows
        self._records: dict[str, list[Record]] = {}
        self._seen: dict[str, int] = {}
        self._versions: dict[str, int] = {}
        self._keys: dict[str, set[tuple[str, str, str, str, int, str]]] = {}
        self._memo = Memo(MEMO_SIZE, MEMO_BYTES)
        self._companions: dict[str, Any] = {}
        self.last_id = 0
        self._restamps = store.restamps(run)
        self._counted: dict[str, int] | None = None  # stored per kind, when last counted
        self._stamps: dict[str, pd.Timestamp] | None = None  # newest time stored per kind
        self._watched: dict[str, int] = {}  # kinds not loaded whose newest time was asked
        self._reloads = 0  # times every loaded row was read again (restamps)
        self._gpu_buckets = LiveGpuBuckets()

    def refresh(self) -> bool:
        """Fetch what was added since the last refresh for every kind already loaded.

        When stored rows had their step filled in since (a live collector learned it late),
        the loaded kinds are read again whole: that happens once or twice per log, when the
        step clock first resolves, so it is cheaper than tracking changed rows.
        """
        with self._lock:
            restamps = self.store.restamps(self.run)
            reloaded = restamps != self._restamps
            if reloaded:
                self._restamps = restamps
                self._reload()
            hi = self.store.last_id(self.run)
            if hi <= self.last_id:
                return reloaded
            self.last_id = hi
            self._counted = self._stamps = None
            now = pd.Timestamp(datetime.now())
            self._watch_arrivals(now)
            for kind in list(self._frames):
                version = self._versions.get(kind, 0)
                self._extend_frame(kind, hi)
                if self._versions.get(kind, 0) != version:
                    self._arrived[kind] = now
            for kind in list(self._records):
                self._extend_records(kind, hi)
            return True

    def info(self) -> RunInfo | None:
        """The store's bookkeeping of this run now (None once it is gone)."""
        return next((r for r in self.store.runs() if r.name == self.run), None)

    def frame(self, kind: str, cutoff: Cutoff = OPEN) -> pd.DataFrame:
        """All rows of ``kind`` loaded so far, as they stood at ``cutoff``.

        Live (``cutoff`` open), a kind whose rows were let go is read back whole and held from
        then on: that is warned of (:class:`WholeFrameRead`), since a fold is what to ask.
        """
        with self._lock:
            chunks = self._chunks(kind, whole=True)
            if chunks.spilled_rows and cutoff == OPEN:
                warnings.warn(
                    f"the whole {kind} frame of run {self.run} was read: {chunks.rows} rows "
                    f"held again, {chunks.spilled_rows} of them read back from the store; "
                    "ask RunFrames.fold for a per-step figure instead",
                    WholeFrameRead,
                    stacklevel=2,
                )
            return cutoff.apply(chunks.whole())

    def has_rows(self, kind: str, cutoff: Cutoff = OPEN) -> bool:
        """Whether :meth:`frame` would have rows, without joining them when live."""
        if cutoff != OPEN:
            return not self.frame(kind, cutoff).empty
        with self._lock:
            return self._chunks(kind).rows > 0

    def _chunks(self, kind: str, whole: bool = False) -> Chunks:
        """The rows of ``kind`` loaded so far (loaded on first use).

        ``whole``: the caller reads every row (replay, the Compare page), so a first load
        holds them as read, neither feeding the folds nor letting go of rows to read again.
        """
        if kind not in self._frames:
            fns = self._fold_fns.get(kind, {})
            for name, fn in fns.items():
                self._step_fold(kind, name, fn)
            reread = (lambda last_id: self._reread(kind, last_id)) if fns else None
            self._frames[kind] = Chunks(reread)
            if whole:
                self._frames[kind].hold_whole()
            self._seen.setdefault(kind, 0)
            self._extend_frame(kind, self._hi())
        return self._frames[kind]

    def newest_ts(self, kinds: Sequence[str]) -> pd.DataFrame:
        """Each kind's newest ``ts`` (index: kind), kept as rows arrive instead of scanned.

        Or, when later, the local time a refresh last brought rows of the kind: a line
        printed without a time (every line at DeepSpeed's default log level) carries the last
        stamped line's, maybe the job's start: only its arrival says that the run goes on.
        A kind not loaded is not read for it: its newest time is the store's bookkeeping's
        (``Store.kind_stats``), and a refresh that finds more of it stored notes its arrival.
        """
        with self._lock:
            stamps = {k: self._newest[k] for k in kinds if k in self._frames and k in self._newest}
            unloaded = [k for k in kinds if k not in self._frames]
            if unloaded:
                stored = self._stored_stamps()
                for kind in unloaded:
                    self._watched.setdefault(kind, self.stored(kind))
                    if kind in stored:
                        stamps[kind] = stored[kind]
            for k, at in self._arrived.items():
                if k in kinds:
                    stamps[k] = max(stamps[k], at) if k in stamps else at
        return pd.DataFrame({"ts": pd.Series(stamps, dtype="datetime64[ns]")})

    def _stored_stamps(self) -> dict[str, pd.Timestamp]:
        """Each kind's newest time as the store keeps it (read once per refresh with news)."""
        if self._stamps is None:
            stats = [s for s in self.store.kind_stats(self.run) if s.last_ts is not None]
            times = pd.to_datetime(
                pd.Series([s.last_ts for s in stats], dtype=object), format="ISO8601"
            )
            self._stamps = {s.kind: t for s, t in zip(stats, times, strict=True) if pd.notna(t)}
        return self._stamps

    def _watch_arrivals(self, now: pd.Timestamp) -> None:
        """Note ``now`` as the arrival of each watched kind, not loaded, that the store grew."""
        for kind, seen in list(self._watched.items()):
            if kind in self._frames:  # loaded since: its rows say when they came
                del self._watched[kind]
                continue
            stored = self.stored(kind)
            if stored != seen:
                self._watched[kind] = stored
                self._arrived[kind] = now

    def fold(self, name: str, kind: str, cutoff: Cutoff, fn: StepFn) -> pd.DataFrame:
        """``fn(frame(kind, cutoff))`` for a step-local ``fn``, updated with new steps only.

        A live refresh pays for its new steps, not for the run (:mod:`dsmon.view.fold`).
        Replay asks for one position at a time, so it is memoised like any other view.
        """
        if cutoff != OPEN:
            return self.memo(name, [kind], cutoff, lambda: fn(self.frame(kind, cutoff)))
        with self._lock:
            chunks = self._chunks(kind)
            result = self._step_fold(kind, name, fn).update(chunks)
            self._spill(kind)
            return result

    def quantiles(
        self, name: str, kind: str, fn: StepFn, stat: str, values: ValuesFn
    ) -> Percentiles | None:
        """``values`` of the live fold ``name``'s rows, kept sorted (``dsmon.view.quantiles``).

        None when the fold is not incremental: the caller takes them from its result.
        """
        make = lambda: StepQuantiles(values)  # noqa: E731
        return self._finished(name, kind, fn, self._quantiles, (name, stat), make)

    def positions(
        self, name: str, kind: str, fn: StepFn, cols: Sequence[str]
    ) -> list[np.ndarray] | None:
        """Each group's row positions in the live fold ``name``'s result, kept as steps finish.

        None when they are not kept (``dsmon.view.group_positions``): the caller groups.
        """
        make = lambda: GroupPositions(cols)  # noqa: E731
        return self._finished(name, kind, fn, self._positions, (name, *cols), make)

    def _finished(
        self,
        name: str,
        kind: str,
        fn: StepFn,
        kept_by: dict[tuple[str, ...], FinishedRows[Any]],
        key: tuple[str, ...],
        make: Callable[[], FinishedRows[Any]],
    ) -> Any:
        """What ``kept_by[key]`` (made by ``make`` once) says over the live fold ``name``."""
        with self._lock:
            result = self.fold(name, kind, OPEN, fn)
            fold = self._folds[name]
            if not fold.stable:
                return None
            if key not in kept_by:
                kept_by[key] = make()
            return kept_by[key].over(result, fold.epoch, fold.stable)

    def _step_fold(self, kind: str, name: str, fn: StepFn) -> StepFold:
        """The fold ``name`` of ``fn`` over ``kind``, made on first use."""
        fold = self._folds.get(name)
        if fold is None:
            fold = self._folds[name] = StepFold(fn)
            self._kind_folds.setdefault(kind, []).append(fold)
        return fold

    def records(self, kind: str, cutoff: Cutoff = OPEN) -> list[Record]:
        """Record objects of a kind (for the few that carry trees: flops profiles, configs)."""
        with self._lock:
            if kind not in self._records:
                self._records[kind] = []
                self._seen.setdefault(f"rec:{kind}", 0)
                self._extend_records(kind, self._hi())
            recs = self._records[kind]
        return [r for r in recs if existed_at(r, cutoff)]

    def version(self, kinds: Sequence[str]) -> tuple[int, ...]:
        """How many times each kind has grown (of :data:`STORED_KINDS`, how many are stored).

        Of a kind named with :data:`STORED_PREFIX`: how many are stored, and how many times
        the stored rows were restamped (read again).
        """
        out: list[int] = []
        for kind in kinds:
            if kind in STORED_KINDS:
                out.append(self.stored(kind))
            elif kind.startswith(STORED_PREFIX):
                out += [self.stored(kind.removeprefix(STORED_PREFIX)), self._reloads]
            else:
                out.append(self._versions.get(kind, 0))
        return tuple(out)

    def stored(self, kind: str) -> int:
        """Records of ``kind`` stored at the last refresh (counted once per refresh with news)."""
        with self._lock:
            if self._counted is None:
                info = self.info()
                self._counted = dict(info.kinds) if info else {}
            return self._counted.get(kind, 0)

    def companion(self, name: str, make: Callable[[], T]) -> T:
        """The object ``name`` kept with these frames, made by ``make`` on the first call.

        For a view that keeps its own state as the run grows (``dsmon.view.timer_steps``,
        ``dsmon.view.ranks``): it lives and goes with the run's frames.
        """
        with self._lock:
            if name not in self._companions:
                self._companions[name] = make()
            found: T = self._companions[name]
            return found

    def memo(self, name: str, kinds: Sequence[str], cutoff: Cutoff, fn: Callable[[], T]) -> T:
        """``fn()``, recomputed only when one of ``kinds`` grew or the cut-off moved."""
        for kind in kinds:  # load what fn will read, so the versions below are current
            if kind in STORED_KINDS or kind.startswith(STORED_PREFIX):
                continue  # the store's summaries answer for these (versions: counts stored)
            if kind.startswith("rec:"):
                self.records(kind[4:])
            else:
                with self._lock:
                    self._chunks(kind)
        return self._memo.get((name, cutoff, self.version(kinds)), fn)

    def gpu(self, name: str, cutoff: Cutoff, fn: Callable[[Store, Any], T]) -> T:
        """``fn(store, ts_max)``: a GPU query, asked again only when samples were added.

        GPU samples are never loaded here: the store answers summaries and buckets from its
        roll-ups (``dsmon.store.gpu.reads``), so a day of 64 GPUs costs a query, not 5.5M rows.
        """
        key = (GPU, name, cutoff, self.stored(GPU))
        return self._memo.get(key, lambda: fn(self.store, cutoff.ts))

    def gpu_buckets(
        self, name: str, cutoff: Cutoff, n_buckets: int, gpus: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """``Store.gpu.buckets`` via :meth:`gpu`; live, only what new samples changed is read."""
        return self.gpu(
            f"buckets.{name}",
            cutoff,
            lambda store, cut: self._gpu_buckets.buckets(
                store, self.run, name, n_buckets, cut, gpus
            ),
        )

    def gpu_summary(self, cutoff: Cutoff = OPEN) -> pd.DataFrame:
        """One row per GPU (``Store.gpu.summary``): what the GPUs, FLOPS and Health pages read."""
        return self.gpu(
            "summary", cutoff, lambda s, cut: self._gpu_buckets.summary(s, self.run, cut)
        )

    def _reload(self) -> None:
        """Forget every loaded row; the next read fetches all again (versions keep growing)."""
        self._reloads += 1
        self._newest.clear()
        for kind in list(self._frames):
            self._frames[kind].reset()
            self._seen[kind] = 0
            self._extend_frame(kind, self._hi())
            self._versions[kind] = self._versions.get(kind, 0) + 1
        for kind in list(self._records):
            self._records[kind] = []
            self._keys[kind] = set()
            self._seen[f"rec:{kind}"] = 0
            self._extend_records(kind, self._hi())
            self._versions[f"rec:{kind}"] = self._versions.get(f"rec:{kind}", 0) + 1

    def _hi(self) -> int:
        """The id bound of the data this object has promised to show."""
        if self.last_id == 0:
            self.last_id = self.store.last_id(self.run)
        return self.last_id

    def _extend_frame(self, kind: str, hi: int) -> None:
        """Append rows with ``seen < id <= hi`` (rows above ``hi`` wait for the next refresh).

        Read a page at a time (``Store.frames.pages``), each page its own chunk: a million
        steps' stored JSON is never in memory at once.
        """
        grew = False
        for rows in self._store_pages(kind, self._seen[kind], hi):
            grew = self._append(kind, rows) or grew
            chunks = self._frames[kind]
            if chunks.rows - chunks.spilled_rows >= frame_pages.FRAME_PAGE_ROWS:
                self._feed(kind)  # a page's worth held: a long run being read, or grown live
        self._seen[kind] = hi
        if grew:
            self._versions[kind] = self._versions.get(kind, 0) + 1

    def _feed(self, kind: str) -> None:
        """Every fold of ``kind`` takes in its new rows; then the rows all took in are let go.

        Not when every row is held anyway (:meth:`Chunks.hold_whole`): the folds then read
        them when a page asks, as they did before rows were let go.
        """
        if self._frames[kind].held_whole:
            return
        for fold in self._kind_folds.get(kind, []):
            fold.take_in(self._frames[kind])
        self._spill(kind)

    def _spill(self, kind: str) -> None:
        """Let go of the rows of a big ``kind`` that every one of its folds has taken in.

        Every fold, not only those of ``folds``: one a page made later reads what it has not
        taken in from the rows held, not from the store again.
        """
        chunks, folds = self._frames[kind], self._kind_folds.get(kind, [])
        if kind in self._fold_fns and folds and chunks.rows >= SPILL_MIN_ROWS:
            chunks.spill(min(fold.consumed(chunks) for fold in folds))

    def _reread(self, kind: str, last_id: int) -> Iterator[pd.DataFrame]:
        """The rows of ``kind`` up to ``last_id`` read again, a page at a time (as appended)."""
        for rows in self._store_pages(kind, None, last_id):
            if not rows.empty:
                yield rows.reset_index(drop=True)

    def _store_pages(self, kind: str, after_id: int | None, hi: int) -> Iterator[pd.DataFrame]:
        """Rows of ``kind`` with ``after_id < id <= hi`` by page, transformed: new or reread."""
        read = self.store.frames.pages(self.run, kind, after_id=after_id)
        with closing(read_ahead(read, frame_pages.FRAME_PAGE_ROWS)) as pages:
            for page in pages:
                if page.empty:
                    return
                if "id" not in page.columns:  # (every store frame has ids)
                    yield self._transformed(kind, page)
                    return
                yield self._transformed(kind, page[page["id"] <= hi])
                if int(page["id"].iloc[-1]) >= hi:
                    return

    def _transformed(self, kind: str, rows: pd.DataFrame) -> pd.DataFrame:
        """``rows`` through the kind's transform, if it has one (not an empty frame)."""
        transform = self._transforms.get(kind)
        return rows if transform is None or rows.empty else transform(rows)

    def _append(self, kind: str, new: pd.DataFrame) -> bool:
        """Add one page of rows to ``kind``'s chunks; whether there were any."""
        if new.empty:
            return False
        self._frames[kind].append(new)
        if "ts" in new.columns and pd.notna(newest := new["ts"].max()):
            old = self._newest.get(kind)
            self._newest[kind] = newest if old is None else max(old, newest)
        return True

    def _extend_records(self, kind: str, hi: int) -> None:
        """Append record objects above the last id seen for them."""
        key = f"rec:{kind}"
        new = self.store.records(self.run, kind, after_id=self._seen[key])
        self._seen[key] = hi
        # records carry no id: ones stored after ``hi`` may come again, their key drops them
        have = self._keys.setdefault(kind, set())
        fresh = [r for r in new if record_key(r) not in have]
        have.update(record_key(r) for r in fresh)
        if fresh:
            self._records[kind].extend(fresh)
            self._versions[key] = self._versions.get(key, 0) + 1
