"""The records one write added, as the summary tables take them in: in hand, or read back.

The per-rank, timer and skipped-step tables (:mod:`dsmon.store.ranks`,
:mod:`dsmon.store.timers`, :mod:`dsmon.store.skips`) each take a write's new records of their
kinds. Reading them back from ``records`` by the write's id range (a scan of the batch's rows
per table, and every body fetched again) cost the ingest server more than a tenth of its
work a record. When every row of a batch was new and the engine numbered them in row order
(:class:`~dsmon.store.records.rows.Inserted`), the rows and their ids are in hand: a part
takes them from here, and reads them back only otherwise.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from dsmon.store.records.rows import Row


@dataclasses.dataclass(frozen=True, slots=True)
class Added:
    """What one write added to ``records``.

    ``after_id``: every added row has a higher id (the newest before the write).
    ``kinds``: the kinds of the batch's rows (a part with none of its kinds does nothing).
    ``rows``: the batch, every row of it new, row ``i`` under id ``first_id + i``; None when
    some row was stored before or the ids are not known in order (then read them back).
    ``decoded``: lines of ``rows`` decoded already, by index, that a part may read instead of
    decoding their bodies again.
    """

    after_id: int
    kinds: Collection[str]
    rows: Sequence[Row] | None = None
    first_id: int = 0
    #: Lines of ``rows`` decoded already, by index (the ingest server's timer, rank step and
    #: step lines).
    decoded: Mapping[int, Any] = dataclasses.field(default_factory=dict)

    #: The indexes of ``rows`` by kind, made by the first :meth:`of_kind` (one pass for all
    #: the parts that ask, in compiled code but for the grouping).
    _by_kind: dict[str, list[int]] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )

    def of_kind(self, kind: str) -> list[tuple[int, Row]] | None:
        """``(id, row)`` of the added rows of ``kind``, in id order; None: read them back."""
        rows = self.rows
        if rows is None:
            return None
        by_kind = self._by_kind
        if not by_kind and rows:
            for i, row_kind in enumerate(map(_KIND, rows)):
                found = by_kind.get(row_kind)
                if found is None:
                    by_kind[row_kind] = [i]
                else:
                    found.append(i)
        first = self.first_id
        return [(first + i, rows[i]) for i in by_kind.get(kind, ())]


_KIND = operator.itemgetter(2)  # a row's kind (RecordRow's order)
