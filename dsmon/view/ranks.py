"""The probe's per-rank figures as the dashboard reads them: the store's summaries, kept live.

A 64-rank job of 100k steps stores 6.4 million ``rank_step`` records; loading them as a frame
took 15 s and gigabytes. Live, the Steps page, the checklist and Compare read instead what the
store keeps as records arrive (``dsmon.store.ranks.tables``): one row per step, each rank's
busy time per step bucket, each rank's newest heartbeat. The per-step table is read once, then
only its rows changed since (by record id). A replay position is read from them too, up to
its step; a position in time is computed from the records (``dsmon.analysis.ranks``),
memoised.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import pandas as pd

from dsmon.analysis import collectives, ranks, steps
from dsmon.analysis.stragglers import StragglerSummary, straggler_summary
from dsmon.analysis.waiting import split_ms
from dsmon.model.frames import records_frame
from dsmon.store.ranks.tables import bucket_width
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.quantiles import SortedValues
from dsmon.view.rowbuffer import RowBuffer

# ------------------------------------------------------------------------------------------
# The straggler summary of a live run, kept up to date with the steps that changed.
#
# ``ranks.straggler`` and the Steps page quote medians and counts over every steady step every
# rank reported (:class:`dsmon.analysis.stragglers.StragglerSummary`). Computed afresh, that
# is several passes over every step on each refresh: tens of milliseconds at a million steps,
# and growing with the run. A :class:`LiveStragglers` takes in the per-step rows the store
# changed since the last refresh (``dsmon.view.ranks``): a step every rank reported is
# final, and its figures go into sorted values (:class:`dsmon.view.quantiles.SortedValues`)
# and counts once; a step still waiting for a rank is kept aside until it is complete, or
# until the run is :data:`OPEN_STEPS` steps past it: a rank that stopped reporting (dead, or
# its node's collector gone) leaves every later step waiting, and a refresh that looked at
# every waiting step grew with the run from then on. Such a step, never a straggler step
# (``dsmon.analysis.ranks.stragglers`` keeps the steps every rank reported), counts only its
# step time, taken in for good. What would change a step taken in (a step stored again, a
# rank that was not there before, a late rank's line of a step taken in by age) takes
# everything in again. The answers equal :func:`dsmon.analysis.stragglers.straggler_summary`
# of the same rows (``tests/unit/store/test_rank_tables.py``).

#: Steps behind the newest after which a step some rank has not reported is taken in as it
#: is. A lagging node's lines come a few hundred steps late at most (a second of 10 ms
#: steps); a line later than this costs one reading of the whole table again, not a wrong
#: figure.
OPEN_STEPS = 4096


class LiveStragglers:
    """A :class:`StragglerSummary` of a growing per-step table (``ranks.step_stats`` rows)."""

    def __init__(self, warmup: int = steps.WARMUP_STEPS) -> None:
        self.warmup = warmup
        #: Changes whenever a step at or below :attr:`settled` changes (a reading again of
        #: the whole table, or a late row for such a step), so a reader keeping figures of
        #: the settled steps knows to start again.
        self.generation = 0
        self._reset()

    def _reset(self) -> None:
        self._whole: StragglerSummary | None = None  # before any steady step: computed whole
        self._ranks = 0  # every rank: the most ranks a steady step was reported by
        self._score, self._slowest, self._median, self._step_ms = (SortedValues() for _ in "1234")
        # dsmon.analysis.waiting.comm_split of the final steps seen in a collective
        self._wire_share, self._wait_share, self._wire_ms, self._wait_ms = (
            SortedValues() for _ in "1234"
        )
        self._counts: Counter[int] = Counter()
        self._final = 0  # steady steps taken in for good (every rank reported them)
        self._n, self._first, self._last, self._waited = 0, -1, -1, False
        self._open: dict[int, tuple[float, bool]] = {}  # step -> (median step time, waited)
        self._newest = -1  # the highest steady step taken in
        self._aged = -1  # the highest step taken in by age, some rank missing

    def again(self, before: pd.DataFrame | None, new: pd.DataFrame) -> bool:
        """Whether ``new`` rows change what was taken in, so the whole table must be again.

        Asked before the table takes them in: ``before`` is the whole table without them.
        """
        return before is None or self._whole is not None or self._changes_final(before, new)

    def update(self, new: pd.DataFrame, after: pd.DataFrame, again: bool) -> None:
        """Take in ``new`` rows; ``after``: the whole table with them; ``again``: :meth:`again`."""
        if again:
            self._rebuild(after)
        else:
            self._take(new[new["step"] > self.warmup])

    def summary(self) -> StragglerSummary:
        """The figures now."""
        if self._whole is not None:
            return self._whole
        pending = np.array([ms for ms, _ in self._open.values()], dtype=np.float64)
        empty = np.empty(0, dtype=np.float64)
        return StragglerSummary(
            steps=self._n,
            first_step=self._first if self._n else None,
            last_step=self._last if self._n else None,
            score=self._score.ranked(empty),
            slowest_ms=self._slowest.ranked(empty),
            median_ms=self._median.ranked(empty),
            counts=dict(self._counts),
            waited=self._waited or any(w for _, w in self._open.values()),
            step_ms=self._step_ms.ranked(pending),
            wire_share=self._wire_share.ranked(empty),
            wait_share=self._wait_share.ranked(empty),
            wire_ms=self._wire_ms.ranked(empty),
            wait_ms=self._wait_ms.ranked(empty),
        )

    def _changes_final(self, before: pd.DataFrame, new: pd.DataFrame) -> bool:
        """Whether ``new`` changes a step already taken in, or the count of ranks."""
        steady = new[new["step"] > self.warmup]
        if steady.empty:
            return False
        if (steady["ranks"] > self._ranks).any() and self._final:
            return True  # the steps every rank reported so far lack the new rank
        held = before["step"].to_numpy()
        new_steps = steady["step"].to_numpy()
        at = np.searchsorted(held, new_steps)
        found = at < len(held)
        found[found] = held[at[found]] == new_steps[found]
        old = before["ranks"].to_numpy()[at[found]]
        return bool((old == self._ranks).any() or (new_steps[found] <= self._aged).any())

    @property
    def open_steps(self) -> int:
        """Steps kept aside, waiting for a rank: at most about :data:`OPEN_STEPS`."""
        return len(self._open)

    @property
    def ranks(self) -> int:
        """The most ranks a steady step was reported by: every rank, as far as one knows."""
        return self._ranks

    @property
    def settled(self) -> int:
        """The step up to which every steady step is taken in for good (-1: none is).

        Complete, or taken in by age: a later row of such a step makes a new
        :attr:`generation`. The steps after it wait for a rank.
        """
        if self._whole is not None or self._newest < 0:
            return -1
        return min(self._open) - 1 if self._open else self._newest

    def _rebuild(self, table: pd.DataFrame) -> None:
        """Take in the whole table again."""
        self.generation += 1
        self._reset()
        steady = _after(table, self.warmup)
        if steady.empty:  # no step after the warm-up yet: the figures are over every step
            self._whole = straggler_summary(table, self.warmup)
            return
        self._ranks = int(steady["ranks"].max())
        self._take(steady)

    def _take(self, rows: pd.DataFrame) -> None:
        """Take in steady rows: the complete ones for good, the others aside until complete."""
        if rows.empty:
            return
        steps_in = rows["step"].to_numpy().astype(np.int64)
        if int(steps_in.min()) <= self.settled:
            self.generation += 1  # a late row of a settled step (one no rank had reported)
        self._forget_open(steps_in)  # what comes again replaces what was kept aside
        self._ranks = max(self._ranks, int(rows["ranks"].max()))
        self._newest = max(self._newest, int(steps_in.max()))
        horizon = self._newest - OPEN_STEPS
        final = (rows["ranks"] == self._ranks).to_numpy()
        aged = ~final & (steps_in <= horizon)
        if aged.any():
            self._take_aged(
                steps_in[aged],
                rows["median_total_ms"].to_numpy(dtype=np.float64)[aged],
                rows["waited"].to_numpy()[aged] > 0,
            )
        waiting = ~final & ~aged
        for step, total, waited in zip(
            steps_in[waiting],
            rows["median_total_ms"].to_numpy()[waiting],
            (rows["waited"].to_numpy() > 0)[waiting],
            strict=True,
        ):
            self._open[int(step)] = (float(total), bool(waited))
        self._age_open(horizon)
        done = rows if final.all() else rows[final]  # (a mask copies every column)
        if done.empty:
            return
        self._final += len(done)
        self._step_ms.add(done["median_total_ms"].to_numpy(dtype=np.float64))
        self._waited = self._waited or bool((done["waited"] > 0).any())
        if self._ranks >= 2:  # a straggler needs two ranks
            self._take_scores(done)

    def _forget_open(self, steps_in: np.ndarray) -> None:
        """Drop the steps kept aside that ``steps_in`` brings again."""
        if not self._open:
            return
        if len(steps_in) < len(self._open):  # a refresh: a few rows
            for step in steps_in.tolist():
                self._open.pop(step, None)
            return
        held = np.fromiter(self._open, dtype=np.int64, count=len(self._open))
        for step in np.intersect1d(held, steps_in).tolist():  # not a pop per row of a million
            del self._open[step]

    def _take_aged(self, steps_in: np.ndarray, total: np.ndarray, waited: np.ndarray) -> None:
        """Take in for good steps some rank never reported: their step time, whether waited."""
        self._step_ms.add(total)
        self._waited = self._waited or bool(waited.any())
        self._aged = max(self._aged, int(steps_in.max()))

    def _age_open(self, horizon: int) -> None:
        """Take in for good the steps kept aside that the run is :data:`OPEN_STEPS` past.

        Kept aside in the order they came, which is step order but for a late line: the
        oldest are first, and the loop stops at the first step still young enough.
        """
        aged: list[tuple[int, float, bool]] = []
        while self._open:
            step = next(iter(self._open))
            if step > horizon:
                break
            total, waited = self._open.pop(step)
            aged.append((step, total, waited))
        if aged:
            steps_aged, totals, waits = zip(*aged, strict=True)
            self._take_aged(
                np.array(steps_aged, dtype=np.int64),
                np.array(totals, dtype=np.float64),
                np.array(waits, dtype=bool),
            )

    def _take_scores(self, done: pd.DataFrame) -> None:
        """The straggler figures of steps every rank reported."""
        slowest = done["slowest_ms"].to_numpy(dtype=np.float64)
        median = ranks.straggler_baseline_ms(
            done["ranks"].to_numpy(),
            done["median_ms"].to_numpy(dtype=np.float64),
            done["fastest_ms"].to_numpy(dtype=np.float64),
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            self._score.add(np.where(median > 0, slowest / median, np.nan))
        self._slowest.add(slowest)
        self._median.add(median)
        # counted by numpy: a Counter of a list took a long run's first look a million steps
        ranks_seen, counts = np.unique(
            done["slowest_rank"].to_numpy().astype(np.int64), return_counts=True
        )
        self._counts.update(dict(zip(ranks_seen.tolist(), counts.tolist(), strict=True)))
        blocked = (done["waited"] > 0).to_numpy()  # the columns read, not every column, masked

        def col(name: str) -> np.ndarray:
            return done[name].to_numpy(dtype=np.float64)[blocked]

        wall = col("wall_ms")
        wire, wait = split_ms(
            wall, col("slowest_ms"), col("fastest_ms"), col("coll_wire_ms"), col("coll_max_ms")
        )
        with np.errstate(divide="ignore", invalid="ignore"):
            self._wire_share.add(np.where(wall > 0, wire / wall, np.nan))
            self._wait_share.add(np.where(wall > 0, wait / wall, np.nan))
        self._wire_ms.add(wire)
        self._wait_ms.add(wait)
        first, last = int(done["step"].min()), int(done["step"].max())
        self._first = first if self._n == 0 else min(self._first, first)
        self._last = max(self._last, last)
        self._n += len(done)


def _after(table: pd.DataFrame, warmup: int) -> pd.DataFrame:
    """The rows of steps after ``warmup``: a slice of a table in step order (the store's is).

    A mask would copy a million steps' every column on a long run's first look.
    """
    step = table["step"]
    if step.notna().all() and step.is_monotonic_increasing:
        return table.iloc[int(step.searchsorted(warmup, side="right")) :]
    return table[step > warmup]


#: Buckets of steps the busy-time figure draws at most (per rank) ...
BUSY_BUCKETS = 300
#: ... and cells at most when it is a heatmap of many ranks: 64 ranks x 300 buckets would
#: send the browser 150 kB on every refresh.
BUSY_CELLS = 8000


class _LiveStats:
    """A run's per-step table, extended with the rows the store changed since the last read.

    Once live rows come, the table is held in a :class:`dsmon.view.rowbuffer.RowBuffer`: a
    refresh writes the rows from the first step it changed on (the newest step or two, as
    ranks report them) and the table is read as views, where joining frames copied a
    million steps' every column at every refresh. A table the buffer cannot hold (times
    with a zone) is joined as frames.
    """

    def __init__(self) -> None:
        self.frame: pd.DataFrame | None = None
        self.buffer: RowBuffer | None = None
        self.after_id = 0
        self.counted = -1  # the run's rank_step records when last read
        self.stragglers = LiveStragglers()
        self.lock = threading.Lock()

    def update(self, frames: RunFrames) -> pd.DataFrame:
        """The table now."""
        with self.lock:
            counted = frames.stored("rank_step")
            if self.frame is not None and counted == self.counted:
                return self.frame  # no new probe record since the last read
            self.counted = counted
            new = frames.store.ranks.step_stats(frames.run, self.after_id)
            before = self.frame
            changed = before is None or not new.empty
            again = self.stragglers.again(before, new) if changed else False
            if before is None or before.empty:
                merged = new
            else:
                merged = self._joined(before, new) if not new.empty else before
            if changed:
                self.stragglers.update(new, merged, again)
            self.frame = merged
            if not new.empty:
                self.after_id = int(new["id"].max())
            return self.frame

    def _joined(self, held: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
        """``held`` with the steps of ``new`` replaced or added, in step order.

        Written into the buffer from the first step ``new`` holds: only the rows from there
        on are joined as frames. ``held``'s rows from there on change with it (a view).
        ``held`` is in step order, as the store gives the steps and :func:`_merged` keeps them.
        """
        if self.buffer is None or self.buffer.rows != len(held):
            self.buffer = RowBuffer.of(held)  # the first live rows: the table copied once
            if self.buffer is None:
                return _merged(held, new)
        at = int(np.searchsorted(held["step"].to_numpy(), new["step"].min(), side="left"))
        part = _merged(held.iloc[at:], new) if at < len(held) else new
        if not self.buffer.fits(part):
            self.buffer = None
            return _merged(held, new)
        self.buffer.write(at, part)
        return self.buffer.frame(self.buffer.rows)


def _merged(held: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``held`` with the steps of ``new`` replaced or added, in step order."""
    first = new["step"].min()
    if held["step"].iloc[-1] < first:  # only new steps: no search of the held ones
        return pd.concat([held, new], ignore_index=True)
    kept = held[~held["step"].isin(new["step"])]
    merged = pd.concat([kept, new], ignore_index=True)
    return merged.sort_values("step", kind="stable").reset_index(drop=True)


