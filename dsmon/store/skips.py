"""The newest ``step=`` line's skipped-step count of each run, kept as step lines arrive.

DeepSpeed's ``skipped=`` is a running count since the start, so the run's figure is the one
of its newest step line: the health checklist's skipped-steps rule reads nothing else of a
run's step lines (:func:`dsmon.analysis.steps.skipped_counts`'s last row). Reading a million
of them for it took a long run's first look seconds, growing with the run; so each write
keeps, per run, the step line with the highest step (and id, among lines of one step) that
has a skipped count, in the same transaction. A ``step=`` line names its own step, so no
restamp changes what is kept here.
"""

from __future__ import annotations

from typing import Any

import msgspec

from dsmon.store.backend import Backend, Db
from dsmon.store.dialect import Dialect
from dsmon.store.records.added import Added
from dsmon.store.records.rows import BODY_AT, RUN_AT, STEP_AT

#: The kind whose lines are kept here.
STEP_KIND = "step"


def ddl(d: Dialect) -> tuple[str, ...]:
    """The table (see docs/store.md)."""
    i, r, t = d.integer, d.real, d.text
    return (
        f"""CREATE TABLE IF NOT EXISTS step_skips (
            run {t} PRIMARY KEY, step {i} NOT NULL, id {i} NOT NULL, skipped {r} NOT NULL
        )""",
    )


def _new_lines(d: Dialect) -> str:
    """The step lines a write stored after id ``?`` with a step above 0: id, run, step, body."""
    return f"""
SELECT id, run, step, body FROM records{d.not_indexed}
WHERE id > ? AND kind = '{STEP_KIND}' AND step > 0 ORDER BY id
"""


#: A run's line, kept if it is later (by step, then id) than the one kept.
_UPSERT = """
INSERT INTO step_skips (run, step, id, skipped) VALUES (?, ?, ?, ?)
ON CONFLICT (run) DO UPDATE SET step = excluded.step, id = excluded.id, skipped = excluded.skipped
WHERE (excluded.step, excluded.id) > (step_skips.step, step_skips.id)
"""
_NEWEST = "SELECT step, skipped FROM step_skips WHERE run = ?"


class _Skipped(msgspec.Struct, gc=False):
    """What is read of a step line's body (other fields skipped)."""

    skipped: Any = None


_decode = msgspec.json.Decoder(_Skipped).decode
#: A body as stored (anything else is the line as the ingest server decoded it: its
#: ``skipped`` an integer or None, as the body's).
_STORED = (str, bytes, memoryview)


class StepSkips:
    """The table of a store: a write's share, and the rule's read."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend

    @staticmethod
    def update(db: Db, added: Added) -> None:
        """Keep the newest of the step lines a write ``added``."""
        if STEP_KIND not in added.kinds:
            return
        found = added.of_kind(STEP_KIND)
        if found is None:
            lines = db.rows(_new_lines(db.dialect), (added.after_id,))
        else:  # as _new_lines reads them; a line the server decoded, as it decoded it
            first, decoded = added.first_id, added.decoded
            lines = [
                (i, r[RUN_AT], r[STEP_AT], decoded.get(i - first, r[BODY_AT]))
                for i, r in found
                if r[STEP_AT] is not None and r[STEP_AT] > 0
            ]
        newest: dict[str, tuple[int, int, float]] = {}
        for rec_id, run, step, body in lines:
            if isinstance(body, _STORED):
                body = _decode(body if isinstance(body, bytes | str) else bytes(body))
            skipped = body.skipped
            if isinstance(skipped, bool) or not isinstance(skipped, int | float):
                continue
            if run not in newest or (step, rec_id) > newest[run][:2]:
                newest[run] = (int(step), int(rec_id), float(skipped))
        if newest:
            db.execute_many(_UPSERT, [(run, *kept) for run, kept in newest.items()])

    def newest(self, run: str) -> tuple[int, float] | None:
        """The newest step line's step and skipped count (None: the run has none)."""
        found = self._backend.read(lambda db: db.rows(_NEWEST, (run,)))
        return (int(found[0][0]), float(found[0][1])) if found else None
