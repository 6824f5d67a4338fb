"""The line each page shows on where its run stands: its state, how far it got, what it holds.

The state is :func:`dsmon.health.run_state.judge`'s, read through the health panel's inputs
(:func:`dsmon.view.health_panel.run_state`): the same on every page, in ``dsmon check``, in the
watcher's alerts and in ``/metrics``.
"""

from __future__ import annotations

from datetime import datetime

from dsmon.health.live import run_is_live
from dsmon.health.run_state import OVER, RunState
from dsmon.store.records.runs import RunInfo


def shown_live(info: RunInfo | None, state: RunState | None, now: datetime) -> bool:
    """Whether a page follows the run live: a live sender writes to it and no end was seen.

    An imported run is never live; a run whose launcher (or ``dsmon run``, or every rank's
    last heartbeat) reported its end is not either, though its last records came a moment ago.
    """
    if info is None or not run_is_live(info, now):
        return False
    return state is None or state.state not in OVER


def status_line(info: RunInfo | None, state: RunState | None) -> str:
    """One line on where the run stands, drawn with every refresh of a page.

    It is part of the page's live fragment, not of the sidebar (which is drawn only on a full
    rerun), so it never contradicts the charts below it.
    """
    if info is None:
        return "This run is no longer in the store."
    head = state.line() if state is not None else "unknown"
    last = info.last_ts.replace("T", " ") if info.last_ts else "no timestamp"
    step = "-" if info.last_step is None else f"{info.last_step:,}"
    nodes = f"{len(info.nodes)} node(s)" if info.nodes else "node unknown"
    # a record that ends with no end witnessed names its last step in the state already
    said = "" if state is not None and state.names_last_step else f" · last step {step}"
    return (
        f"{head}{said} · {nodes} · {len(info.ranks)} rank(s) sent records · "
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
