"""The timer tables' rows of timer bodies: typed bodies read in one go, odd ones field by field.

A checked record's timers are numbers, read as floats at once; a body with a timer that is no
number (a ``null``, a ``true``) is read again field by field, and such a timer is NULL.
"""

from __future__ import annotations

from dsmon.store.timers.rows import timer_rows
from dsmon.store.timers.sql import NO_RANK


def body(group: object, values: str) -> str:
    return f'{{"kind":"timer","group":{group},"values_ms":{values},"micro_step":null}}'


def test_typed_and_odd_bodies_make_the_same_float_columns() -> None:
    made = timer_rows(
        [
            (1, "r", 5, 0, body('"global"', '{"fwd":1,"bwd":2.5,"x":3}')),
            (2, "r", 5, None, body('"global"', '{"fwd":1,"bwd":null,"step":true}')),
            (3, "r", 6, 1, body('"zero_optimizer"', '{"optimizer_step":4}')),
        ]
    )
    assert made.steps["global"] == [
        ("r", 5, 0, 1, 1.0, 2.5, None, None, None),
        ("r", 5, NO_RANK, 2, 1.0, None, None, None, None),
    ]
    assert made.steps["zero_optimizer"] == [("r", 6, 1, 3, None, None, 4.0)]
    assert all(type(v) is float for row in made.steps["global"] for v in row[4:] if v is not None)
    assert made.placed == [("r", 1), ("r", 2), ("r", 3)]


def test_names_of_every_group_each_once_with_the_empty_name() -> None:
    made = timer_rows(
        [
            (1, "r", 1, 0, body('"micro"', '{"fwd_microstep":1}')),
            (2, "r", 2, 0, body('"micro"', '{"fwd_microstep":1,"bwd_microstep":2}')),
            (3, "q", None, 0, body('"global"', "{}")),
            (4, "r", 3, 0, body("7", '{"fwd":1}')),  # no group: no names, no row
        ]
    )
    assert made.names == {
        ("r", "micro", ""), ("r", "micro", "fwd_microstep"), ("r", "micro", "bwd_microstep"),
        ("q", "global", ""),
    }  # fmt: skip
    assert made.unplaced == [("q", 3)]
    assert made.steps == {}
