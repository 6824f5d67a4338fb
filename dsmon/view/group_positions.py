"""Where each trace's rows are in a fold's result, kept as steps finish instead of regrouped.

The Training page draws one trace per metric and source. A million steps' ``step=`` lines
are two million points (loss and learning rate), and grouping them afresh on each live
refresh (:func:`dsmon.analysis.groups.positions`: a code per row, a sort) was most of what
the page's refresh cost. A :class:`GroupPositions` keeps the positions of the fold's
finished rows (``StepFold.stable``) per group and adds each newly finished step's; a
refresh groups only the open steps' rows and joins them on.

Codes are a fold's categorical codes, the same in every part of one result, so this holds
only for key columns that are categorical; otherwise the caller groups as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from dsmon.analysis import groups
from dsmon.view.fold import FinishedRows


class _Grown:
    """Positions of one group, in an array with room to grow (doubled when full)."""

    def __init__(self) -> None:
        self.data = np.empty(1024, dtype=np.int64)
        self.n = 0

    def append(self, pos: np.ndarray) -> None:
        need = self.n + len(pos)
        if need > len(self.data):
            grown = np.empty(max(need, 2 * len(self.data)), dtype=np.int64)
            grown[: self.n] = self.data[: self.n]
            self.data = grown
        self.data[self.n : need] = pos
        self.n = need


class GroupPositions(FinishedRows[list[np.ndarray] | None]):
    """:func:`groups.positions` of a fold's result by ``cols``, kept as its steps finish."""

    def __init__(self, cols: Sequence[str]) -> None:
        super().__init__()
        self.cols = list(cols)
        self._cats: list[pd.Index] = []
        self._groups: dict[int, _Grown] = {}

    def over(self, result: pd.DataFrame, epoch: int, stable: int) -> list[np.ndarray] | None:
        """The positions of each group of ``result`` (None: a key column is not categorical).

        Codes are comparable between parts of the result only while the categories stay.
        """
        cats = _categories(result, self.cols)
        if cats is None:
            return None
        if not _same(cats, self._cats):
            self._cats, self._epoch = cats, -1  # (taken in again)
        return super().over(result, epoch, stable)

    def _reset(self) -> None:
        self._groups = {}

    def _take(self, rows: pd.DataFrame, offset: int) -> None:
        for code, pos in self._split(rows, offset):
            self._groups.setdefault(code, _Grown()).append(pos)

    def _answer(self, rows: pd.DataFrame, offset: int) -> list[np.ndarray] | None:
        tail = dict(self._split(rows, offset))
        out = []
        for code in sorted(set(self._groups) | set(tail)):
            kept = self._groups.get(code)
            head = kept.data[: kept.n] if kept is not None else np.empty(0, dtype=np.int64)
            out.append(np.concatenate([head, tail.get(code, np.empty(0, dtype=np.int64))]))
        return out

    def _split(self, rows: pd.DataFrame, offset: int) -> list[tuple[int, np.ndarray]]:
        """(code, positions in the result) of each group of ``rows``, which start at ``offset``."""
        if rows.empty:
            return []
        found, parts = groups.by_code(groups.codes(rows, self.cols))
        return [(int(code), pos + offset) for code, pos in zip(found, parts, strict=True)]


def _categories(frame: pd.DataFrame, cols: Sequence[str]) -> list[pd.Index] | None:
    """The categories of each key column; None when one is not categorical."""
    out = []
    for col in cols:
        dtype = frame[col].dtype if col in frame.columns else None
        if not isinstance(dtype, pd.CategoricalDtype):
            return None
        out.append(dtype.categories)
    return out


def _same(a: list[pd.Index], b: list[pd.Index]) -> bool:
    """Whether two lists of categories are equal, in order."""
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))
