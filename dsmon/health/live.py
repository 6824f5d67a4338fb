"""A run judged live: when it counts as live, and which rules read the clock.

A run a collector delivers is judged against the wall clock (a stall is the absence of new
records, a job without exit lines is still running); a complete record (an import, a replay
position) as of its end. The dashboard (its frame,
its pages' live fragments, its health panel) and the server's health watcher
(``dsmon.watch.health``) all ask here, so they agree on what live means, and both evaluate
the rules that do not read the clock only when the run got new records, the clock rules on
every refresh or round (:data:`CLOCK_RULES`, :func:`merged`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

import pandas as pd

from dsmon.health.model import CheckResult
from dsmon.health.registry import all_rules
from dsmon.store.records.runs import RunInfo

#: A run whose newest record is younger than this is shown as live (and auto-refreshed).
LIVE_WINDOW_S = 120.0
#: The rules whose verdict depends on the wall clock (they read ``HealthInputs.now``: a live run
#: is not "killed" for lacking exit lines, a stall is measured against now), re-evaluated on
#: every refresh instead of memoised. tests/unit/app/test_health_page.py checks that no other rule reads it.
CLOCK_RULES = frozenset({"run.state", "run.errors", "run.stalled", "ranks.hang"})


def is_live(last_ts: str | None, now: datetime, window_s: float | None = None) -> bool:
    """A run is live when its newest record is at most ``window_s`` old (either clock way).

    DeepSpeed stamps lines in the writer's local time without a zone, so the comparison is
    against the local wall clock and tolerates small skew in both directions. The window
    defaults to :data:`LIVE_WINDOW_S` as it is at the call, not as it was at import.
    """
    if not last_ts:
        return False
    if window_s is None:
        window_s = LIVE_WINDOW_S
    try:
        age = abs((now - pd.Timestamp(last_ts).to_pydatetime()).total_seconds())
    except (ValueError, OverflowError):  # a timestamp no calendar has: says nothing
        return False
    return age <= window_s


def run_is_live(info: RunInfo, now: datetime, window_s: float | None = None) -> bool:
    """Whether a run is being written to by a live sender: records received lately.

    A run no live sender ever wrote to (``dsmon import``) is never live, however recent its
    lines' times. Receive time comes first: lines printed without a timestamp (timer lines;
    every line at DeepSpeed's default log level) leave ``last_ts`` at the run's start while it
    goes on. Whether the run has ended is its state's to say
    (:func:`dsmon.health.run_state.judge`): a run whose end was witnessed is not live either.
    """
    if info.received_at is None:
        return False
    return is_live(info.received_at, now, window_s) or is_live(info.last_ts, now, window_s)


def merged(
    static: Sequence[CheckResult], clock: Mapping[str, CheckResult]
) -> tuple[CheckResult, ...]:
    """All results in registry order: the memoised ones with the clock rules slotted in."""
    by_id = {r.rule_id: r for r in static} | dict(clock)
    return tuple(by_id[r.id] for r in all_rules() if r.id in by_id)
