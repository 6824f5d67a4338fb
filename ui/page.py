"""The frame every page runs in: its view of the run, and the live fragment around its body.

A page is a Streamlit script in ``pages/``. ``app.py`` runs first on every rerun (it owns the
navigation, the run picker and the replay controls) and leaves a :class:`dsmon.view.hub.View` in
the session; a page only renders it. Live, the page body is a fragment re-run every
``refresh_s`` seconds, and it must read the run's newest records first: that refresh is done
here for every page alike, so no page can forget it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dsmon.health.live import run_is_live
from dsmon.store.records.runs import RunInfo
from dsmon.view.cutoff import OPEN
from dsmon.view.health_panel import run_state
from dsmon.view.hub import View
from dsmon.view.run_state import reading_line, shown_live, status_line
from ui.charts import Sent
from ui.text import md_escape

#: Session key under which ``app.py`` leaves the view of the selected run.
VIEW_KEY = "dsmon_view"
#: Session key of the change a page last asked the frame to redraw for (run, live, record id):
#: asked once, so a rerun that does not reach the frame cannot loop.
RERUN_KEY = "dsmon_rerun_for"
#: Seconds between looks for new records of a finished run shown as it stands. Each look is a
#: Streamlit fragment run (about 60 ms of server CPU, whatever it does) plus one indexed read.
LOOK_S = 5.0


def page_view(script: str) -> View:
    """The view ``app.py`` prepared; a page opened by URL before it ran sends the user there.

    Streamlit runs a ``pages/`` script directly when a new server's first request is that
    page's URL; ``app.py`` then runs first and comes back to the page (``?page=<name>``).
    """
    if VIEW_KEY not in st.session_state:
        # app.py sits above pages/ (in the dashboard's private copy, cli/ui_server.py),
        # not beside this package, which an install puts in site-packages.
        app = Path(script).resolve().parents[1] / "app.py"
        st.switch_page(app, query_params={**st.query_params.to_dict(), "page": Path(script).stem})
    view: View = st.session_state[VIEW_KEY]
    return view


def page_header(title: str, view: View | None) -> None:
    """The page's heading: its title and the run's name, shown as typed (never as Markdown).

    A page of several runs (Compare) passes None: the sidebar's run may not be among them.
    """
    st.header(f"{title} · {md_escape(view.run)}" if view is not None else title)


#: Session key set once a page that draws charts asked the browser for plotly.js.
CHARTS_ASKED_KEY = "dsmon_charts_asked"


def _empty_chart() -> dict[str, Any]:
    """A chart 10 px high with nothing on it (a new dict: Streamlit may keep what it sends)."""
    hidden = {"visible": False}
    margin = {"l": 0, "r": 0, "t": 0, "b": 0}
    return {
        "data": [],
        "layout": {"height": 10, "margin": margin, "xaxis": hidden, "yaxis": hidden},
    }


def ask_for_charts() -> DeltaGenerator | None:
    """In a session's first run of a page that draws charts: have the browser load plotly.js now.

    Streamlit's browser side loads plotly.js, a 4.7 MB module that a new tab compiles in
    about 0.75 s here, when the first chart element arrives: after the page has judged the
    run and built its figures. An empty chart sent before that work makes the load overlap
    it. In a new tab, with 100,000 steps, this brought the first chart 200 ms sooner on the
    Steps page and 330 ms on Communication (``bench/README.md``). Once a tab has the module
    nothing is sent. Returns the chart's slot, to empty once the page is drawn (None: nothing
    sent).
    """
    if st.session_state.get(CHARTS_ASKED_KEY):
        return None
    st.session_state[CHARTS_ASKED_KEY] = True
    slot = st.empty()
    slot.plotly_chart(Sent(_empty_chart()), key="dsmon.ask", theme=None)
    return slot


def live_body(view: View, render: Callable[[], None], charts: bool = False) -> None:
    """Run ``render`` in a fragment that refreshes the run's frames and redraws when live.

    ``charts``: the page draws charts (:func:`ask_for_charts`).

    Replay (or a finished run) renders once: no timer, nothing to fetch. The frame around
    the body (sidebar, refresh timer) is drawn by ``app.py`` on a full rerun only, so a page
    asks for one when the run changed under it: the live body when the run stopped (or went
    on), a finished run's look for new records (:func:`look_for_records`) when it went on.
    """

    @functools.wraps(render)
    def tick() -> None:
        if view.live:
            view.frames.refresh()
        info, now = view.frames.info(), datetime.now()
        caption = st.empty()  # the status line, above the body, once the state is known
        early_chart = ask_for_charts() if charts else None
        # Shown only if judging and drawing take over half a second (Streamlit's own delay):
        # a long run's first look reads it whole to judge its state, then draws from that.
        with st.spinner(md_escape(reading_line(view.run, info)), show_time=True):
            state = None if info is None else run_state(view.frames, view.run, view.cutoff, now)
            live = shown_live(info, state, now)
            if view.live and info is not None and live != view.run_live:
                asked = (view.run, live, info.last_id)
                if st.session_state.get(RERUN_KEY) != asked:  # once: the frame draws it anew
                    st.session_state[RERUN_KEY] = asked
                    st.rerun()
            caption.caption(md_escape(status_line(info, state)))  # it quotes the run's errors
            try:
                render()
            finally:
                if early_chart is not None:
                    early_chart.empty()

    st.fragment(run_every=view.refresh_s if view.live else None)(tick)()
    if view.look_s is not None:
        look_for_records(view, view.look_s)


def live_store_part(view: View, every_s: float, render: Callable[[], None]) -> None:
    """Run ``render`` in a fragment of its own, redrawn every ``every_s`` seconds while live.

    For a small part that reads the store itself at every redraw (the GPUs page's tiles of the
    newest samples): it needs no refresh of the run's frames, and shows what was stored
    within ``every_s`` while the page's body (:func:`live_body`) redraws at its own pace.
    A finished run or a replay draws it once.
    """
    st.fragment(run_every=every_s if view.live else None)(render)()


def runs_refresh_s(view: View, infos: Sequence[RunInfo | None]) -> float | None:
    """How often a page of several runs redraws: while the sidebar's is live, or one of its own.

    The sidebar's live toggle follows the sidebar's run; a compared run being written to
    redraws the page too (every :data:`LOOK_S` seconds), unless the user switched live
    refresh off on a live run.
    """
    if view.live:
        return view.refresh_s
    if view.run_live:  # the toggle was turned off by hand
        return None
    now = datetime.now()
    return LOOK_S if any(i is not None and run_is_live(i, now) for i in infos) else None


def runs_body(view: View, runs: Sequence[str], render: Callable[[], None]) -> None:
    """:func:`live_body` for a page of several runs: a status line per run, each refreshed."""
    assert view.hub is not None, "app.py hands every page the store's runs"
    hub = view.hub
    every = runs_refresh_s(view, [hub.run(n).info() for n in runs])

    def tick() -> None:
        now = datetime.now()
        for name in runs:
            frames = hub.run(name)
            if every is not None:
                frames.refresh()
            info = frames.info()
            state = run_state(frames, name, OPEN, now) if info is not None else None
            st.caption(f"{md_escape(name)}: {md_escape(status_line(info, state))}")
        render()

    st.fragment(run_every=every)(tick)()


def look_for_records(view: View, every_s: float) -> None:
    """Rerun the app once the finished run shown gets records again.

    It resumed (DeepSpeed restarted from a checkpoint, a collector reconnected) or more of its
    log was imported: the rerun draws it live again, or with what was added. Each look is one
    indexed read of the run's newest record id, never of its records.
    """
    store, run, seen = view.frames.store, view.run, view.seen_id
    rerun_when(lambda: store.last_id(run) > seen, every_s)


def rerun_when(changed: Callable[[], bool], every_s: float) -> None:
    """Ask ``changed()`` every ``every_s`` seconds and rerun the whole app when it says so.

    The first call runs inside the app's full run, which has just drawn what is there: it
    asks nothing, so records still being written cannot rerun the app back to back; they
    rerun it at most once per ``every_s``.
    """
    timed = False

    @st.fragment(run_every=every_s)
    def look() -> None:
        nonlocal timed
        if timed and changed():
            st.rerun()
        timed = True

    look()
