"""Per-step analyses that a live refresh updates with the new steps only.

The step breakdown, the micro-step breakdown and the ZeRO-3 coordinator times are
*step-local*: the result rows of a step depend only on the timer rows of that step. A refresh
that brings ten new steps to a run of a million therefore needs to compute ten steps, not a
million. :class:`StepFold` keeps the result of the steps it considers finished and the raw
rows of the last :data:`LATE_STEPS` steps (ranks' lines interleave, so a step's lines from
one rank may arrive after a later step's from another), and computes only those again.

It never guesses: a row of a step it already finished, or a row without a step (a live run
before the step clock resolved), sends it back to computing everything, which is what the
dashboard did before; the answer is the same either way (``tests/unit/view/test_view_fold.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Generic, TypeVar

import pandas as pd

from dsmon.model.joined import concat
from dsmon.view.chunks import Chunks
from dsmon.view.rowbuffer import RowBuffer

#: Steps behind the newest one whose rows may still come (computed again on each update).
LATE_STEPS = 16

StepFn = Callable[[pd.DataFrame], pd.DataFrame]
T = TypeVar("T")


class StepFold:
    """``fn`` over a growing frame, done on new steps only; see the module docstring.

    Args:
        fn: a step-local function of the frame's rows returning a frame with a ``step``
            column, sorted by step (``dsmon.analysis.steps.step_breakdown`` and the like).
    """

    def __init__(self, fn: StepFn) -> None:
        self.fn = fn
        self._generation = -1
        self._seen = 0
        self._done = pd.DataFrame()  # results of the steps before ``_boundary``
        self._open = pd.DataFrame()  # raw rows of the steps from ``_boundary`` on
        self._boundary = -math.inf
        self._incremental = False
        self._result: pd.DataFrame | None = None
        # the result's rows, when its columns allow: ``_done`` is then its first rows
        self._buffer: RowBuffer | None = None
        self._pending = False  # rows taken in (:meth:`take_in`) and not in ``_result`` yet
        #: Counts the times the result was built anew; within one epoch the first
        #: :attr:`stable` rows of every result are the same rows (``dsmon.view.quantiles``).
        self.epoch = 0

    def update(self, chunks: Chunks) -> pd.DataFrame:
        """The result over every row of ``chunks`` now."""
        if self._result is not None and chunks.generation == self._generation:
            if chunks.rows == self._seen:
                if self._pending:  # the open steps of what was taken in
                    self._result = self._extend(self._open.iloc[:0])
                return self._result
            new = chunks.since(self._seen)
            self._seen = chunks.rows
            if self._incremental and _steps_from(new, self._boundary):
                self._result = self._extend(new)
                return self._result
        return self._restart(chunks)

    @property
    def stable(self) -> int:
        """Rows at the head of the result that no later update changes (finished steps)."""
        return len(self._done) if self._incremental else 0

    def take_in(self, chunks: Chunks) -> None:
        """Take in the new rows of ``chunks``, leaving the open steps to the next :meth:`update`.

        A long run read page by page feeds each page here (``dsmon.view.cache``): the open
        steps computed after one page would be computed again after the next.
        """
        fresh = self._result is not None and chunks.generation == self._generation
        if fresh and self._incremental and chunks.rows > self._seen:
            new = chunks.since(self._seen)
            if _steps_from(new, self._boundary):
                self._seen = chunks.rows
                self._bank(new)
                return
        self.update(chunks)

    def _bank(self, new: pd.DataFrame) -> None:
        """``new`` rows added to the open ones, the steps that finished computed and kept."""
        closed: list[pd.DataFrame] = []
        self._open, self._boundary = self._close(concat([self._open, new]), self._boundary, closed)
        self._pending = True
        buffer = self._buffer
        if buffer is not None and all(buffer.fits(p) for p in closed):
            for part in closed:
                buffer.write(buffer.rows, part)
            self._done = buffer.frame(buffer.rows)
        elif closed:
            done = concat([self._done, *closed])
            if buffer is not None:  # the columns changed (a timer first seen): hold anew
                self._keep(done, len(done))
            else:
                self._done = done

    def consumed(self, chunks: Chunks) -> int:
        """Rows of ``chunks`` this fold has taken in and will not need again (0: it may).

        A fold that is not incremental reads every row on each update, so it needs them all.
        """
        current = self._result is not None and chunks.generation == self._generation
        return self._seen if current and self._incremental else 0

    def _restart(self, chunks: Chunks) -> pd.DataFrame:
        """Everything computed again, part by part as the rows arrived, never joined whole.

        A run's rows are loaded in pages (``Store.frames.pages``): folding them page by page
        keeps a million steps' timer rows from being copied into one frame.
        """
        self._generation, self._seen = chunks.generation, chunks.rows
        self._pending, self._incremental = False, False
        self.epoch += 1
        done: list[pd.DataFrame] = []
        rows, boundary = pd.DataFrame(), -math.inf
        for part in chunks.iter_parts():
            if not _steps_from(part, boundary):
                return self._whole(chunks)
            rows, boundary = self._close(concat([rows, part]), boundary, done)
        if rows.empty:
            return self._whole(chunks)
        result = concat([*done, self.fn(rows)])
        if "step" not in result.columns:
            return self._whole(chunks)
        self._incremental, self._boundary, self._open = True, boundary, rows
        self._keep(result, sum(len(d) for d in done))
        return result

    def _whole(self, chunks: Chunks) -> pd.DataFrame:
        """Everything computed from all rows at once, and the state to go on from."""
        whole = chunks.whole()
        self._pending = False
        self.epoch += 1
        result = self.fn(whole)
        self._incremental = _steps_from(whole, -math.inf) and "step" in result.columns
        self._result = result
        if self._incremental:
            self._boundary = float(whole["step"].max()) - LATE_STEPS
            self._open = whole[whole["step"] >= self._boundary]
            # the result is in step order: the finished steps are its first rows
            self._keep(result, int((result["step"] < self._boundary).sum()))
        return result

    def _keep(self, result: pd.DataFrame, done: int) -> None:
        """Hold ``result``, whose first ``done`` rows are finished steps, to extend it later.

        A copy either way, not a slice: joining a slice of this result on the first refresh
        cost as much again as the refresh (measured at a million steps).
        """
        self._result = result
        self.epoch += 1  # (new columns: a timer first seen changes what the old rows hold)
        self._buffer = RowBuffer.of(result)
        if self._buffer is None:
            self._done = result.iloc[:done].copy()
        else:
            self._buffer.rows = done
            self._done = self._buffer.frame(done)

    def _extend(self, new: pd.DataFrame) -> pd.DataFrame:
        """The result after ``new`` rows, all of steps not yet finished."""
        self._pending = False
        closed: list[pd.DataFrame] = []
        self._open, self._boundary = self._close(concat([self._open, new]), self._boundary, closed)
        tail = self.fn(self._open)
        buffer = self._buffer
        if buffer is not None and all(buffer.fits(p) for p in [*closed, tail]):
            # written after the finished rows: nothing before them is copied
            for part in closed:
                buffer.write(buffer.rows, part)
            done = buffer.rows
            buffer.write(done, tail)
            buffer.rows = done  # the open steps' rows are written over on the next refresh
            self._done, self._result = buffer.frame(done), buffer.frame(done + len(tail))
            return self._result
        result = concat([self._done, *closed, tail])
        done = len(self._done) + sum(len(p) for p in closed)
        if self._buffer is not None:  # the columns changed (a timer first seen): hold anew
            self._keep(result, done)
        else:  # the finished steps' results are the head of the result: a slice, not a copy
            self._done, self._result = result.iloc[:done], result
        return result

    def _close(
        self, rows: pd.DataFrame, boundary: float, done: list[pd.DataFrame]
    ) -> tuple[pd.DataFrame, float]:
        """Finish the steps :data:`LATE_STEPS` behind the newest: their result goes to ``done``.

        Returns the rows still open and the new boundary (never lower than ``boundary``).
        """
        boundary = max(boundary, float(rows["step"].max()) - LATE_STEPS)
        closing = (rows["step"] < boundary).to_numpy(dtype=bool, na_value=False)
        n = int(closing.sum())
        if n == 0:
            return rows, boundary
        if closing[:n].all():  # lines in step order, as a log mostly is: a slice, not a take
            done.append(self.fn(rows.iloc[:n]))
            # the open rows copied: a slice would keep the whole page they came in alive
            return rows.iloc[n:].copy(), boundary
        done.append(self.fn(rows[closing]))
        return rows[~closing], boundary


def _steps_from(rows: pd.DataFrame, boundary: float) -> bool:
    """Whether every row has a step, none of them before ``boundary``."""
    if rows.empty or "step" not in rows.columns:
        return False
    step = rows["step"]
    return bool(step.notna().all()) and float(step.min()) >= boundary


class FinishedRows(Generic[T]):
    """What a fold's finished rows give, kept as they finish (subclasses say what and how).

    Each :meth:`over` takes in the rows that finished since the last one and answers with
    them and the open rows; when the fold's epoch moved, its finished rows may differ from
    those taken in, and everything is taken in again.
    """

    def __init__(self) -> None:
        self._epoch = -1
        self._taken = 0  # rows of the result taken in

    def over(self, result: pd.DataFrame, epoch: int, stable: int) -> T:
        """The answer over every row of ``result``, whose first ``stable`` rows are finished.

        ``epoch`` and ``stable`` are the fold's (:attr:`StepFold.epoch`, :attr:`StepFold.stable`).
        """
        if epoch != self._epoch or stable < self._taken:
            self._epoch, self._taken = epoch, 0
            self._reset()
        if stable > self._taken:
            self._take(result.iloc[self._taken : stable], self._taken)
            self._taken = stable
        return self._answer(result.iloc[stable:], stable)

    def _reset(self) -> None:
        """Forget what was taken in."""
        raise NotImplementedError

    def _take(self, rows: pd.DataFrame, offset: int) -> None:
        """Take in finished ``rows``, which start at position ``offset`` of the result."""
        raise NotImplementedError

    def _answer(self, rows: pd.DataFrame, offset: int) -> T:
        """The answer with the open ``rows`` (from position ``offset``) added."""
        raise NotImplementedError
