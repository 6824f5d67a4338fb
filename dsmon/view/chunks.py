"""A frame kept as the pieces it arrived in, joined only when someone asks for all of it.

A live refresh appends a few rows to frames of millions. ``pd.concat`` of the whole frame on
every refresh made the refresh cost grow with the run (0.7 s a refresh at a million steps,
for rows nobody had asked for yet). Here an append costs the new rows only; the whole frame
is joined on the first read after it grew, and readers that only need what is new
(:mod:`dsmon.view.fold`) never join it.
"""

from __future__ import annotations

import pandas as pd

from dsmon.model.joined import concat


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
