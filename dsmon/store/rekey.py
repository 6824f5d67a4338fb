"""Re-keying a store of schema version 1, whose keys were one digest of a record's identity.

Version 2 keys sort by source and place (:func:`dsmon.store.keys.identity_digest`), so that
inserts land next to each other in the UNIQUE index. A version 1 store reads the same under
either key; but a writer adding records under new keys beside the old ones would store twice
every record that a collector sends again (after a restart, from its spool) and that was first
stored under its old key. So the first writer re-keys every row from its stored body, in its
write transaction and before its own rows, and then marks the store version 2. Readers never
do it: it takes the write lock, for about 25 s per million records.
"""

from __future__ import annotations

import logging
from typing import Any

from dsmon.model.wire import WireError
from dsmon.store.base import row_record
from dsmon.store.gpu_tables import GpuTables
from dsmon.store.keys import key_digest

log = logging.getLogger(__name__)

#: Rows re-keyed per step: memory stays flat on a store of millions.
REKEY_CHUNK = 20_000
#: A line on stderr each time this many more rows are re-keyed: a big store takes minutes.
PROGRESS_ROWS = 1_000_000
_NEXT_ROWS = "SELECT id, body FROM records WHERE id > ? ORDER BY id LIMIT ?"
_SET_KEY = "UPDATE records SET key = ? WHERE id = ?"


def rekey(tables: GpuTables) -> int:
    """Give every row of the records table its version 2 key; returns how many were re-keyed.

    ``tables`` is any connection seen through its dialect (the GPU tables' wrapper, whose
    ``rows`` and ``execute_many`` take ``?`` placeholders on either backend). A body that
    no longer decodes keeps its old key: only a copy of that one record sent again could be
    stored twice.
    """
    (count,) = tables.rows("SELECT COUNT(*) FROM records")[0]
    if count:
        log.warning(
            "dsmon: re-keying the %d records of a store written by an older dsmon "
            "(once; about 25 s per million records)",
            count,
        )
    total, after, kept, told = 0, 0, 0, 0
    while found := tables.rows(_NEXT_ROWS, (after, REKEY_CHUNK)):
        keys = _new_keys(found)
        tables.execute_many(_SET_KEY, keys)
        total += len(keys)
        kept += len(found) - len(keys)
        after = found[-1][0]
        if total + kept - told >= PROGRESS_ROWS:
            told = total + kept
            log.warning("dsmon: re-keyed %d of %d records", told, count)
    if total or kept:
        log.info("re-keyed %d records of a store written by an older dsmon", total)
    if kept:
        log.warning("kept the old key of %d records whose stored body does not decode", kept)
    return total


def _new_keys(found: list[Any]) -> list[tuple[bytes, int]]:
    """(new key, id) of each row whose body decodes."""
    out: list[tuple[bytes, int]] = []
    for rec_id, body in found:
        try:
            rec = row_record(body.decode() if isinstance(body, bytes) else body)
        except (WireError, ValueError, TypeError):
            continue
        out.append((key_digest(rec), rec_id))
    return out
