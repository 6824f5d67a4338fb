"""What a store answers about a run's GPUs: per-GPU summaries, time buckets, newest samples.

Pages and GPU rules ask these instead of loading every sample: a day of 64 GPUs at 1 Hz is
5.5 million of them. Each backend answers :meth:`GpuReads._gpu_fold` and
:meth:`GpuReads._gpu_latest` in SQL from its roll-ups (:mod:`dsmon.store.gpu_store`);
:func:`fold_samples` gives the same fold from samples in memory (a log checked without a
store), and the store tests compare the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from dsmon.model.records import GpuSampleRecord
from dsmon.store.gpu_rows import cut_ms, grid

if TYPE_CHECKING:
    import pandas as pd


class GpuFold(NamedTuple):
    """A fold (:mod:`dsmon.store.gpu_fold`) with its series and bucket grid.

    ``last_id`` is the newest GPU sample id stored when it was read (0: not known): handed
    back as ``since``, it tells the store which samples came after. ``split_ms`` marks a
    run's live summary (one bucket per GPU, ``width_ms`` None) folded in two parts: bucket 0
    before that time, bucket 1 from it on (``gpu_sql_read.summary_fold``).
    """

    fold: pd.DataFrame
    series: pd.DataFrame
    t0_ms: int
    width_ms: int | None
    last_id: int = 0
    split_ms: int | None = None

    def buckets(self) -> pd.DataFrame:
        """What :meth:`GpuReads.gpu_buckets` answers of this fold (``gpu_fold.buckets``)."""
        from dsmon.store import gpu_fold

        return gpu_fold.buckets(self.fold, self.series, self.t0_ms, self.width_ms or 1)


class GpuReads:
    """GPU queries shared by the store backends (mixed into ``dsmon.store.base.Store``)."""

    def gpu_summary(self, run: str, ts_max: str | datetime | None = None) -> pd.DataFrame:
        """One row per GPU (``gpu_fold.summary``), samples up to ``ts_max`` when given."""
        from dsmon.store import gpu_fold

        got = self._gpu_fold(run, None, iso_text(ts_max), None)
        return gpu_fold.summary(got.fold, got.series)

    def gpu_buckets(
        self,
        run: str,
        n_buckets: int,
        ts_max: str | datetime | None = None,
        gpus: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Mean/min/max of every metric per GPU in up to ``n_buckets`` equal time buckets.

        ``gpus`` (labels, ``node/gpuN``) restricts the answer to those GPUs: traces are
        drawn for a few GPUs, at a finer grain than the grids of all of them.
        """
        return self.gpu_fold(run, n_buckets, ts_max, gpus).buckets()

    def gpu_fold(
        self,
        run: str,
        n_buckets: int | None,
        ts_max: str | datetime | None = None,
        gpus: Sequence[str] | None = None,
        since: GpuFold | None = None,
    ) -> GpuFold:
        """The fold behind :meth:`gpu_buckets`; given the fold read before, only what changed.

        A live page asks every second: with ``since`` (what this call returned last time), and
        the same grid and GPUs, the store folds again only the buckets that samples stored
        after ``since`` fall in (late ones too) and keeps the others from ``since``.
        ``n_buckets`` None folds one bucket per GPU (what :meth:`gpu_summary` sums up): live,
        it is kept in two parts, and ``since`` folds again only the part from the newest
        roll-up on.
        """
        return self._gpu_fold(run, n_buckets, iso_text(ts_max), gpus, since)

    def gpu_latest(self, run: str, ts_max: str | datetime | None = None) -> list[GpuSampleRecord]:
        """The newest sample of each GPU (up to ``ts_max``)."""
        return self._gpu_latest(run, cut_ms(iso_text(ts_max)))

    def _gpu_fold(
        self,
        run: str,
        n_buckets: int | None,
        ts_max: str | None,
        gpus: Sequence[str] | None,
        since: GpuFold | None = None,
    ) -> GpuFold:
        """The fold of a run's samples on a grid of ``n_buckets`` (None: one per GPU)."""
        raise NotImplementedError

    def _gpu_latest(self, run: str, ts_max: int | None) -> list[GpuSampleRecord]:
        """The newest sample of each GPU, up to ``ts_max`` (ms on the samples' clock)."""
        raise NotImplementedError


def fold_samples(frame: pd.DataFrame, n_buckets: int | None) -> GpuFold:
    """The fold of a frame of samples in memory, in ``n_buckets`` buckets (None: one)."""
    import pandas as pd

    from dsmon.store import gpu_fold

    empty = GpuFold(pd.DataFrame(columns=list(gpu_fold.FOLD_COLUMNS)),
                    pd.DataFrame(columns=list(gpu_fold.SERIES_COLUMNS)), 0, None)  # fmt: skip
    if frame.empty or "ts" not in frame.columns:
        return empty
    span = gpu_fold.span_ms(frame["ts"])
    if span is None:
        return empty
    t0, width = grid(n_buckets, span) if n_buckets else (span[0], None)
    series, _ = gpu_fold.series_frame(frame[frame["ts"].notna()])
    return GpuFold(gpu_fold.fold_frame(frame, t0, width), series, t0, width)


def iso_text(value: object) -> str | None:
    """A time bound as the ISO text records carry (datetimes and pandas Timestamps too)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime):
        return value.replace(tzinfo=None).isoformat(timespec="milliseconds")
    return None
