from __future__ import annotations

import gzip
import json
import zlib

import pytest

from dsmon.model import wire
from dsmon.model.records import (
    FlopsProfileRecord,
    ModuleProfile,
    Record,
    Source,
    StepRecord,
    TimerRecord,
)
from dsmon.serve.batch import (
    MAX_GZIP_MEMBERS,
    BatchError,
    check_length,
    inflate,
    parse_batch,
)


def refused(fn: object, *args: object) -> tuple[int, str]:
    with pytest.raises(BatchError) as err:
        fn(*args)  # type: ignore[operator]
    return err.value.status, err.value.message


def timer_line(**changes: object) -> str:
    obj = json.loads(
        wire.encode(
            TimerRecord(
                src=Source(run="z2", file="train.log", line=184, offset=20000, rank=0),
                step=1,
                group="global",
                values_ms={"fwd": 350.75, "bwd": 754.18},
            )
        )
    )
    obj.update(changes)
    return json.dumps(obj)


def test_declared_length() -> None:
    check_length(None, 10)
    check_length("10", 10)
    assert refused(check_length, "11", 10) == (
        413,
        "body of 11 bytes exceeds the limit of 10 bytes",
    )
    assert refused(check_length, "ten", 10) == (400, "Content-Length: not a number: 'ten'")


def test_inflate() -> None:
    assert inflate(b"abc", None, 3) == b"abc"
    assert inflate(gzip.compress(b"a" * 100), "gzip", 100) == b"a" * 100
    assert inflate(gzip.compress(b"ab") + gzip.compress(b"cd"), "x-gzip", 4) == b"abcd"
    assert refused(inflate, gzip.compress(b"a" * 101), "gzip", 100) == (
        413,
        "body inflates to more than the limit of 100 bytes",
    )
    # The second member pushes it over.
    assert refused(inflate, gzip.compress(b"ab") + gzip.compress(b"cde"), "gzip", 4)[0] == 413
    assert refused(inflate, b"abc", "br", 10) == (
        415,
        "Content-Encoding 'br' is not supported (use gzip)",
    )
    assert refused(inflate, gzip.compress(b"abcdef")[:-3], "gzip", 100) == (
        400,
        "gzip body: truncated stream",
    )
    assert refused(inflate, zlib.compress(b"abc"), "gzip", 100)[1].startswith("gzip body: Error -3")


def test_gzip_members_are_counted_and_each_read_in_chunks() -> None:
    members = [gzip.compress(f"line {i}\n".encode() * 20_000) for i in range(MAX_GZIP_MEMBERS)]
    expected = b"".join(f"line {i}\n".encode() * 20_000 for i in range(MAX_GZIP_MEMBERS))
    assert inflate(b"".join(members), "gzip", len(expected)) == expected
    big = gzip.compress(bytes(range(256)) * 2000, compresslevel=0)  # 512 kB: many input chunks
    assert inflate(big + big, "gzip", 2 * 10**6) == (bytes(range(256)) * 2000) * 2
    too_many = gzip.compress(b"") * (MAX_GZIP_MEMBERS + 1)
    assert refused(inflate, too_many, "gzip", 100) == (
        400,
        f"gzip body: more than {MAX_GZIP_MEMBERS} gzip members",
    )


def test_bomb_stops_at_the_limit() -> None:
    bomb = gzip.compress(bytes(200 * 2**20))  # 200 MiB of zeros in ~200 KiB
    assert len(bomb) < 300_000
    assert refused(inflate, bomb, "gzip", 2**20) == (
        413,
        "body inflates to more than the limit of 1048576 bytes",
    )


def test_real_records_of_every_kind_round_trip(z2_log_records: list[Record]) -> None:
    body = "\n".join(wire.encode(r) for r in z2_log_records).encode()
    assert parse_batch(body) == z2_log_records
    assert {r.KIND for r in z2_log_records} >= {"event", "config", "flops_profile"}


