"""The frame every page runs in: its view of the run, and the live fragment around its body.

A page is a Streamlit script in ``pages/``. ``app.py`` runs first on every rerun (it owns the
navigation, the run picker and the replay controls) and leaves a :class:`dsmon.view.cache.View` in
the session; a page only renders it. Live, the page body is a fragment re-run every
``refresh_s`` seconds, and it must read the run's newest records first: that refresh is done
here for every page alike, so no page can forget it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import streamlit as st

from dsmon.view.cache import View, status_line
from ui.text import md_escape

#: Session key under which ``app.py`` leaves the view of the selected run.
VIEW_KEY = "dsmon_view"


def page_view(script: str) -> View:
    """The view ``app.py`` prepared; a page opened by URL before it ran sends the user there.

    Streamlit runs a ``pages/`` script directly when a new server's first request is that
    page's URL; ``app.py`` then runs first and comes back to the page (``?page=<name>``).
    """
    if VIEW_KEY not in st.session_state:
        # app.py sits above pages/ (in a checkout, or <prefix>/share/dsmon of an install),
        # not beside this package, which an install puts in site-packages.
        app = Path(script).resolve().parents[1] / "app.py"
        st.switch_page(app, query_params={**st.query_params.to_dict(), "page": Path(script).stem})
    view: View = st.session_state[VIEW_KEY]
    return view


def page_header(title: str, view: View) -> None:
    """The page's heading: its title and the run's name, shown as typed (never as Markdown)."""
    st.header(f"{title} · {md_escape(view.run)}")


def live_body(view: View, render: Callable[[], None]) -> None:
    """Run ``render`` in a fragment that refreshes the run's frames and redraws when live.

    Replay (or a finished run) renders once: no timer, nothing to fetch.
    """

    @functools.wraps(render)
    def tick() -> None:
        if view.live:
            view.frames.refresh()
        st.caption(status_line(view.frames.info(), datetime.now()))
        render()

    st.fragment(run_every=view.refresh_s if view.live else None)(tick)()
