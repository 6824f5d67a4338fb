"""Charts drawn under a stable key, so a live redraw replaces each one with its new data.

A live page redraws every second or two. Plotly keeps the user's zoom, pan and hidden traces
across a redraw only when the chart element is updated in place with an unchanged
``layout.uirevision``. Streamlit 1.67 gives a chart a new element id whenever its figure
changes, and its Plotly element draws the figure of the id it was built with: an earlier
version of this module made the id depend on the key alone to keep the zoom, and the charts in
the browser then kept their first figure while the page's numbers moved on
(``tests/system/test_browser_resume.py`` shows it). New data matters more than a kept zoom in a live
monitor, so charts are drawn the standard way; the ``uirevision`` is still set, for a
Streamlit that updates keyed charts in place.
"""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
import streamlit as st

#: Chart keys drawn by :func:`chart` start with this.
KEY_PREFIX = "dsmon."


def chart(fig: go.Figure, key: str, where: Any = st) -> None:
    """Draw ``fig`` under a key that stays the same at every refresh.

    Args:
        fig: the figure (from ``dsmon.figures``).
        key: unique on the page and the same at every refresh (e.g. ``"steps.micro"``).
        where: a container or column to draw in (default: the page).
    """
    full = KEY_PREFIX + key
    fig.update_layout(uirevision=full)
    where.plotly_chart(fig, key=full)
