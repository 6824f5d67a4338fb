"""Timer lines already seen, matched whole: a long run prints the same few at every step.

A timer line's body is split on ``|`` and each field matched on its own
(``timers._fields``), which took 4 us of a timer line's 11 in ``dsmon parse``. Yet a run
prints the same lines with the same names, in the same order and spacing, step after step.
Once a body's names are known, one regex built from them matches the next such body whole
and gives its values: 1.3 to 1.6 us. A body that matches no known shape takes the field-by-field
path, which then teaches its shape.

The shape regex is the field regex itself with each name written out as printed: it matches
a body exactly when splitting it on ``|`` and matching each field gives those names, since
neither a name nor a value holds a ``|`` or a ``:``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

#: Shapes kept at most; a log with more distinct timer lines takes the field-by-field path
#: for the ones seen after (names that vary every line, which DeepSpeed never prints).
MAX_SHAPES = 256
#: Shapes kept at most under one first field name, since a body is tried against each of
#: them: DeepSpeed prints one or two (a ``fwd`` line alone, and with ``bwd`` after it).
MAX_PER_HEAD = 8


class Shape(NamedTuple):
    """One line shape: the regex for its body and the names its fields are stored under."""

    pattern: re.Pattern[str]
    names: tuple[str, ...]


class ShapeCache:
    """Known timer-line shapes, found by the body's first field name.

    Args:
        field: the regex of one ``name: value`` field (name in group 1, value in group 2),
            the same one the field-by-field path matches.
        value: the regex of one value, put in each shape as its capturing group.
    """

    def __init__(self, field: re.Pattern[str], value: str) -> None:
        self._field = field
        self._value = value
        self._by_head: dict[str, list[Shape]] = {}
        self._count = 0

    def match(self, body: str) -> tuple[tuple[str, ...], list[float]] | None:
        """Names and values of a body of a known shape, else None."""
        shapes = self._by_head.get(body[: body.find(":")])
        if shapes is None:
            return None
        for shape in shapes:
            m = shape.pattern.fullmatch(body)
            if m is not None:
                return shape.names, [float(v) for v in m.groups()]
        return None

    def learn(self, body: str, names: tuple[str, ...]) -> None:
        """Keep the shape of a body the field-by-field path parsed into ``names``."""
        key = body[: body.find(":")]
        if self._count >= MAX_SHAPES or len(self._by_head.get(key, ())) >= MAX_PER_HEAD:
            return
        printed: list[str] = []
        for part in body.split("|"):
            m = self._field.fullmatch(part)
            if m is None:
                return
            printed.append(m.group(1))
        fields = (rf"\s*{re.escape(name)}: ({self._value})\s*" for name in printed)
        self._by_head.setdefault(key, []).append(Shape(re.compile(r"\|".join(fields)), names))
        self._count += 1
