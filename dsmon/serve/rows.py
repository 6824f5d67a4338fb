"""A received JSON line straight to the row the store writes for it, when it checks out.

The ingest server's work per record was once decode, build a record object, check it field
by field, build the row: more Python time than SQLite's own insert, which capped ingest at
well under the rate one dashboard should take. Here a line is decoded and type-checked by
msgspec (:mod:`dsmon.model.wire_types`), the checks that are not about types follow, and
the row is made from the decoded line. No record object is built: the server only stores
the batch and counts it.

Anything this path does not vouch for returns None, and the caller checks the line with
:func:`dsmon.model.check.parse_line` as before: that path explains a bad line (``line N:
field 'x': reason``) and takes the odd good one (a ``NaN``, a name past 256 characters that
still fits in 1,024 bytes). So what is accepted, refused and stored, and every message, stay
those of ``parse_line``; only the common good line gets faster.
"""

from __future__ import annotations

import msgspec

from dsmon.model.check import MAX_JSON_DEPTH, MAX_NAME_BYTES
from dsmon.model.records import KINDS, GpuSampleRecord, source_position
from dsmon.model.units import parse_ts
from dsmon.model.wire_types import decoder, line_structs, nests_freely
from dsmon.store.records.keys import identity_digest
from dsmon.store.records.rows import RecordRow

#: Kinds whose lines become rows here. A GPU sample is stored in the typed GPU tables, made
#: from its record (``dsmon.store.gpu.rows``), so its line takes the record path.
ROW_KINDS = tuple(cls for cls in KINDS.values() if cls is not GpuSampleRecord)
#: Names of at most this many characters fit :data:`MAX_NAME_BYTES` whatever they hold.
_SAFE_NAME_CHARS = MAX_NAME_BYTES // 4
_STRUCTS = line_structs(ROW_KINDS)
_decode = decoder(_STRUCTS).decode
#: Per struct: its kind, and whether its lines may nest deeper than their types say.
_KIND = {struct: (cls.KIND, nests_freely(cls)) for struct, cls in _STRUCTS.items()}
#: A row from a tuple of its columns without the keyword handling of ``RecordRow(...)``.
_row = RecordRow._make


def checked_row(line: str) -> RecordRow | None:
    """The store's row for ``line`` (stripped), or None when ``parse_line`` must judge it.

    A row is returned only for a line ``parse_line`` accepts, and it is the row
    ``record_row`` makes of that line's record with the line as its body. None is returned
    for every bad line, and for the good ones this path leaves to ``parse_line``: a
    ``NaN``/``Infinity`` constant (msgspec refuses them; ``encoded_record`` re-encodes the
    line), a NUL in a name (allowed elsewhere), a long run or node name, deep nesting, or a
    kind left out above.
    """
    try:
        rec = _decode(line)
    except (msgspec.MsgspecError, RecursionError):  # msgspec stops at Python's depth limit
        return None
    src = rec.src
    run, node, file, ts = src.run, src.node, src.file, rec.ts
    if not run or len(run) > _SAFE_NAME_CHARS or "\x00" in run:
        return None
    if node is not None and (len(node) > _SAFE_NAME_CHARS or "\x00" in node):
        return None
    if (file is not None and "\x00" in file) or (ts is not None and parse_ts(ts) is None):
        return None  # a NUL in ts fails parse_ts too
    kind, free = _KIND[type(rec)]
    if free and line.count("{") + line.count("[") > MAX_JSON_DEPTH:
        return None
    offset, number = src.offset, src.line
    pos = source_position(offset, number, ts)
    place = offset if offset is not None else number  # the key's order when it is >= 0
    order = place if place is not None and place >= 0 else None
    key = identity_digest(run, node or "", file or "", pos, src.sub, kind, order)
    return _row((key, run, kind, rec.step, ts, node, src.rank, file, number, line))
