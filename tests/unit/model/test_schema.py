"""The record schema: one reading of the field types serves the codec, the checks and the frames."""

from __future__ import annotations

import dataclasses

from locations import DATA

from dsmon.model import wire
from dsmon.model.frames import field_dtypes
from dsmon.model.records import (
    KINDS,
    CollectiveStat,
    FlopsProfileRecord,
    ModuleAggregate,
    ModuleProfile,
    RankStepRecord,
    Source,
    StepRecord,
)
from dsmon.model.schema import schema
from dsmon.parse.log import parse_text


def test_only_tuple_fields_are_rebuilt_from_json_lists() -> None:
    assert set(schema(StepRecord).decoders) == {"lr", "mom"}
    assert set(schema(FlopsProfileRecord).decoders) == {"top_modules", "modules"}
    assert set(schema(RankStepRecord).decoders) == {"collectives"}
    with_tuples = (StepRecord, FlopsProfileRecord, RankStepRecord)
    tuple_free = [k for k, cls in KINDS.items() if cls not in with_tuples]
    assert all(not schema(KINDS[k]).decoders for k in tuple_free)


def test_a_probe_step_decodes_to_its_collectives() -> None:
    stat = CollectiveStat(
        op="all_reduce", bucket_bytes=131072, group_size=2, calls=3, msg_bytes=397056, time_ms=2.5
    )
    rec = RankStepRecord(src=Source(run="r", rank=1), step=4, loss=-0.5, collectives=(stat,))
    back = wire.decode(wire.encode(rec))
    assert back == rec and isinstance(back.collectives[0], CollectiveStat)


def test_a_real_flops_profile_decodes_to_its_module_rows() -> None:
    text = (DATA / "flops_detailed_stdout" / "train.log").read_text(encoding="utf-8")
    recs, _ = parse_text(text, run="run", file="train.log")
    profile = next(r for r in recs if isinstance(r, FlopsProfileRecord))
    assert (len(profile.modules), len(profile.top_modules)) == (42, 9)
    obj = wire.to_dict(profile)
    decoders = schema(FlopsProfileRecord).decoders
    modules = decoders["modules"](obj["modules"])
    assert isinstance(modules, tuple) and all(isinstance(m, ModuleProfile) for m in modules)
    assert modules == profile.modules
    top = decoders["top_modules"](obj["top_modules"])
    assert all(isinstance(m, ModuleAggregate) for m in top) and top == profile.top_modules


def test_required_fields_are_those_without_a_default() -> None:
    for cls in KINDS.values():
        expected = {
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        }
        assert set(schema(cls).required) == expected, cls.KIND
        assert "src" in expected


def test_columns_take_their_dtype_from_the_annotation() -> None:
    dtypes = field_dtypes("flops_profile")
    assert dtypes["profile_step"] == "Int64"  # int | None: missing stays NA, never 0
    assert dtypes["fwd_latency_ms"] == "float64"  # float | None
    assert dtypes["partial"] == "boolean"  # bool
    assert dtypes["modules"] == "object"  # a tuple of module rows
    assert "src" not in dtypes and "step" not in dtypes and "ts" not in dtypes
