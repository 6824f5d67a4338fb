"""The lines each page shows on where its run stands (live or finished, how far it got).

Whether a run is live is :func:`dsmon.health.live.run_is_live`'s to say, the same for the
pages, the dashboard frame and the server's health watcher.
"""

from __future__ import annotations

from datetime import datetime

from dsmon.health.live import run_is_live
from dsmon.store.records.runs import RunInfo


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
