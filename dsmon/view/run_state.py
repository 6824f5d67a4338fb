"""Whether a run is live, and the line each page shows on where it stands.

A page redraws on a timer only while its run is being written to; the dashboard frame, the
pages' live fragments and the health watcher (``dsmon.watch.health``) all ask here, so they
agree on what live means.
"""

from __future__ import annotations

from datetime import datetime

import pandas as pd

from dsmon.store.records.runs import RunInfo

#: A run whose newest record is younger than this is shown as live (and auto-refreshed).
LIVE_WINDOW_S = 120.0


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
    """Whether a run is being written to: records received lately, or lately stamped.

    Receive time comes first: lines printed without a timestamp (timer lines; every line at
    DeepSpeed's default log level) leave ``last_ts`` at the run's start while it goes on.
    """
    return is_live(info.received_at, now, window_s) or is_live(info.last_ts, now, window_s)


def status_line(info: RunInfo | None, now: datetime) -> str:
    """One line on where the run stands, drawn with every refresh of a page.

    It is part of the page's live fragment, not of the sidebar (which is drawn only on a full
    rerun), so it never contradicts the charts below it.
    """
    if info is None:
        return "This run is no longer in the store."
    state = "live" if run_is_live(info, now) else "finished"
    last = info.last_ts.replace("T", " ") if info.last_ts else "no timestamp"
    step = "-" if info.last_step is None else f"{info.last_step:,}"
    nodes = f"{len(info.nodes)} node(s)" if info.nodes else "node unknown"
    return (
        f"{state} · last step {step} · {nodes} · {len(info.ranks)} rank(s) sent records · "
        f"{info.n_records:,} records · last stamped line {last}"
    )


def reading_line(run: str, info: RunInfo | None) -> str:
    """What a page says while it reads and draws the run, shown when that takes a while.

    The first look at a long run reads all of it (20 s for 2.9 million records on a 2-core
    machine), and a blank page for that long looks broken; later refreshes read only new
    records and finish before the message would show.
    """
    if info is None:
        return f"Reading run {run}"
    return f"Reading run {run} ({info.n_records:,} records)"
