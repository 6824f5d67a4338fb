"""The per-rank probe's JSON lines as records: real probe files of a real DeepSpeed job.

tests/data/probe_straggler/ was written by the probe inside a real 2-rank DeepSpeed job in
which rank 1 sleeps 0.2 s in every forward (see its README.md for the values read by hand).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from locations import DATA

from dsmon.model.records import HeartbeatRecord, RankStepRecord, Record
from dsmon.model.wire import decode, encode
from dsmon.parse.probe import ProbeLineError, ProbeParser, parse_probe_line

PROBE = DATA / "probe_straggler" / "probe"


def parse_file(path: Path) -> tuple[list[Record], ProbeParser]:
    parser = ProbeParser("r", path.name, "node1")
    out: list[Record] = []
    offset = 0
    with path.open("rb") as f:
        for raw in f:
            out.extend(parser.feed(raw.decode(), offset=offset))
            offset += len(raw)
    return out, parser


def test_real_probe_file_gives_every_step_and_heartbeat() -> None:
    recs, parser = parse_file(PROBE / "rank-0.jsonl")
    steps = [r for r in recs if isinstance(r, RankStepRecord)]
    beats = [r for r in recs if isinstance(r, HeartbeatRecord)]
    assert [r.step for r in steps] == list(range(1, 21))
    assert parser.diag.unparsed == {}
    last = steps[-1]  # read by hand off the file: rank 0, step 20
    assert (last.fwd_ms, last.bwd_ms, last.comm_ms, last.total_ms) == (
        0.314,
        227.73,
        239.366,
        252.442,
    )
    assert last.src.rank == 0 and last.src.node == "node1" and last.src.file == "rank-0.jsonl"
    assert last.ts == "2026-12-01T11:08:33.332" and last.clock == "cpu" and last.micro_steps == 1
    assert beats[0].phase == "start" and beats[-1].phase == "exited" and beats[-1].step == 21
    assert len({r.src.offset for r in recs}) == len(recs)  # one identity per line


def test_straggler_is_visible_in_the_raw_fields() -> None:
    slow = [r for r in parse_file(PROBE / "rank-1.jsonl")[0] if isinstance(r, RankStepRecord)]
    assert all(r.src.rank == 1 for r in slow)
    assert min(r.fwd_ms or 0 for r in slow) == 200.462
    assert max(r.fwd_ms or 0 for r in slow) == 243.558


def test_records_round_trip_through_the_wire_format() -> None:
    for rec in parse_file(PROBE / "rank-1.jsonl")[0][:4]:
        assert decode(encode(rec)) == rec


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"kind":"rank_step","ts":"2026-12-01T11:08:33.332","rank":0,"step":2,"fwd', "-"),
        ('{"kind":"rank_step","ts":"2026-12-01T11:08:33.332","rank":0}', "step"),
        (
            '{"kind":"rank_step","ts":"2026-12-01T11:08:33.332","rank":0,"step":1,"fwd_ms":"3"}',
            "fwd_ms",
        ),
        ('{"kind":"heartbeat","ts":"yesterday","rank":0,"phase":"forward"}', "ts"),
        ('{"kind":"heartbeat","ts":"2026-12-01T11:08:33.332","rank":0,"phase":"lunch"}', "phase"),
        ('{"kind":"heartbeat","ts":"2026-12-01T11:08:33.332","rank":-1,"phase":"step"}', "rank"),
        ('{"kind":"gpu","rank":0}', "kind"),
        ("[1, 2]", "-"),
    ],
)
def test_bad_line_names_its_field(line: str, field: str) -> None:
    with pytest.raises(ProbeLineError, match=f"field '{field}'" if field != "-" else "field '-'"):
        parse_probe_line(line, "r", "rank-0.jsonl")


def test_bad_line_is_counted_with_file_and_line_and_skipped() -> None:
    parser = ProbeParser("r", "rank-3.jsonl")
    good = '{"kind":"heartbeat","ts":"2026-12-01T11:08:33.332","rank":3,"phase":"step","step":7}'
    out = parser.feed(good) + parser.feed('{"kind":"heartbeat","ts":"2026-1') + parser.feed(good)
    assert [r.step for r in out] == [7, 7]
    assert parser.diag.unparsed["probe"] == 1
    (example,) = parser.diag.examples["probe"]
    assert example.startswith("rank-3.jsonl:2: field '-': not JSON")
    assert parser.feed("\n") == [] and parser.finish() == []