def test_blank_lines_and_ints_for_floats_are_fine() -> None:
    (rec,) = parse_batch(f"\n\n{timer_line(values_ms={'fwd': 350})}\n\r\n".encode())
    assert isinstance(rec, TimerRecord) and rec.values_ms == {"fwd": 350}


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (timer_line(step="1"), "field 'step': expected int, got str"),
        (timer_line(step=True), "field 'step': expected int, got bool"),
        (timer_line(values_ms={"fwd": "fast"}), "field 'values_ms.fwd': expected float, got str"),
        (timer_line(values_ms=[1.0]), "field 'values_ms': expected an object, got list"),
        (timer_line(legacy=1), "field 'legacy': expected bool, got int"),
        (timer_line(src={"run": "z2", "rank": "0"}), "field 'src.rank': expected int, got str"),
        (timer_line(src={"run": ""}), "field 'src.run': must not be empty"),
        (
            timer_line(src={"run": "z2", "file": "a\u0000b"}),
            "field 'src.file': contains a NUL character",
        ),
        (
            timer_line(src={"run": "z2", "host": "x"}),
            "field 'src': Source.__init__() got an unexpected keyword argument 'host'",
        ),
        (timer_line(colour="red"), "field 'colour': not a field of kind 'timer'"),
        (timer_line(kind="timers"), "field 'kind': unknown record kind 'timers'"),
        (
            '{"kind": "timer", "src": {"run": "z2"}}',
            "field 'group': required by kind 'timer' but missing",
        ),
        ("[1, 2]", "record: expected a JSON object"),
        (timer_line(step=2**63), "field 'step': 9223372036854775808 does not fit in 64 bits"),
        (timer_line(ts="2026-11-29\u0000"), "field 'ts': contains a NUL character"),
        (timer_line(group="glo\ud800bal"), "not valid Unicode: lone surrogate \\ud800"),
    ],
)
def test_bad_line_names_line_and_field(line: str, error: str) -> None:
    good = timer_line()
    assert refused(parse_batch, f"{good}\n{line}\n{good}".encode()) == (400, f"line 2: {error}")


def test_nested_rows_are_checked() -> None:
    prof = FlopsProfileRecord(
        src=Source(run="z2", line=300),
        modules=(ModuleProfile(path="m", module_class="Linear", depth=1),),
    )
    obj = json.loads(wire.encode(prof))
    obj["modules"][0]["depth"] = "1"
    assert refused(parse_batch, json.dumps(obj).encode()) == (
        400,
        "line 1: field 'modules[0].depth': expected int, got str",
    )
    step = json.loads(
        wire.encode(
            StepRecord(src=Source(run="z2", line=45), step=0, lr=(0.0001,), mom=((0.9, 0.999),))
        )
    )
    step["mom"] = [[0.9, "x"]]
    assert refused(parse_batch, json.dumps(step).encode()) == (
        400,
        "line 1: field 'mom': could not convert string to float: 'x'",
    )


def test_not_json_and_not_utf8() -> None:
    assert refused(parse_batch, b'{"kind":\n') == (
        400,
        "line 1: not JSON: Expecting value: line 1 column 9 (char 8)",
    )
    first = timer_line().encode() + b"\n"
    assert len(first) == 271
    assert refused(parse_batch, first + b"\xff\xfe\n") == (400, "line 2: not UTF-8 at byte 271")


def test_surrogate_pairs_are_fine() -> None:
    line = timer_line(group="\U0001f600")
    assert "\\ud83d\\ude00" in line  # json.dumps escaped the emoji as a pair
    (rec,) = parse_batch(line.encode())
    assert isinstance(rec, TimerRecord) and rec.group == "\U0001f600"


def test_received_lines_are_stored_as_sent_unless_they_hold_constants() -> None:
    """The server stores the checked line itself; NaN/Infinity lines are re-encoded strictly."""
    from dsmon.model import wire
    from dsmon.model.records import Source, ThroughputRecord
    from dsmon.serve.batch import parse_batch_encoded

    plain = ThroughputRecord(src=Source(run="r", file="f", line=7), global_step=5)
    line = wire.encode(plain)
    odd = line.replace('"samples_per_s":null', '"samples_per_s":NaN')
    assert odd != line
    (a, b) = parse_batch_encoded(f"{line}\n{odd}\n".encode())
    assert a.body == line and a.record == plain
    assert "NaN" not in b.body and wire.decode(b.body).samples_per_s is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("ts", ["2026-19-39T17:52:18.030", "2026-11-29T25:61:00.000", "yesterday"])
def test_a_time_that_names_no_real_moment_is_refused(ts: str) -> None:
    assert parse_batch(timer_line(ts="2026-11-29T14:11:04.882").encode())  # a real one is fine
    assert refused(parse_batch, timer_line(ts=ts).encode()) == (
        400,
        f"line 1: field 'ts': not an ISO-8601 date and time: {ts!r}",
    )
