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

**Drawn once.** Streamlit's Plotly element hands plotly.js each figure twice: as it mounts,
then right after, a copy of it (its theme applied again, every object and array new).
plotly.js's ``Plotly.react`` compares the copy with what it drew, and computes and draws the
whole chart again when it finds a new ``layout.template`` object (a template is compared by
identity), a data array that is a typed array (plotly.py sends numbers as base64 typed
arrays, and a new one is new data), or any new data array while the layout has no
``datarevision``. A chart therefore goes with no template and Streamlit's theme off (the look
of :mod:`ui.chart_look` written in its layout instead), its numbers as JSON arrays, and a
``datarevision`` that is its content's fingerprint (new data, new revision): the second
hand-over then draws nothing again. On a 3,000-step run this took plotly.js's own time on the
Steps page from 945 to 411 ms; on the benchmark's 100,000-step store the gain was within the
noise (``bench/README.md``, ``browser_pages``).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import streamlit as st

from ui.chart_look import apply_look

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
    spec = spec_of(fig)
    layout = spec["layout"]
    apply_look(layout)
    layout.pop("datarevision", None)
    layout["uirevision"] = full
    layout["datarevision"] = revision(spec)
    where.plotly_chart(Sent(spec), key=full, theme=None)


class Sent(go.Figure):
    """A figure sent as the dict it was given (already checked: a ``Figure``'s own dict).

    ``st.plotly_chart`` takes a ``Figure`` and sends its ``to_dict()``; made again from a
    dict of JSON arrays, a ``Figure`` would check every number one by one in Python and
    turn them back into numpy arrays. Streamlit only checks its type and asks for that dict,
    so none of plotly's figure is built (an empty one took 0.8 ms a chart): the dict is kept
    in the instance's namespace directly, past plotly's checked attributes.
    """

    def __init__(self, spec: dict[str, Any]) -> None:
        self.__dict__["_spec"] = spec

    def to_dict(self) -> dict[str, Any]:
        """The dict given."""
        return self._spec


def spec_of(fig: go.Figure) -> dict[str, Any]:
    """The figure's dict, as ``fig.to_dict()`` has it, with each numeric array a list.

    ``to_dict`` deep-copies the figure and writes every numeric numpy array as a base64 typed
    array, which plotly.js takes for new data whenever the figure is handed to it again (see
    the module's docstring), so each had to be decoded again: a tenth of the Steps page's
    script on the server. Read here from the figure's checked properties (plotly's
    ``_data`` and ``_layout``, which ``to_dict`` copies; ``tests/unit/app/test_charts.py``
    compares the two on real pages), copied as the dict is built, the figure left as it is.
    As in ``to_dict``, keys named in :data:`UNCONVERTED` keep their arrays (the JSON encoder
    writes those).
    """
    return {"data": [_plain(trace) for trace in fig._data], "layout": _plain(fig._layout)}


#: Keys whose arrays ``to_dict`` leaves as they are (plotly's ``is_skipped_key``).
UNCONVERTED = frozenset({"geojson", "layer", "layers", "range"})


def _plain(value: Any, key: str = "") -> Any:
    """``value`` copied, each numeric numpy array (not under :data:`UNCONVERTED`) a list."""
    if isinstance(value, dict):
        return {k: _plain(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf" and key not in UNCONVERTED:
        return value.tolist()
    return value


def revision(spec: dict[str, Any]) -> str:
    """A fingerprint of everything a figure's dict draws: equal figures, equal revisions."""
    text = pio.to_json(spec, validate=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()
