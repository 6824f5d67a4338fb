"""Derived views kept per run under the version of what they were computed from.

A page asks for the same checklist, table or figure data on every refresh; it is computed
again only when one of the kinds it reads grew. The version in each key only grows, so a
value kept under an older version of the same query can never be asked for again: it is
dropped when the newer one is kept. Keeping them until the size bound instead held 32
checklists of a live run, each with its per-step series (50 MB at 100k steps, ten times
that at a million), and their objects made every full garbage collection slower.

A count alone does not bound the memory: a replay position is a query of its own, so a
user stepping through a long run's replay kept up to ``size`` checklists of it, each as
big as the run's per-step series. So the values' sizes are estimated as they are kept
(:func:`approx_bytes`), and the least recently used go past ``max_bytes`` too; the value
just computed always stays, so a page never computes its own value twice in one tick.
"""

from __future__ import annotations

import dataclasses
import itertools
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

import numpy as np
import pandas as pd

T = TypeVar("T")

#: Keys are a query's fields followed by the version it was computed at.
Key = tuple[Hashable, ...]


#: Items of a long list or mapping whose sizes are summed; the rest are counted at their mean.
SAMPLED_ITEMS = 64
#: Nesting followed into containers; deeper values count as their bare object.
SIZE_DEPTH = 4
#: What a column without a fixed item size (text) counts a row: a pointer.
POINTER_BYTES = 8


def approx_bytes(value: Any, depth: int = 0) -> int:
    """An estimate of the memory ``value`` holds: frames and arrays by their buffers.

    Cheap enough to run on every value kept: frames count a row's width by their columns'
    types (an object or Arrow column a pointer, not the strings), long containers a sample of their items, and
    nesting stops at :data:`SIZE_DEPTH`. It bounds a cache; it is not an accounting.
    """
    if isinstance(value, pd.DataFrame):
        # by dtype, not DataFrame.memory_usage: that builds a Series of each column's size,
        # about a millisecond for a frame of twenty columns, at every value kept
        width = sum(getattr(dtype, "itemsize", 0) or POINTER_BYTES for dtype in value.dtypes)
        return int(value.index.memory_usage(deep=False)) + len(value) * width
    if isinstance(value, pd.Series):
        return int(value.memory_usage(index=True, deep=False))
    if isinstance(value, pd.Index):
        return int(value.memory_usage(deep=False))
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    own = sys.getsizeof(value)
    if depth >= SIZE_DEPTH:
        return own
    items: Iterable[Any]
    if isinstance(value, dict):
        items, n = itertools.islice(value.values(), SAMPLED_ITEMS), len(value)
    elif isinstance(value, list | tuple | set | frozenset):
        items, n = itertools.islice(value, SAMPLED_ITEMS), len(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        items, n = (getattr(value, f.name) for f in fields[:SAMPLED_ITEMS]), len(fields)
    else:
        return own
    sampled = [approx_bytes(v, depth + 1) for v in items]
    return own + (sum(sampled) * n // len(sampled) if sampled else 0)


class Memo:
    """At most ``size`` values and about ``max_bytes``, least recently used dropped first.

    One version a query (module doc). ``max_bytes`` None: bounded by count alone.
    """

    def __init__(self, size: int, max_bytes: int | None = None) -> None:
        self._size = size
        self._max_bytes = max_bytes
        self._values: OrderedDict[Key, Any] = OrderedDict()
        self._bytes: dict[Key, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    @property
    def nbytes(self) -> int:
        """The estimated bytes of the values kept (:func:`approx_bytes`)."""
        return self._total

    def get(self, key: Key, fn: Callable[[], T]) -> T:
        """The value kept under ``key``, else ``fn()`` kept (computed outside the lock)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                value: T = self._values[key]
                return value
        value = fn()
        size = approx_bytes(value) if self._max_bytes is not None else 0
        with self._lock:
            for older in [k for k in self._values if k[:-1] == key[:-1] and k != key]:
                self._drop(older)
            if key in self._values:  # computed by another session meanwhile
                self._drop(key)
            self._values[key] = value
            self._bytes[key] = size
            self._total += size
            while len(self._values) > self._size or (
                self._max_bytes is not None
                and self._total > self._max_bytes
                and len(self._values) > 1
            ):
                self._drop(next(iter(self._values)))
        return value

    def _drop(self, key: Key) -> None:
        del self._values[key]
        self._total -= self._bytes.pop(key)
