"""Charts drawn so that a live refresh does not undo what the user did to them.

A live page redraws every second or two. Plotly keeps the user's zoom, pan and hidden traces
across a redraw when the figure's ``layout.uirevision`` stays the same *and* the chart element
is updated in place. Streamlit 1.67 derives a chart's element id from its whole spec even when
it has a ``key``, so every data update made a new element and the zoom was gone within
seconds. Until Streamlit gives keyed passive charts a key-based identity (its pull request
16052 does exactly that), :func:`chart` asks for one: charts drawn here carry a key starting
with :data:`KEY_PREFIX`, and for those alone the element id is computed from the key. A test
(``tests/test_app_live_redraw.py``) checks that the ids stay put as a run grows, so a
Streamlit release that changes this internal function fails there, not in users' browsers.
"""

from __future__ import annotations

import functools
from typing import Any

import plotly.graph_objects as go
import streamlit as st
import streamlit.elements.plotly_chart as _plotly_element

#: Chart keys drawn by :func:`chart` start with this; no other element is affected.
KEY_PREFIX = "dsmon."


def _key_identity_for_our_charts() -> None:
    """Make the element id of our keyed charts depend on the key only (idempotent)."""
    original = _plotly_element.compute_and_register_element_id
    if getattr(original, "_dsmon_keyed", False):
        return

    @functools.wraps(original)
    def keyed(element_type: str, *, user_key: str | None = None, **kwargs: Any) -> str:
        if element_type == "plotly_chart" and (user_key or "").startswith(KEY_PREFIX):
            kwargs["key_as_main_identity"] = True
        return str(original(element_type, user_key=user_key, **kwargs))

    keyed._dsmon_keyed = True  # type: ignore[attr-defined]
    _plotly_element.compute_and_register_element_id = keyed


_key_identity_for_our_charts()


def chart(fig: go.Figure, key: str, where: Any = st) -> None:
    """Draw ``fig`` so that zoom, pan and legend choices survive live redraws.

    Args:
        fig: the figure (from ``dsmon.figures``).
        key: unique on the page and the same at every refresh (e.g. ``"steps.micro"``).
        where: a container or column to draw in (default: the page).
    """
    full = KEY_PREFIX + key
    fig.update_layout(uirevision=full)
    where.plotly_chart(fig, key=full)
