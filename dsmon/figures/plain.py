"""Figures built as plain dicts and made a plotly ``Figure`` once, not grown call by call.

plotly's object model checks every property at every call: ``make_subplots``, ``add_trace``
and ``update_layout`` took 45-140 ms of the Steps chart's build, on the server, before the
page's first chart could leave it; a ``Figure`` made once from the same dict takes 20-35 ms
(``bench/browser_pages.py`` times the chart from the click). Streamlit checks a figure once
more whatever it is given (a dict is made a ``Figure``), so the pages still get a ``Figure``.

:func:`rows` lays out what ``make_subplots(rows=n, cols=1, shared_xaxes=True)`` does, with
the same axis names, so a figure built here reads like one built there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Where make_subplots ends the x axis of a column with a right-hand y axis (room for it).
RIGHT_AXIS_END = 0.94


def axis_key(ref: str) -> str:
    """The layout key of an axis a trace names: ``"y2"`` -> ``"yaxis2"``, ``"x"`` -> ``"xaxis"``."""
    return f"{ref[0]}axis{ref[1:]}"


@dataclass(frozen=True)
class Rows:
    """Axes of one column of rows on one x axis.

    ``layout``: the axes' layout entries, keyed as plotly names them; ``x``, ``y``: each row's
    axes as a trace names them (row 1 first, at the top); ``right``: the right-hand y axis of
    the rows that have one (by row number, from 1).
    """

    layout: dict[str, dict[str, Any]]
    x: list[str]
    y: list[str]
    right: dict[int, str]

    def axis(self, ref: str) -> dict[str, Any]:
        """The layout entry of axis ``ref`` (``"y2"``), to set its title, range or type."""
        return self.layout[axis_key(ref)]

    def titles(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Each row's title above it, as make_subplots' ``subplot_titles`` puts them."""
        return [
            {
                "text": text, "x": 0.5, "y": self.axis(y)["domain"][1], "xref": "paper",
                "yref": "paper", "xanchor": "center", "yanchor": "bottom", "showarrow": False,
                "font": {"size": 16},
            }
            for text, y in zip(texts, self.y, strict=False)
        ]  # fmt: skip

    def on(self, trace: dict[str, Any], row: int, right: bool = False) -> dict[str, Any]:
        """``trace`` drawn on row ``row`` (from 1), on its right-hand axis if ``right``."""
        y = self.right[row] if right else self.y[row - 1]
        return {**trace, "xaxis": self.x[row - 1], "yaxis": y}


def rows(heights: Sequence[float], spacing: float, right: Sequence[int] = ()) -> Rows:
    """Rows of the given relative heights, top to bottom, ``spacing`` apart (paper fraction).

    Every row's x axis matches the bottom one, which alone shows its tick labels; rows in
    ``right`` (from 1) get a right-hand y axis numbered after their own, as make_subplots
    numbers a ``secondary_y``.
    """
    n = len(heights)
    room = 1.0 - spacing * (n - 1)
    total = float(sum(heights))
    x_end = RIGHT_AXIS_END if right else 1.0
    layout: dict[str, dict[str, Any]] = {}
    xs: list[str] = []
    ys: list[str] = []
    rights: dict[int, str] = {}
    top, y_count = 1.0, 0
    for row, height in enumerate(heights, start=1):
        x = "x" if row == 1 else f"x{row}"
        y_count += 1
        y = "y" if y_count == 1 else f"y{y_count}"
        bottom = max(top - height / total * room, 0.0)
        x_axis: dict[str, Any] = {"anchor": y, "domain": [0.0, x_end]}
        if row < n:
            x_axis.update(matches=f"x{n}", showticklabels=False)
        layout[axis_key(x)] = x_axis
        layout[axis_key(y)] = {"anchor": x, "domain": [round(bottom, 12), round(top, 12)]}
        if row in right:
            y_count += 1
            rights[row] = f"y{y_count}"
            layout[axis_key(rights[row])] = {"anchor": x, "overlaying": y, "side": "right"}
        xs.append(x)
        ys.append(y)
        top = bottom - spacing
    return Rows(layout, xs, ys, rights)
