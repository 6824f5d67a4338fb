"""A frame kept as the pieces it arrived in, joined only when someone asks for all of it.

A live refresh appends a few rows to frames of millions. ``pd.concat`` of the whole frame on
every refresh made the refresh cost grow with the run (0.7 s a refresh at a million steps,
for rows nobody had asked for yet). Here an append costs the new rows only; the whole frame
is joined on the first read after it grew, and readers that only need what is new
(:mod:`dsmon.view.fold`) never join it.

A long run's timer and step rows are read by the folds alone, which keep their own results.
Holding the raw rows as well cost a dashboard about a gigabyte at a million steps, for rows
no page read again. So the leading pieces every fold has taken in can be let go
(:meth:`Chunks.spill`): they stay in the store, and a reader that does want them (replay, a
fold first asked for later) gets them read again from there, a page at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pandas as pd

from dsmon.model.joined import concat

#: A live refresh appends a part of a few rows; when this many small parts end the list,
#: they are joined into one. Ten thousand refreshes left ten thousand frames, which each of
#: Python's full garbage collections walks (with the memo's objects, 24 -> 112 ms of a
#: refresh in 300 refreshes of a 100k-step run).
JOIN_PARTS = 32
#: Parts of fewer rows count as small (a store page holds 50,000): joined ones grow up to it.
SMALL_ROWS = 4096

#: Reads the rows of a kind again from the store, a page at a time: every row with
#: ``id <= last_id``, in id order, as :meth:`Chunks.append` was given them.
Reread = Callable[[int], Iterator[pd.DataFrame]]


class Chunks:
    """Rows of one kind in arrival order: ``parts`` joined lazily into :meth:`whole`.

    ``generation`` changes when the rows are replaced (:meth:`reset`), so a reader that
    remembered a row count knows it must start again. With ``reread``, the leading rows may be
    let go (:meth:`spill`) and read again when asked; :attr:`parts` are then the rows held,
    :meth:`iter_parts` all of them.
    """

    def __init__(self, reread: Reread | None = None) -> None:
        self.parts: list[pd.DataFrame] = []
        self.rows = 0
        self.generation = 0
        self._reread = reread
        self.spilled_rows = 0  # the leading rows not held (read again from the store)
        self._spilled_last_id = 0  # the id of the last of them
        self.held_whole = False  # asked for whole (or to be): every row held from then on

    def append(self, new: pd.DataFrame) -> None:
        """Add rows at the end (an empty frame adds nothing)."""
        if new.empty:
            return
        self.parts.append(new.reset_index(drop=True))
        self.rows += len(new)
        self._join_small_tail()

    def _join_small_tail(self) -> None:
        """Join the small parts at the end into one once there are :data:`JOIN_PARTS`."""
        small = 0
        for part in reversed(self.parts):
            if len(part) >= SMALL_ROWS or small == JOIN_PARTS:
                break
            small += 1
        if small == JOIN_PARTS:
            self.parts[-small:] = [concat(self.parts[-small:])]

    def reset(self) -> None:
        """Forget every row (the store restamped them: they are read again whole).

        Rows held because :meth:`whole` was asked for may be let go again: whoever asked will
        ask again for the rows as they are now.
        """
        self.parts = []
        self.rows = 0
        self.spilled_rows = self._spilled_last_id = 0
        self.held_whole = False
        self.generation += 1

    def spill(self, consumed: int) -> int:
        """Let go of the leading whole parts within the first ``consumed`` rows; rows let go.

        Nothing is let go without a way to read it again, once :meth:`whole` was asked for
        (replay, a page that reads the raw rows: they would be read again on every refresh),
        or past a part without ids.
        """
        if self._reread is None or self.held_whole:
            return 0
        gone = 0
        while self.parts and self.spilled_rows + len(self.parts[0]) <= consumed:
            first = self.parts[0]
            if "id" not in first.columns:
                break
            self._spilled_last_id = int(first["id"].iloc[-1])
            self.spilled_rows += len(first)
            gone += len(first)
            self.parts.pop(0)
        return gone

    def hold_whole(self) -> None:
        """Hold every row from now on: a reader will ask for :meth:`whole` (replay)."""
        self.held_whole = self._reread is not None

    def iter_parts(self) -> Iterator[pd.DataFrame]:
        """Every row, part by part: the ones let go read again, one page in memory at a time."""
        if self.spilled_rows and self._reread is not None:
            yield from self._reread(self._spilled_last_id)
        yield from list(self.parts)

    def whole(self) -> pd.DataFrame:
        """Every row, one frame; the parts are replaced by it, so the join is paid once.

        Rows let go are read again, and the whole is held from then on (see :meth:`spill`);
        not when there is no row yet (a live run before its first timer line).
        """
        if self.spilled_rows:
            self.parts = list(self.iter_parts())
            self.spilled_rows = self._spilled_last_id = 0
        self.held_whole = self._reread is not None and self.rows > 0
        if not self.parts:
            return pd.DataFrame()
        if len(self.parts) > 1:
            self.parts = [concat(self.parts)]
        return self.parts[0]

    def since(self, seen: int) -> pd.DataFrame:
        """Rows after the first ``seen`` (what a reader that saw ``seen`` rows has not)."""
        if seen >= self.rows:
            return pd.DataFrame()
        if seen < self.spilled_rows:  # rows let go: read again, not held
            return concat(list(self.iter_parts())).iloc[seen:]
        tail: list[pd.DataFrame] = []
        start = self.rows
        for part in reversed(self.parts):
            if start <= seen:
                break
            start -= len(part)
            tail.append(part.iloc[max(seen - start, 0) :])
        tail.reverse()
        return tail[0] if len(tail) == 1 else concat(tail)
