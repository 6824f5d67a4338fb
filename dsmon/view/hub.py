"""What the dashboard keeps per store and hands each page: one run's frames and how to show them.

:class:`FrameHub` is the object Streamlit's ``st.cache_resource`` keeps for a store, so every
browser session showing a run shares one :class:`dsmon.view.cache.RunFrames`; :class:`View`
is what the dashboard frame (``app.py``) decides once per script run (which run, replay
position, live or not) and every page reads.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from dsmon.store.store import Store
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.fold import StepFn

#: Seconds a run's frames are kept after anyone last asked for them. A page on screen asks
#: at every redraw (every 2 s live), so only runs nobody shows go; shown again, a run is
#: read again as on its first opening.
IDLE_S = 600.0
#: Runs kept beyond which those not asked for in :data:`IN_USE_S` go too, the least recently
#: asked for first: a dashboard left open for weeks of runs, or someone clicking through many,
#: keeps neither every run's frames nor their derived views (``dsmon.view.cache.MEMO_BYTES``).
KEEP_RUNS = 16
#: A run asked for this recently stays whatever the count: a Compare page of more runs than
#: :data:`KEEP_RUNS` must not read them all again at every redraw.
IN_USE_S = 60.0


class FrameHub:
    """One :class:`RunFrames` per run over one store: the object ``st.cache_resource`` keeps.

    Bounded (:data:`IDLE_S`, :data:`KEEP_RUNS`): a session still holding the frames of a run
    that was let go keeps using them until its next full redraw, which asks the hub again.
    """

    def __init__(
        self,
        store: Store,
        transforms: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] | None = None,
        folds: Mapping[str, Mapping[str, StepFn]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self._transforms = transforms
        self._fold_fns = folds
        self._clock = clock
        #: Each run's frames and when they were last asked for, least recently first.
        self._runs: OrderedDict[str, tuple[RunFrames, float]] = OrderedDict()
        self._lock = threading.Lock()

    def run(self, name: str) -> RunFrames:
        """The frames of run ``name`` (created on first use, or after they were let go)."""
        now = self._clock()
        with self._lock:
            kept = self._runs.pop(name, None)
            if kept is not None:
                frames = kept[0]
            else:
                frames = RunFrames(self.store, name, self._transforms, self._fold_fns)
            for other, (_, asked) in list(self._runs.items()):
                crowded = len(self._runs) >= KEEP_RUNS and now - asked > IN_USE_S
                if not crowded and now - asked <= IDLE_S:
                    break  # the rest were asked for later
                del self._runs[other]
            self._runs[name] = (frames, now)
            return frames

    def kept(self) -> list[str]:
        """The runs whose frames are kept, least recently asked for first."""
        with self._lock:
            return list(self._runs)


@dataclass(frozen=True, slots=True)
class View:
    """What the dashboard frame hands each page: the run, its frames, replay and refresh.

    ``refresh_s`` is the fragment period when ``live`` (None: no auto-refresh, e.g. replay).
    ``hub`` gives the frames of the store's other runs, for a page that compares runs.
    ``run_live`` is whether the run counted as live when the frame was drawn, and
    ``seen_id`` its newest record id then: a page compares both with the store to notice
    that the run stopped or went on. ``look_s`` is how often a finished run shown as it
    stands is looked at for new records (None: not looked at, e.g. live, or replay).
    """

    run: str
    frames: RunFrames
    cutoff: Cutoff = OPEN
    live: bool = False
    refresh_s: float | None = None
    hub: FrameHub | None = None
    run_live: bool = False
    seen_id: int = 0
    look_s: float | None = None
