"""Figures built as dicts: the rows are laid out as make_subplots lays them out."""

from __future__ import annotations

from typing import Any

import pytest
from plotly.subplots import make_subplots

from dsmon.figures import plain


def axes(layout: dict[str, Any]) -> dict[str, Any]:
    """The axis entries of a layout (its template and annotations left out)."""
    return {k: v for k, v in layout.items() if k.startswith(("xaxis", "yaxis"))}


def same(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    """The same axes with the same properties, domains equal to 1e-9."""
    assert ours.keys() == theirs.keys()
    for key, axis in ours.items():
        assert axis.keys() == theirs[key].keys(), key
        for prop, value in axis.items():
            if prop == "domain":
                assert value == pytest.approx(theirs[key][prop], abs=1e-9), key
            else:
                assert value == theirs[key][prop], (key, prop)


@pytest.mark.parametrize(
    ("heights", "right"),
    [([0.6, 0.25, 0.15], [2]), ([0.82, 0.18], []), ([1.0], [1]), ([1.0, 1.0, 1.0, 1.0], [])],
)
def test_rows_are_make_subplots_rows(heights: list[float], right: list[int]) -> None:
    specs = [[{"secondary_y": True}] if r in right else [{}] for r in range(1, len(heights) + 1)]
    theirs = make_subplots(
        rows=len(heights), cols=1, shared_xaxes=True, row_heights=heights,
        vertical_spacing=0.04, specs=specs,
    )  # fmt: skip
    grid = plain.rows(heights, spacing=0.04, right=right)
    same(grid.layout, axes(theirs.to_dict()["layout"]))
    # the axes a trace names on each row are those make_subplots gives it
    for row in range(1, len(heights) + 1):
        theirs.add_scatter(x=[1], y=[1], row=row, col=1)
        assert grid.on({}, row) == {"xaxis": grid.x[row - 1], "yaxis": grid.y[row - 1]}
        assert theirs.data[-1].xaxis == grid.x[row - 1] and theirs.data[-1].yaxis == grid.y[row - 1]
        if row in right:
            theirs.add_scatter(x=[1], y=[1], row=row, col=1, secondary_y=True)
            assert theirs.data[-1].yaxis == grid.on({}, row, right=True)["yaxis"]


def test_row_titles_sit_where_make_subplots_puts_them() -> None:
    theirs = make_subplots(
        rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.04, subplot_titles=["a", "b", "c"]
    )
    ours = plain.rows([1.0, 1.0, 1.0], spacing=0.04).titles(["a", "b", "c"])
    for mine, their in zip(ours, theirs.to_dict()["layout"]["annotations"], strict=True):
        assert mine == {**their, "y": pytest.approx(their["y"], abs=1e-9)}
