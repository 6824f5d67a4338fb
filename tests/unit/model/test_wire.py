"""The JSON-lines codec: every record of the real corpus survives it; bad objects name the field."""

from __future__ import annotations

import json

import pytest
from locations import DATA, ROOT

from dsmon.model import wire
from dsmon.model.records import KINDS, Source, ThroughputRecord, TimerRecord
from dsmon.parse.log import LogParser, parse_text


def test_real_records_round_trip_and_keep_kind_first() -> None:
    text = (DATA / "z2" / "train.log").read_text(encoding="utf-8")
    recs, _ = parse_text(text, run="z2", file="train.log")
    kinds = {r.KIND for r in recs}
    assert {"timer", "step", "throughput", "flops_profile", "config", "event"} <= kinds
    for rec in recs:
        line = wire.encode(rec)
        assert "\n" not in line
        assert line.startswith('{"kind":"' + rec.KIND + '"')
        assert wire.decode(line) == rec


def test_non_finite_values_become_null() -> None:
    rec = ThroughputRecord(
        src=Source(run="r", file="f", line=3),
        running_avg_samples_per_s=float("-inf"),
        samples_per_s=float("nan"),
        global_step=2,
    )
    obj = json.loads(wire.encode(rec))
    assert obj["running_avg_samples_per_s"] is None
    assert obj["samples_per_s"] is None
    assert obj["global_step"] == 2


def test_timer_values_keep_their_names() -> None:
    rec = TimerRecord(
        src=Source(run="r", line=1), group="global", values_ms={"fwd": 30.47, "step": 30.25}
    )
    obj = json.loads(wire.encode(rec))
    assert obj["values_ms"] == {"fwd": 30.47, "step": 30.25}


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        ({"kind": "nope", "src": {"run": "r"}}, "kind"),
        ({"kind": "timer", "src": {"run": "r"}, "group": "global", "values_ms": {}, "x": 1}, "x"),
        ({"kind": "timer", "src": "r", "group": "global", "values_ms": {}}, "src"),
        ({"kind": "step", "src": {"run": "r"}, "lr": [[1, 2]]}, "lr"),
    ],
)
def test_bad_objects_name_the_field(obj: dict[str, object], field: str) -> None:
    with pytest.raises(wire.WireError, match=repr(field) if field != "kind" else "kind"):
        wire.from_dict(obj)


def test_missing_required_field_is_an_error() -> None:
    with pytest.raises(wire.WireError, match="timer"):
        wire.from_dict({"kind": "timer", "src": {"run": "r"}})


def test_every_kind_is_registered_once() -> None:
    assert len(KINDS) == 18
    assert all(kind == cls.KIND for kind, cls in KINDS.items())


def test_not_json_is_an_error() -> None:
    with pytest.raises(wire.WireError, match="not JSON"):
        wire.decode("{oops")


def test_the_documented_example_is_what_dsmon_parse_prints() -> None:
    """docs/records.md shows a real record of the bundled run; keep it true."""
    root = ROOT
    doc = (root / "docs" / "records.md").read_text(encoding="utf-8")
    example = doc.split("```json\n", 1)[1].split("\n```", 1)[0]
    parser = LogParser("z2", "train.log")
    recs, offset = [], 0
    for raw in (root / "dsmon" / "data" / "demo" / "train.log").read_bytes().splitlines(True):
        recs.extend(parser.feed(raw.decode("utf-8"), offset=offset))  # as dsmon parse does
        offset += len(raw)
    recs.extend(parser.finish())
    assert example in {wire.encode(r) for r in recs}


@pytest.mark.parametrize("run", ["z2", "flops_detailed_stdout", "comms_logger_verbose", "z3"])
def test_fast_encoder_writes_what_the_json_module_writes(run: str) -> None:
    """Every record of real runs: the same object as ``json`` makes of ``to_dict``, same order.

    The lines agree byte for byte except where a float is spelled another way for the same
    number (``1e-05`` / ``0.00001``), which this test would show as a failed text comparison.
    """
    text = (DATA / run / "train.log").read_text(encoding="utf-8")
    recs, _ = parse_text(text, run=run, file="train.log")
    assert recs
    for rec in recs:
        fast = wire.encode(rec)
        reference = json.dumps(wire.to_dict(rec), ensure_ascii=False, separators=(",", ":"))
        assert list(json.loads(fast).items()) == list(json.loads(reference).items())
        if "e-" not in reference:
            assert fast == reference


def test_small_floats_are_spelled_without_exponent_and_read_back_the_same() -> None:
    rec = ThroughputRecord(src=Source(run="r", line=1), samples_per_s=1e-05, global_step=1)
    line = wire.encode(rec)
    assert '"samples_per_s":0.00001,' in line
    assert wire.decode(line) == rec


def test_values_the_fast_encoder_refuses_take_the_json_path() -> None:
    """An int beyond 64 bits (a counter a script printed) is written whole, not refused."""
    rec = ThroughputRecord(src=Source(run="r", line=1), samples_per_s=1.5, global_step=2**70)
    line = wire.encode(rec)
    assert f'"global_step":{2**70}' in line
    assert line.startswith('{"kind":"throughput","src":{"run":"r",')
    assert wire.decode(line) == rec
