"""What the dashboard keeps per store and hands each page: one run's frames and how to show them.

:class:`FrameHub` is the object Streamlit's ``st.cache_resource`` keeps for a store, so every
browser session showing a run shares one :class:`dsmon.view.cache.RunFrames`; :class:`View`
is what the dashboard frame (``app.py``) decides once per script run (which run, replay
position, live or not) and every page reads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pandas as pd

from dsmon.store.store import Store
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN, Cutoff
from dsmon.view.fold import StepFn


class FrameHub:
    """One :class:`RunFrames` per run over one store: the object ``st.cache_resource`` keeps."""

    def __init__(
        self,
        store: Store,
        transforms: dict[str, Callable[[pd.DataFrame], pd.DataFrame]] | None = None,
        folds: Mapping[str, Mapping[str, StepFn]] | None = None,
    ) -> None:
        self.store = store
        self._transforms = transforms
        self._fold_fns = folds
        self._runs: dict[str, RunFrames] = {}
        self._lock = threading.Lock()

    def run(self, name: str) -> RunFrames:
        """The frames of run ``name`` (created on first use)."""
        with self._lock:
            if name not in self._runs:
                self._runs[name] = RunFrames(self.store, name, self._transforms, self._fold_fns)
            return self._runs[name]


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
