"""The msgspec mirror of the record model (dsmon.model.wire_types) covers every kind."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from dsmon.model.records import KINDS, ConfigRecord, EventRecord, Source, TimerRecord
from dsmon.model.wire_types import UnsupportedTypeError, line_structs, nests_freely, struct_of


def test_every_kind_has_its_struct_with_the_same_fields() -> None:
    structs = line_structs(KINDS.values())
    assert sorted(c.KIND for c in structs.values()) == sorted(KINDS)
    for struct, cls in structs.items():
        assert struct.__struct_fields__ == tuple(f.name for f in dataclasses.fields(cls))
        assert struct.__struct_config__.tag == cls.KIND


def test_defaults_are_the_models() -> None:
    line = msgspec.json.decode(b'{"run": "z2"}', type=struct_of(Source))
    assert (line.file, line.line, line.offset, line.node, line.rank, line.sub) == (
        None, None, None, None, None, 0
    )  # fmt: skip
    timer = msgspec.json.decode(
        b'{"kind": "timer", "src": {"run": "z2"}, "group": "g", "values_ms": {}}',
        type=struct_of(TimerRecord, tag="timer"),
    )
    assert (timer.ts, timer.step, timer.legacy, timer.min_values_ms) == (None, None, False, {})


def test_only_free_form_fields_nest_freely() -> None:
    assert nests_freely(ConfigRecord) and nests_freely(EventRecord)
    assert not nests_freely(TimerRecord) and not nests_freely(Source)


def test_a_type_without_counterpart_is_left_out() -> None:
    @dataclasses.dataclass
    class Odd:
        tags: frozenset[str]

    with pytest.raises(UnsupportedTypeError):
        struct_of(Odd)
