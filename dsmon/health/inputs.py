"""Everything a rule may look at, gathered once: the config, facts about the run, the frames.

Rules are pure functions of one :class:`HealthInputs`, so the same rule runs on a config file
alone (``dsmon check ds_config.json``), on a replayed log, and live on the dashboard; a rule
whose data is absent answers UNKNOWN instead of guessing. The builders that fill it from a
store or from parsed records live in :mod:`dsmon.health.gather`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import pandas as pd

from dsmon.analysis import ranks
from dsmon.analysis.step_stats import StatSource
from dsmon.analysis.stragglers import StragglerSummary
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.schema import Version, version_text

#: Keys of :attr:`HealthInputs.frames` for per-step views of the timer rows that a caller
#: already holds (the dashboard's, updated with new steps only): a rule that needs one takes
#: it instead of computing it from every timer row (:func:`step_view`).
BREAKDOWN = "timer:breakdown"
MICRO = "timer:micro"
COORDINATOR = "timer:coordinator"
#: Likewise of the ``step=`` lines: ``dsmon.analysis.steps.skipped_counts``.
SKIPPED = "step:skipped"
#: Its last row alone (the newest step line's ``step`` and ``skipped``; empty: none), from a
#: caller whose store keeps it (``Store.skips``): the run's skipped count is that line's, and
#: a long run's step lines are a million rows read for it.
LAST_SKIPPED = "step:last_skipped"
#: Per-step figures of the probe's ``rank_step`` records (``dsmon.analysis.ranks.step_stats``)
#: and each rank's newest heartbeat (``ranks.last_beats``), which a store keeps as records
#: arrive: the rules read these, never a 64-rank run's millions of probe records.
RANK_STATS = ranks.STATS_KEY
LAST_BEATS = "heartbeat:last"
#: Each rank's mean phase times over the whole run (``ranks.phase_buckets`` of
#: ``ranks.WHOLE_RUN``), which a store keeps as roll-ups.
RANK_PHASES = ranks.PHASES_KEY
#: Key of a frame indexed by kind whose ``ts`` is that kind's newest record time and ``step``
#: its highest step, as a store keeps them while records are written (``Store.kind_stats``):
#: the run's state asks both of every step kind, and a long run's whole frames are gigabytes.
KIND_STAMPS = "kind:stamps"
#: The timer rows' ``ts`` and ``step`` columns alone: whether the timers carry a time of their
#: own (``dsmon.health.stall``), without a long run's whole timer frame.
TIMER_TIMES = "timer:times"
#: Key of a frame indexed by kind whose ``ts`` is that kind's newest timestamp: the stall
#: rule asks on every live refresh, and a maximum over every row would cost a scan each time.
NEWEST_TS = "newest_ts"

T = TypeVar("T")


class LazyFrames(Mapping[str, pd.DataFrame]):
    """Frames loaded on first use, then kept.

    A checklist that reads only the step breakdown never joins the raw timer rows: on a run
    of a million steps that join alone took most of a refresh.
    """

    def __init__(
        self,
        loaders: Mapping[str, Callable[[], pd.DataFrame]],
        present: Callable[[str], bool] | None = None,
    ) -> None:
        self._loaders = dict(loaders)
        self._loaded: dict[str, pd.DataFrame] = {}
        self._present = present

    def has_rows(self, kind: str) -> bool:
        """Whether ``kind`` has rows, asked of ``present`` when the frame is not loaded yet.

        A rule that only needs to know whether the run printed step lines at all should not
        join a million of them to find out.
        """
        if kind in self._loaded or self._present is None or kind not in self._loaders:
            return kind in self._loaders and not self[kind].empty
        return self._present(kind)

    def __getitem__(self, kind: str) -> pd.DataFrame:
        if kind not in self._loaded:
            self._loaded[kind] = self._loaders[kind]()
        return self._loaded[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaders)

    def __len__(self) -> int:
        return len(self._loaders)


#: How ``RunFacts.sources`` names a data-parallel size taken from the world size: a guess that
#: pipeline or tensor parallelism makes too large, so the batch rule does not fail on it alone.
DP_FROM_WORLD = "world size (assumes no model parallelism)"


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What is known about where the run executes, each with how it was learnt.

    ``device`` is ``gpu`` or ``cpu`` (from the comm backend, the accelerator line or NVML
    samples), ``nodes`` the number of hosts, ``world_size`` the number of ranks and
    ``dp_size`` the data-parallel size DeepSpeed's batch arithmetic uses (its config's
    ``world_size``). ``sources`` says, per fact name, where it was learnt.
    """

    ds_version: Version | None = None
    device: str | None = None
    backend: str | None = None
    world_size: int | None = None
    dp_size: int | None = None
    nodes: int | None = None
    gpu_names: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def version_label(self) -> str:
        """The version as evidence shows it (``unknown (judged as 0.19.8)`` when unknown)."""
        return version_text(self.ds_version)


