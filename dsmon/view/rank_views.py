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
import weakref
from collections.abc import Callable

import pandas as pd

from dsmon.analysis import ranks
from dsmon.analysis.stragglers import StragglerSummary, straggler_summary
from dsmon.model.frames import records_frame
from dsmon.store.ranks.tables import bucket_width
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.rank_summary import LiveStragglers

#: Buckets of steps the busy-time figure draws at most (per rank) ...
BUSY_BUCKETS = 300
#: ... and cells at most when it is a heatmap of many ranks: 64 ranks x 300 buckets would
#: send the browser 150 kB on every refresh.
BUSY_CELLS = 8000


class _LiveStats:
    """A run's per-step table, extended with the rows the store changed since the last read."""

    def __init__(self) -> None:
        self.frame: pd.DataFrame | None = None
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
            if before is None or before.empty:
                merged = new
            else:
                merged = _merged(before, new) if not new.empty else before
            if before is None or not new.empty:
                self.stragglers.update(before, new, merged)
            self.frame = merged
            if not new.empty:
                self.after_id = int(new["id"].max())
            return self.frame


def _merged(held: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """``held`` with the steps of ``new`` replaced or added, in step order."""
    first = new["step"].min()
    if held["step"].iloc[-1] < first:  # only new steps: no search of the held ones
        return pd.concat([held, new], ignore_index=True)
    kept = held[~held["step"].isin(new["step"])]
    merged = pd.concat([kept, new], ignore_index=True)
    return merged.sort_values("step", kind="stable").reset_index(drop=True)


_LIVE: weakref.WeakKeyDictionary[RunFrames, _LiveStats] = weakref.WeakKeyDictionary()
_LIVE_LOCK = threading.Lock()


def _live(frames: RunFrames) -> _LiveStats:
    with _LIVE_LOCK:
        if frames not in _LIVE:
            _LIVE[frames] = _LiveStats()
        return _LIVE[frames]


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
