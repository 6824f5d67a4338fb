"""A frame kept as the pieces it arrived in, joined only when someone asks for all of it.

A live refresh appends a few rows to frames of millions. ``pd.concat`` of the whole frame on
every refresh made the refresh cost grow with the run (0.7 s a refresh at a million steps,
for rows nobody had asked for yet). Here an append costs the new rows only; the whole frame
is joined on the first read after it grew, and readers that only need what is new
(:mod:`dsmon.view.fold`) never join it.
"""

from __future__ import annotations

from typing import Any

import pandas as pd


class Chunks:
    """Rows of one kind in arrival order: ``parts`` joined lazily into :meth:`whole`.

    ``generation`` changes when the rows are replaced (:meth:`reset`), so a reader that
    remembered a row count knows it must start again.
    """

    def __init__(self) -> None:
        self.parts: list[pd.DataFrame] = []
        self.rows = 0
        self.generation = 0

    def append(self, new: pd.DataFrame) -> None:
        """Add rows at the end (an empty frame adds nothing)."""
        if new.empty:
            return
        self.parts.append(new.reset_index(drop=True))
        self.rows += len(new)

    def reset(self) -> None:
        """Forget every row (the store restamped them: they are read again whole)."""
        self.parts = []
        self.rows = 0
        self.generation += 1

    def whole(self) -> pd.DataFrame:
        """Every row, one frame; the parts are replaced by it, so the join is paid once."""
        if not self.parts:
            return pd.DataFrame()
        if len(self.parts) > 1:
            self.parts = [concat(self.parts)]
        return self.parts[0]

    def since(self, seen: int) -> pd.DataFrame:
        """Rows after the first ``seen`` (what a reader that saw ``seen`` rows has not)."""
        if seen >= self.rows:
            return pd.DataFrame()
        tail: list[pd.DataFrame] = []
        start = self.rows
        for part in reversed(self.parts):
            if start <= seen:
                break
            start -= len(part)
            tail.append(part.iloc[max(seen - start, 0) :])
        tail.reverse()
        return tail[0] if len(tail) == 1 else concat(tail)


def concat(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """``parts`` one after the other; a categorical column stays categorical.

    ``pd.concat`` turns a categorical column into ``object`` unless every part has the same
    categories, which parts read at different times rarely have: the categories are united
    first.
    """
    parts = [p for p in parts if not p.empty] or parts[:1]
    if not parts:
        return pd.DataFrame()
    if len(parts) == 1:
        return parts[0].reset_index(drop=True)
    cat_cols = {c for p in parts for c in p.columns if isinstance(p[c].dtype, pd.CategoricalDtype)}
    unions = {col: _categories(parts, col) for col in cat_cols}
    if unions:
        parts = [_recategorised(p, unions) for p in parts]
    return pd.concat(parts, ignore_index=True)


def _categories(parts: list[pd.DataFrame], col: str) -> pd.Index:
    """Every value ``col`` takes in ``parts``: categorical or not, none may become NaN."""
    union = pd.Index([])
    for part in parts:
        if col not in part.columns:
            continue
        values = part[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            cats = values.cat.categories
        else:
            cats = pd.Index(values.astype(object).dropna().unique())
        union = cats if union.empty else union.union(cats)
    return union


def _recategorised(part: pd.DataFrame, unions: dict[str, pd.Index]) -> pd.DataFrame:
    """``part`` with each column of ``unions`` categorical over the united categories."""
    changed: dict[str, Any] = {}
    for col, cats in unions.items():
        if col not in part.columns:
            continue
        values = part[col]
        if isinstance(values.dtype, pd.CategoricalDtype):
            if not values.cat.categories.equals(cats):
                changed[col] = values.cat.set_categories(cats)
        else:
            changed[col] = pd.Categorical(values.astype(object), categories=cats)
    return part.assign(**changed) if changed else part