def _live(frames: RunFrames) -> _LiveStats:
    return frames.companion("ranks.live", _LiveStats)


def stats(frames: RunFrames, cutoff: Cutoff = OPEN) -> pd.DataFrame:
    """One row per step (``dsmon.analysis.ranks.STEP_STAT_COLUMNS``) as of ``cutoff``."""
    if cutoff == OPEN:
        return _live(frames).update(frames)
    if cutoff.step is not None:
        upto = cutoff.step
        return frames.memo(
            "ranks.stats.store",
            ["rank_step"],
            cutoff,
            lambda: frames.store.ranks.step_stats(frames.run, step_max=upto),
        )
    return _from_records(frames, "ranks.stats", "rank_step", cutoff, ranks.step_stats)


class Settled(NamedTuple):
    """The live per-step table and how much of it is settled (:attr:`LiveStragglers.settled`)."""

    table: pd.DataFrame
    generation: int
    settled: int
    ranks: int


@contextmanager
def settled(frames: RunFrames) -> Iterator[Settled]:
    """The live table brought up to date, held still (no other refresh writes it) meanwhile."""
    live = _live(frames)
    live.update(frames)
    with live.lock:  # the table as the figures took it in: another refresh may have gone on
        table = live.frame if live.frame is not None else pd.DataFrame()
        kept = live.stragglers
        yield Settled(table, kept.generation, kept.settled, kept.ranks)


