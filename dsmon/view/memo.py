"""Derived views kept per run under the version of what they were computed from.

A page asks for the same checklist, table or figure data on every refresh; it is computed
again only when one of the kinds it reads grew. The version in each key only grows, so a
value kept under an older version of the same query can never be asked for again: it is
dropped when the newer one is kept. Keeping them until the size bound instead held 32
checklists of a live run, each with its per-step series (50 MB at 100k steps, ten times
that at a million), and their objects made every full garbage collection slower.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: Keys are a query's fields followed by the version it was computed at.
Key = tuple[Hashable, ...]


class Memo:
    """At most ``size`` values, the least recently used dropped first, one version a query."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._values: OrderedDict[Key, Any] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: Key, fn: Callable[[], T]) -> T:
        """The value kept under ``key``, else ``fn()`` kept (computed outside the lock)."""
        with self._lock:
            if key in self._values:
                self._values.move_to_end(key)
                value: T = self._values[key]
                return value
        value = fn()
        with self._lock:
            for older in [k for k in self._values if k[:-1] == key[:-1] and k != key]:
                del self._values[older]
            self._values[key] = value
            while len(self._values) > self._size:
                self._values.popitem(last=False)
        return value
