"""A block of breakdown rows packed in one value, and unpacked by a reader in one go.

Reading a row from the database costs a reader about a microsecond a value: a million
steps' breakdown rows, eleven values each, took seconds, as the records' Arrow pages they
replace did. A block holds its rows column after column as 8-byte numbers: ``step``, ``rank``
and ``id`` as integers, then the timers (:data:`dsmon.store.timers.sql.READ_COLUMNS`) as
floats, NULL as NaN. It is packed with the standard library (a store's writer needs no
numpy) in the machine's byte order, as SQLite and PostgreSQL keep their own files.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dsmon.store.timers.sql import READ_COLUMNS

if TYPE_CHECKING:
    import pandas as pd

#: Integer columns first (step, rank, id), then float ones.
_INTS = 3
_WIDTH = len(READ_COLUMNS)


def pack(rows: Sequence[Sequence[Any]]) -> bytes:
    """Rows of :data:`READ_COLUMNS` (as :data:`dsmon.store.timers.sql.PAGE` gives them)."""
    ints = array("q")
    floats = array("d")
    for col in range(_WIDTH):
        if col < _INTS:
            ints.extend(int(r[col]) for r in rows)
        else:
            floats.extend(math.nan if r[col] is None else float(r[col]) for r in rows)
    return ints.tobytes() + floats.tobytes()


def unpack(data: bytes) -> pd.DataFrame:
    """A block's rows as :meth:`dsmon.store.timers.tables.TimerTables.rows` gives them."""
    import numpy as np
    import pandas as pd

    n = len(data) // (8 * _WIDTH)
    ints = np.frombuffer(data, dtype=np.int64, count=_INTS * n).reshape(_INTS, n)
    floats = np.frombuffer(data, dtype=np.float64, offset=8 * _INTS * n).reshape(-1, n)
    cols = {name: ints[i] for i, name in enumerate(READ_COLUMNS[:_INTS])}
    cols.update({name: floats[i] for i, name in enumerate(READ_COLUMNS[_INTS:])})
    return pd.DataFrame(cols)
