"""The checklist as the dashboard's health page needs it: cheap to refresh, live where it matters.

The page redraws every 1-2 s. Re-running forty rules over a long run's frames each time would
waste the refresh, and none of them can change unless new records arrived, except the stall
rule, whose verdict depends on the clock. So the checklist is memoised on the run's frame
versions (``dsmon.view.cache.RunFrames.memo``) and only the clock rules
(:data:`dsmon.health.live.CLOCK_RULES`) are evaluated on every refresh, against the clock
:func:`judge_now` picks. The run's state (:func:`run_state`, every page's status line) is read
from the same inputs. Pages import this module and render what it returns; they compute
nothing.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import NamedTuple

import pandas as pd

from dsmon.analysis import waiting
from dsmon.analysis.percentiles import Percentiles
from dsmon.analysis.step_stats import StatSource
from dsmon.health.gather import FRAME_KINDS, inputs_from_frames, store_kind_stamps
from dsmon.health.inputs import (
    BREAKDOWN,
    COORDINATOR,
    KIND_STAMPS,
    LAST_BEATS,
    LAST_SKIPPED,
    MICRO,
    NEWEST_TS,
    RANK_PHASES,
    RANK_STATS,
    SKIPPED,
    HealthInputs,
)
from dsmon.health.live import CLOCK_RULES, merged
from dsmon.health.model import Checklist, CheckResult, Status
from dsmon.health.registry import all_rules, evaluate, run_rule
from dsmon.health.report import facts_line
from dsmon.health.run_state import RunState, judge
from dsmon.health.triage import Triage, triage
from dsmon.store.records.runs import RunInfo
from dsmon.view import ranks as rank_views
from dsmon.view import step_views, timer_steps, wire_steps
from dsmon.view.cache import GPU, STORED_KINDS, STORED_PREFIX, RunFrames
from dsmon.view.cutoff import OPEN, Cutoff

#: Dashboard page script per rule ``page`` (the scripts app.py lists).
PAGE_SCRIPTS = {
    "steps": "pages/steps.py",
    "training": "pages/training.py",
    "communication": "pages/communication.py",
    "gpus": "pages/gpus.py",
    "flops": "pages/flops.py",
}
#: Streamlit badge colour per status.
BADGE_COLORS = {
    Status.PASS: "green",
    Status.WARN: "orange",
    Status.FAIL: "red",
    Status.UNKNOWN: "gray",
    Status.NOT_APPLICABLE: "blue",
}
#: The counts row, worst first; rules that do not apply come last, apart from the passes.
COUNT_ORDER = (Status.FAIL, Status.WARN, Status.UNKNOWN, Status.PASS, Status.NOT_APPLICABLE)
#: Categories in display order, with their headings: what the run did before what its
#: config might change.
SECTIONS = (("runtime", "Run"), ("gpu", "GPUs"), ("config", "Configuration"))


class Panel(NamedTuple):
    """What the health page shows: the checklist, laid out worst first, and the run's facts."""

    checklist: Checklist
    subject: str
    laid: Triage


#: What the checklist's inputs are read from: a change to any of them makes new inputs. Each
#: kind by what the store holds of it: the checklist reads some kinds from the store's
#: summaries (the timers' breakdown) and others only if a rule asks, so none is loaded here.
_KINDS = (*(STORED_PREFIX + k for k in FRAME_KINDS), GPU, "rec:config")


def _inputs(frames: RunFrames, cutoff: Cutoff, run: str) -> HealthInputs:
    """The run's inputs as of ``cutoff``, read lazily from the dashboard's frames."""
    configs = frames.records("config", cutoff)
    summary = frames.gpu_summary(cutoff)
    views = {
        BREAKDOWN: lambda: timer_steps.breakdown(frames, cutoff),
        MICRO: lambda: step_views.micro(frames, cutoff),
        COORDINATOR: lambda: timer_steps.coordinator_steps(frames, cutoff),
        SKIPPED: lambda: step_views.skipped(frames, cutoff),
        RANK_STATS: lambda: rank_views.stats(frames, cutoff),
        LAST_BEATS: lambda: rank_views.beats(frames, cutoff),
        RANK_PHASES: lambda: rank_views.phases(frames, cutoff),
    }
    if cutoff == OPEN:
        views[NEWEST_TS] = lambda: _newest_ts(frames)
        # each kind's highest step as the store keeps it: the run's state asks, and the
        # frames of a long run's step lines are a million rows read for their maximum
        views[KIND_STAMPS] = lambda: store_kind_stamps(frames.store, run)
        views[LAST_SKIPPED] = lambda: _last_skipped(frames, run)
    info = frames.info()  # its node names: a log line rarely says which node printed it
    inputs = inputs_from_frames(
        lambda kind: frames.frame(kind, cutoff),
        configs,
        run=run,
        node_names=info.nodes if info is not None else (),
        gpu_summary=summary,
        views=views,
        present=lambda kind: _present(frames, kind, cutoff),
        stats=_stat_source(frames, cutoff),
        stragglers=lambda: rank_views.stragglers(frames, cutoff),
    )
    return inputs