def stragglers(frames: RunFrames, cutoff: Cutoff = OPEN) -> StragglerSummary:
    """The whole-run straggler figures as of ``cutoff``; live, kept up to date step by step."""
    if cutoff == OPEN:
        live = _live(frames)
        live.update(frames)
        with live.lock:
            return live.stragglers.summary()
    return frames.memo(
        "ranks.stragglers", ["rank_step"], cutoff, lambda: straggler_summary(stats(frames, cutoff))
    )


def busy(frames: RunFrames, cutoff: Cutoff = OPEN) -> pd.DataFrame:
    """Each rank's mean busy time per bucket of steps: as many buckets as the figure can use."""
    per_step = stats(frames, cutoff)
    n_ranks = int(per_step["ranks"].max()) if per_step["ranks"].notna().any() else 1
    many = n_ranks > ranks.LINE_RANKS
    n_buckets = max(BUSY_CELLS // n_ranks, 16) if many else BUSY_BUCKETS
    steps = per_step["step"]
    width = bucket_width(int(steps.max()) if steps.notna().any() else 0, n_buckets)
    if _served(cutoff):
        return frames.memo(
            f"ranks.busy.store.{width}",
            ["rank_step"],
            cutoff,
            lambda: frames.store.ranks.busy(frames.run, width, cutoff.step),
        )
    return _from_records(
        frames,
        f"ranks.busy.frame.{width}",
        "rank_step",
        cutoff,
        lambda rows: ranks.busy_buckets(ranks.rank_step_table(rows), width),
    )


def phases(frames: RunFrames, cutoff: Cutoff = OPEN, width: int = ranks.WHOLE_RUN) -> pd.DataFrame:
    """Each rank's mean phase times per bucket of ``width`` steps (default: the whole run).

    Columns ``dsmon.store.ranks.tables.PHASE_COLUMNS``: from the store's roll-ups live and
    at a replay step, from the records at a position in time.
    """
    if _served(cutoff):
        return frames.memo(
            f"ranks.phases.store.{width}",
            ["rank_step"],
            cutoff,
            lambda: frames.store.ranks.phases(frames.run, width, cutoff.step),
        )
    return _from_records(
        frames,
        f"ranks.phases.frame.{width}",
        "rank_step",
        cutoff,
        lambda rows: ranks.phase_buckets(ranks.rank_step_table(rows), width),
    )


def comm(frames: RunFrames, cutoff: Cutoff = OPEN) -> pd.DataFrame:
    """The probe's timed collectives per bucket of steps, op, size bucket and group size.

    As many buckets as the Communication page draws (:data:`BUSY_BUCKETS`), from the store's
    ``rank_comm`` live and at a replay step; at a position in time, from the records
    (``dsmon.analysis.collectives.comm_steps``, bucketed alike).
    """
    per_step = stats(frames, cutoff)
    last = per_step["step"].max() if per_step["step"].notna().any() else 0
    width = bucket_width(int(last), BUSY_BUCKETS)
    if _served(cutoff):
        return frames.memo(
            f"ranks.comm.store.{width}",
            ["rank_step"],
            cutoff,
            lambda: frames.store.ranks.comm(frames.run, width, cutoff.step),
        )
    return _from_records(
        frames,
        f"ranks.comm.frame.{width}",
        "rank_step",
        cutoff,
        lambda rows: collectives.bucketed(
            collectives.comm_steps(
                collectives.collective_rows(ranks.rank_step_table(rows, keep_collectives=True))
            ),
            width,
        ),
    )


def beats(frames: RunFrames, cutoff: Cutoff = OPEN) -> pd.DataFrame:
    """Each rank's newest heartbeat as of ``cutoff``, in rank order."""
    if _served(cutoff):
        return frames.memo(
            "ranks.beats", ["heartbeat"], cutoff, lambda: _stored_beats(frames, cutoff.step)
        )
    return _from_records(frames, "ranks.beats.frame", "heartbeat", cutoff, ranks.last_beats)


def _from_records(
    frames: RunFrames,
    name: str,
    kind: str,
    cutoff: Cutoff,
    fn: Callable[[pd.DataFrame], pd.DataFrame],
) -> pd.DataFrame:
    """``fn`` of the run's ``kind`` records as of ``cutoff`` (a position in time)."""
    return frames.memo(name, [kind], cutoff, lambda: fn(frames.frame(kind, cutoff)))


def _served(cutoff: Cutoff) -> bool:
    """Whether the store's tables answer as of ``cutoff``: live, or at a replay step."""
    return cutoff == OPEN or cutoff.step is not None


def _stored_beats(frames: RunFrames, step_max: int | None) -> pd.DataFrame:
    return records_frame("heartbeat", frames.store.ranks.last_heartbeats(frames.run, step_max))


def newest_ts(frames: RunFrames) -> dict[str, pd.Timestamp]:
    """The newest time of the probe's kinds, live (for the checklist's stall rule)."""
    out = {}
    for kind, frame in (("rank_step", stats(frames)), ("heartbeat", beats(frames))):
        if not frame.empty and frame["ts"].notna().any():
            out[kind] = pd.Timestamp(frame["ts"].max())
    return out
