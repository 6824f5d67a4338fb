"""dsmon dashboard frame: store, run picker, live and replay controls, page navigation.

Run with ``dsmon dashboard`` (or ``streamlit run app.py``); the store is ``$DSMON_STORE``.
The selected run and replay step live in the URL (``?run=...&step=...``), so a link opens
the same view. Pages read a :class:`dsmon.view.hub.View` from ``st.session_state``.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import streamlit as st

from dsmon.env import REFRESH_ENV, default_store
from dsmon.health.live import run_is_live
from dsmon.health.run_state import OVER, RunState
from dsmon.model.schema import MAX_STEP
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import open_store
from dsmon.store.url import redact_url
from dsmon.view import ranks as rank_views
from dsmon.view import step_views
from dsmon.view.cutoff import OPEN, step_cutoff
from dsmon.view.health_panel import run_state
from dsmon.view.hub import FrameHub, View
from dsmon.view.run_state import shown_live
from ui import page as ui_page
from ui.text import md_escape

ROOT = Path(__file__).resolve().parent
#: Seconds between live redraws (the fragments' ``run_every``, from ``$DSMON_REFRESH_S``);
#: the sidebar can change it.
REFRESH_CHOICES = (1.0, 1.5, 2.0, 5.0)
#: Seconds between looks at the store while the awaited run has not arrived.
WAIT_S = 2.0
VIEW_KEY = ui_page.VIEW_KEY
#: The last run and replay step picked in this session: the menu's page links drop the URL's
#: query, so they are kept here too and the URL is rewritten from them.
RUN_KEY = "dsmon_run"
STEP_KEY = "dsmon_step"


@st.cache_resource(show_spinner=False)
def hub(url: str) -> FrameHub:
    """One store connection and frame cache per store, shared by every browser session."""
    return FrameHub(open_store(url), folds=step_views.STEP_FOLDS)


def default_refresh() -> float:
    """The refresh period from ``$DSMON_REFRESH_S`` (default 2 s), snapped to the choices."""
    try:
        wanted = float(os.environ.get(REFRESH_ENV, "2"))
    except ValueError:
        wanted = 2.0
    return min(REFRESH_CHOICES, key=lambda c: abs(c - wanted))


def run_label(info: RunInfo, now: datetime, state: RunState | None = None) -> str:
    """How a run is listed in the picker: its name and what is known of it without reading it.

    ``state`` is the selected run's, judged only while a live sender writes to it
    (:func:`judged_state`): a witnessed end is named (``finished``, ``crashed``, ``ended``).
    Any other run is ``live`` while a sender writes to it, ``imported`` when none ever did
    (``dsmon import``), else ``not live``: its sender has stopped, and how the run ended is
    for its page to judge from the evidence, never for the picker to guess.
    """
    if state is not None and state.state in OVER:
        word = state.state.value
    elif run_is_live(info, now):
        word = "live"
    else:
        word = "imported" if info.received_at is None else "not live"
    return f"{info.name} · {word}"


def pick_run(runs: list[RunInfo], now: datetime, h: FrameHub) -> RunInfo | None:
    """The sidebar run picker; the choice is written back to the URL.

    A ``?run=`` naming no run of the store is said so, with the picker left empty, rather than
    silently showing another run under the link someone shared.
    """
    names = [r.name for r in runs]
    asked = st.query_params.get("run")
    wanted = asked or st.session_state.get(RUN_KEY)
    unknown = asked is not None and asked not in names
    index = None if unknown else (names.index(wanted) if wanted in names else 0)
    by_name = {r.name: r for r in runs}
    shown = names[index] if index is not None else None
    states = {shown: judged_state(h, by_name[shown], now)} if shown is not None else {}
    name = st.sidebar.selectbox(
        "Run",
        names,
        index=index,
        format_func=lambda n: run_label(by_name[n], now, states.get(n)),
        placeholder="Choose a run",
    )
    if name is None:
        st.error(
            f"No run named {md_escape(asked)} in this store: choose one of its "
            f"{len(names)} run(s) in the sidebar."
        )
        return None
    st.query_params["run"] = st.session_state[RUN_KEY] = name
    return by_name[name]


def live_controls(live_now: bool) -> float | None:
    """Live toggle and period; returns the refresh period, or None when not refreshing."""
    on = st.sidebar.toggle("Live refresh", value=live_now, help="Redraw charts with new records.")
    period = st.sidebar.select_slider(
        "Refresh every (s)", options=list(REFRESH_CHOICES), value=default_refresh(), disabled=not on
    )
    return float(period) if on else None


def replay_controls(info: RunInfo) -> int | None:
    """Step slider for a finished run: the dashboard as it stood at that step.

    Its bounds are numbers a browser holds exactly: a step past ``MAX_STEP`` in the store (no
    parser or ingest server lets one in; an older store may hold one) would make Streamlit
    refuse the slider, and with it every page of the run.
    """
    last = info.last_step if info.last_step is None else min(info.last_step, MAX_STEP)
    if last is None or last < 2:
        return None
    kept = st.session_state.get(STEP_KEY)
    wanted = st.query_params.get("step") or (kept[1] if kept and kept[0] == info.name else None)
    start = int(wanted) if wanted and wanted.isdigit() and 1 <= int(wanted) <= last else last
    step = st.sidebar.slider("Replay: show the run as of step", 1, last, start)
    if step >= last:
        st.query_params.pop("step", None)
        st.session_state.pop(STEP_KEY, None)
        return None
    st.query_params["step"] = str(step)
    st.session_state[STEP_KEY] = (info.name, str(step))
    return int(step)


def judged_state(h: FrameHub, info: RunInfo, now: datetime) -> RunState | None:
    """The selected run's state, read after its newest records; None when no sender writes to it.

    Its state is judged only while a live sender writes to it: an imported long run is not
    read whole before its page is drawn (the page judges it, under its reading spinner).
    """
    frames = h.run(info.name)
    frames.refresh()
    if not run_is_live(info, now):
        return None
    return run_state(frames, info.name, OPEN, now)


def selected_live(h: FrameHub, info: RunInfo, now: datetime) -> bool:
    """Whether the selected run is followed live: a live sender writes to it, no end was seen."""
    return shown_live(info, judged_state(h, info, now), now)


def build_view(url: str) -> View | None:
    """The sidebar and the page context; None when the store holds no run."""
    h = hub(url)
    # Newest first; a live run's lines may carry no time, so its receive time counts too.
    runs = sorted(
        h.store.runs(), key=lambda r: max(r.last_ts or "", r.received_at or ""), reverse=True
    )
    st.sidebar.title("dsmon")
    if not runs:
        return None
    now = datetime.now()
    info = pick_run(runs, now, h)
    if info is None:
        return None
    frames = h.run(info.name)
    live_now = selected_live(h, info, now)
    refresh_s = live_controls(live_now)
    cutoff, step = OPEN, None
    if refresh_s is None:
        step = replay_controls(info)
        if step is not None:  # the run's timers, step lines or probe steps: read only to replay
            if info.kinds.get("timer"):
                stepped = frames.frame("timer")
            elif info.kinds.get("step"):
                stepped = frames.frame("step")
            else:  # DeepSpeed's default log level: the probe's steps have the times
                stepped = rank_views.stats(frames, OPEN)
            cutoff = step_cutoff(stepped, step)
    st.sidebar.caption(f"Store: {md_escape(redact_url(url))}")
    # A finished run is looked at for new records, unless the user chose what to see: live
    # refresh switched off on a live run, or a step to replay.
    looks = refresh_s is None and not live_now and step is None
    return View(
        run=info.name,
        frames=frames,
        cutoff=cutoff,
        live=refresh_s is not None,
        refresh_s=refresh_s,
        hub=h,
        run_live=live_now,
        seen_id=frames.last_id,
        look_s=ui_page.LOOK_S if looks else None,
    )


def pages() -> list[st.Page]:
    """The pages in menu order: the health checklist first, as the run's front page."""
    return [
        st.Page(ROOT / "pages" / "health.py", title="Health", default=True),
        st.Page(ROOT / "pages" / "steps.py", title="Steps"),
        st.Page(ROOT / "pages" / "training.py", title="Training"),
        st.Page(ROOT / "pages" / "autotuner.py", title="Autotuner"),
        st.Page(ROOT / "pages" / "compare.py", title="Compare"),
        st.Page(ROOT / "pages" / "communication.py", title="Communication"),
        st.Page(ROOT / "pages" / "gpus.py", title="GPUs"),
        st.Page(ROOT / "pages" / "flops.py", title="FLOPS"),
    ]