def _stat_source(frames: RunFrames, cutoff: Cutoff) -> StatSource:
    """The whole-run figures the dashboard keeps live: the timers', and the wire share's."""
    timers = timer_steps.stat_source(frames, cutoff)

    def stat(name: str) -> Percentiles | None:
        if name == waiting.REDUCTION_WIRE_OF_BWD:
            return wire_steps.stat(frames, cutoff)
        return timers(name)

    return stat


def inputs_of(frames: RunFrames, run: str, cutoff: Cutoff) -> HealthInputs:
    """The run's inputs as of ``cutoff``, made again only when its records changed."""
    return frames.memo("health.inputs", _KINDS, cutoff, lambda: _inputs(frames, cutoff, run))


def _static(frames: RunFrames, cutoff: Cutoff, run: str) -> tuple[HealthInputs, Checklist]:
    """Inputs and the verdicts of every rule that does not read the clock."""
    inputs = inputs_of(frames, run, cutoff)
    rules = [r for r in all_rules() if r.id not in CLOCK_RULES]
    return inputs, evaluate(inputs, rules)


def _newest_ts(frames: RunFrames) -> pd.DataFrame:
    """Each kind's newest time; the probe's kinds from the store's summaries of them."""
    newest = frames.newest_ts([k for k in FRAME_KINDS if k not in STORED_KINDS])
    probe = rank_views.newest_ts(frames)
    if not probe:
        return newest
    extra = pd.DataFrame({"ts": pd.Series(probe, dtype="datetime64[ns]")})
    return pd.concat([newest, extra]) if not newest.empty else extra


def _last_skipped(frames: RunFrames, run: str) -> pd.DataFrame:
    """The run's newest step line's step and skipped count, as the store keeps it."""
    newest = frames.store.skips.newest(run)
    return pd.DataFrame([newest] if newest else [], columns=["step", "skipped"])


def _present(frames: RunFrames, kind: str, cutoff: Cutoff) -> bool:
    """Whether ``kind`` has rows as of ``cutoff``; live, as the store counts them (none read)."""
    if cutoff == OPEN:
        return frames.stored(kind) > 0
    if kind == "rank_step":
        return not rank_views.stats(frames, cutoff).empty
    if kind == "heartbeat":
        return not rank_views.beats(frames, cutoff).empty
    return frames.has_rows(kind, cutoff)


def judge_now(info: RunInfo | None, cutoff: Cutoff, now: datetime) -> datetime | None:
    """The clock a run is judged against: ``now``, a replay position's time, or None.

    A run a collector delivered live, shown as it stands, may still be going, however long
    it has been silent: it is judged against the wall clock (a silent job is silent, not
    killed). A replay position is judged as a live look at that moment would have judged
    it, against the time of its step. An imported run's record is complete: None judges it
    as of the end of what it holds.
    """
    if cutoff != OPEN:
        return None if cutoff.ts is None else cutoff.ts.to_pydatetime()
    if info is None or info.received_at is None:
        return None
    return now


def run_state(frames: RunFrames, run: str, cutoff: Cutoff, now: datetime) -> RunState:
    """What the run is doing as of ``cutoff`` (the status line of every page)."""
    inputs = inputs_of(frames, run, cutoff)
    return judge(dataclasses.replace(inputs, now=judge_now(frames.info(), cutoff, now)))


def panel(frames: RunFrames, run: str, cutoff: Cutoff, now: datetime) -> Panel:
    """The checklist of a run as it stood at ``cutoff``, its clock rules judged at ``now``."""
    inputs, static = frames.memo(
        "health.checklist", _KINDS, cutoff, lambda: _static(frames, cutoff, run)
    )
    live = dataclasses.replace(inputs, now=judge_now(frames.info(), cutoff, now))
    clock = {r.id: run_rule(r, live) for r in all_rules() if r.id in CLOCK_RULES}
    checklist = Checklist(merged(static.results, clock))
    return Panel(checklist, facts_line(inputs), triage(checklist))


def badge(status: Status) -> str:
    """The Streamlit markdown badge of a status (``:red-badge[FAIL]``)."""
    return f":{BADGE_COLORS[status]}-badge[{status.label.upper()}]"


class Section(NamedTuple):
    """One category's results as the page lays them out."""

    problems: list[CheckResult]
    unknown: list[CheckResult]
    passing: list[CheckResult]
    not_applicable: list[CheckResult]


def by_category(laid: Triage, category: str) -> Section:
    """One category's results: problems, rules that could not tell, passes, rules that do not apply.

    Problems are shown one by one, in :mod:`dsmon.health.triage`'s order; a problem that
    follows from another is not among them but under its cause (:meth:`Triage.symptoms_of`).
    The rules that could not tell, the passes and the rules that do not apply are each listed
    together, so the page leads with what needs attention and never presents an unchecked
    rule as a pass. A run with no ds_config leaves some twenty rules unable to tell: one box
    each buried its problems under them, and cost a browser about 0.15 s at every visit.
    """
    rows = [r for r in laid.rest if r.category == category]
    return Section(
        [r for r in laid.problems if r.category == category],
        [r for r in rows if r.status is Status.UNKNOWN],
        [r for r in rows if r.status is Status.PASS],
        [r for r in rows if r.status is Status.NOT_APPLICABLE],
    )
