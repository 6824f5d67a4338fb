"""GPU buckets that a live page reads again only where new samples fell.

The GPUs page asks for the buckets of every GPU each second. Summing up a day of 64 GPUs'
roll-ups again on each tick cost 0.25 s of a 0.5 s refresh, to change the last bucket or two.
The store reads again only the buckets touched since the grid it is handed
(``Store.gpu.grid``'s ``since``); this keeps that grid per query, for the open end of a run
(a replay position reads whole).

The per-GPU summary (one row per GPU over the whole run, on the GPUs, Health and FLOPS pages)
is one bucket per GPU: every sample changes it. Live, the store keeps it in two parts, before
and from the newest roll-up, and a tick reads only the second
(``dsmon.store.gpu.reads.summary_grid``): the first look at a run sums up 64 GPUs x 24 h in
one pass of the roll-ups (a summing up of the GPUs page's 300-bucket grid cost 0.1-0.2 s
more), and a tick reads the newest roll-ups only.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import pandas as pd

from dsmon.store.gpu import buckets

if TYPE_CHECKING:
    from dsmon.store.gpu.buckets import BucketGrid
    from dsmon.store.store import Store

#: Grids kept per run: one per query a page makes (the grid, each choice of GPUs drawn).
KEEP = 8
#: The query of every GPU over the run that the GPUs page draws: time buckets of the
#: GPUs x time grids (traces get ``N_OUT``, two points each: min and max).
GRID = "grid"
GRID_BUCKETS = 300
#: The query of the per-GPU summary: one bucket per GPU.
SUMMARY = "summary"


class LiveGpuBuckets:
    """The last grid of each bucket query of one run, handed back to the store as ``since``."""

    def __init__(self, keep: int | None = None) -> None:
        self._keep = KEEP if keep is None else keep
        self._last: OrderedDict[str, BucketGrid] = OrderedDict()
        self._lock = threading.Lock()

    def buckets(
        self,
        store: Store,
        run: str,
        name: str,
        n_buckets: int,
        ts_max: str | datetime | None,
        gpus: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """``store.gpu.buckets(run, n_buckets, ts_max, gpus)``, from the last grid when live."""
        if ts_max is not None:  # a replay position: not the run's open end
            return store.gpu.buckets(run, n_buckets, ts_max, gpus)
        return self._grid(store, run, name, n_buckets, gpus).per_bucket()

    def summary(self, store: Store, run: str, ts_max: str | datetime | None) -> pd.DataFrame:
        """``store.gpu.summary(run, ts_max)``; live, from the last grid (module doc)."""
        if ts_max is not None:
            return store.gpu.summary(run, ts_max)
        got = self._grid(store, run, SUMMARY, None, None)
        return buckets.summary(got.stats, got.series)

    def _grid(
        self,
        store: Store,
        run: str,
        name: str,
        n_buckets: int | None,
        gpus: Sequence[str] | None,
    ) -> BucketGrid:
        """The store's grid of the query ``name``, handed its last one; kept for the next."""
        with self._lock:
            since = self._last.get(name)
        got = store.gpu.grid(run, n_buckets, None, gpus, since=since)
        with self._lock:
            self._last[name] = got
            self._last.move_to_end(name)
            while len(self._last) > self._keep:
                self._last.popitem(last=False)
        return got