def follow_page_param(listed: list[st.Page], current: st.Page) -> None:
    """Go to the page a page script asked for when it ran before this frame (``?page=``).

    Streamlit runs a ``pages/`` script directly when a new server's first request is that
    page's URL (its legacy pages-folder mode, left only once ``st.navigation`` has run); such
    a page switches here with ``?page=<name>`` so the frame runs first, then comes back.
    """
    wanted = st.query_params.get("page")
    if wanted is None:
        return
    del st.query_params["page"]
    target = next((p for p in listed if p.url_path == wanted), None)
    if target is not None and target.url_path != current.url_path:
        st.switch_page(target, query_params=st.query_params.to_dict())


def main() -> None:
    """Render the frame, then the selected page."""
    st.set_page_config(page_title="dsmon", layout="wide")
    listed = pages()
    page = st.navigation(listed)
    follow_page_param(listed, page)
    url = os.environ.get("DSMON_STORE") or default_store()
    view = build_view(url)
    if view is None:
        if not hub(url).store.runs():
            st.info(
                f"No runs in the store `{redact_url(url)}` yet. Import a log with "
                "`dsmon import PATH`, or run `dsmon demo`; this page shows the run as soon "
                "as its first records arrive."
            )
        wait_for_run(url, st.query_params.get("run"))
        return
    st.session_state[VIEW_KEY] = view
    page.run()


def wait_for_run(url: str, wanted: str | None) -> None:
    """Look again every few seconds, and redraw the app once the awaited run is there.

    A dashboard is often opened before the collector has sent anything (``dsmon watch`` of a
    job that is still starting, or a link to a run not yet begun): it must not stay on
    "no runs" until someone reloads the page.
    """

    def arrived() -> bool:
        names = {r.name for r in hub(url).store.runs()}
        return (wanted in names) if wanted else bool(names)

    ui_page.rerun_when(arrived, WAIT_S)


main()