@dataclass(frozen=True, slots=True)
class HealthInputs:
    """The data one evaluation of the checklist sees.

    ``frames`` maps a record kind (``timer``, ``step``, ``gpu``...) to the DataFrame
    ``Store.frames.frame`` returns for it. ``now`` is the evaluation time for live rules (the stall
    rule); None when replaying a finished run. ``effective`` is the config DeepSpeed printed
    at start-up (every value resolved), when the run's output has one: rules judge the
    user's ``config``, but a fix is only offered when it changes ``effective``. ``derived``
    keeps what several rules compute from the same frames (the step breakdown), once per
    evaluation; it goes with the inputs (``dataclasses.replace`` shares it, as the frames).
    """

    config: ConfigView | None = None
    effective: ConfigView | None = None
    facts: RunFacts = field(default_factory=RunFacts)
    frames: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    now: datetime | None = None
    run: str | None = None
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    #: Whole-run figures a caller keeps up to date (``dsmon.analysis.step_stats``): a rule
    #: asks here first and computes a figure from the breakdown when the answer is None.
    stats: StatSource | None = field(default=None, compare=False, repr=False)
    #: The probe's whole-run straggler figures, from a caller that keeps them up to date
    #: (``dsmon.view.ranks``); else computed from the per-step figures.
    stragglers: Callable[[], StragglerSummary] | None = field(
        default=None, compare=False, repr=False
    )

    def frame(self, kind: str) -> pd.DataFrame:
        """The frame of one kind; an empty frame when the run has none."""
        df = self.frames.get(kind)
        return df if df is not None else pd.DataFrame()

    def has_rows(self, kind: str) -> bool:
        """Whether the run has records of ``kind`` (without loading them, where it can)."""
        if isinstance(self.frames, LazyFrames):
            return self.frames.has_rows(kind)
        return not self.frame(kind).empty


def evaluated(inputs: HealthInputs, key: str, fn: Callable[[], T]) -> T:
    """``fn()``, computed once per evaluation: for these frames, at this ``now``.

    Several rules ask the same question (how the job ended, is a rank hung): the first asks,
    the others take the answer. ``dataclasses.replace`` shares ``derived`` between inputs
    that differ in ``now`` or their frames, so the answer is kept with both.
    """
    held = inputs.derived.get(key)
    if held is not None and held[0] is inputs.frames and held[1] == inputs.now:
        found: T = held[2]
        return found
    value = fn()
    inputs.derived[key] = (inputs.frames, inputs.now, value)
    return value


def step_view(
    inputs: HealthInputs,
    key: str,
    fn: Callable[[pd.DataFrame], pd.DataFrame],
    kind: str = "timer",
) -> pd.DataFrame:
    """``fn`` of one kind's rows, computed once per evaluation (``HealthInputs.derived``).

    A caller that already holds it (the dashboard, whose copy grows with new steps only)
    passes it among the frames under ``key``, and it is taken from there.
    """
    got = inputs.derived.get(key)
    if got is None:
        given = inputs.frames.get(key)
        got = given if given is not None else fn(inputs.frame(kind))
        inputs.derived[key] = got
    return got
