from __future__ import annotations

import gzip
import json
import zlib

import pytest
from server_support import batch_records, reference_batch, reference_rows

from dsmon.model import wire
from dsmon.model.records import (
    EventRecord,
    FlopsProfileRecord,
    GpuSampleRecord,
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
    parse_batch_rows,
)
from dsmon.serve.rows import check_lines
from dsmon.store.gpu.rows import sample_row
from dsmon.store.records.rows import RecordRow, record_row
from dsmon.store.store import RowBatch

#: The batch decoders a bad line must be refused by alike: the records' and the server's.
DECODERS = pytest.mark.parametrize("decode", [batch_records, parse_batch_rows])


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
    bomb = gzip.compress(bytes(20 * 2**20))  # 20 MiB of zeros in ~20 KiB
    assert len(bomb) < 30_000
    assert refused(inflate, bomb, "gzip", 2**20) == (
        413,
        "body inflates to more than the limit of 1048576 bytes",
    )


def test_real_records_of_every_kind_round_trip(z2_log_records: list[Record]) -> None:
    body = "\n".join(wire.encode(r) for r in z2_log_records).encode()
    assert batch_records(body) == z2_log_records
    assert {r.KIND for r in z2_log_records} >= {"event", "config", "flops_profile"}


def test_blank_lines_and_ints_for_floats_are_fine() -> None:
    (rec,) = batch_records(f"\n\n{timer_line(values_ms={'fwd': 350})}\n\r\n".encode())
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
        # past what orjson reads as an int (it would give a float: "expected int, got float")
        (timer_line(step=2**64), "field 'step': 18446744073709551616 does not fit in 64 bits"),
        (
            timer_line(step=-(2**63) - 1),
            "field 'step': -9223372036854775809 does not fit in 64 bits",
        ),
        (timer_line(ts="2026-11-29\u0000"), "field 'ts': contains a NUL character"),
        (timer_line(group="glo\ud800bal"), "not valid Unicode: lone surrogate \\ud800"),
    ],
)
@DECODERS
def test_bad_line_names_line_and_field(decode: object, line: str, error: str) -> None:
    good = timer_line()
    assert refused(decode, f"{good}\n{line}\n{good}".encode()) == (400, f"line 2: {error}")


def test_big_integer_in_detail_is_kept_exact() -> None:
    """An integer past 64 bits in free-form ``detail`` (a counter printed whole) stays exact."""
    line = json.loads(wire.encode(EventRecord(src=Source(run="z2", line=9), name="x", message="m")))
    line["detail"] = {"bytes": 2**64 + 1, "low": -(2**63) - 3}
    (rec,) = batch_records(json.dumps(line).encode())
    assert isinstance(rec, EventRecord)
    assert rec.detail == {"bytes": 18446744073709551617, "low": -9223372036854775811}


@DECODERS
def test_nested_rows_are_checked(decode: object) -> None:
    prof = FlopsProfileRecord(
        src=Source(run="z2", line=300),
        modules=(ModuleProfile(path="m", module_class="Linear", depth=1),),
    )
    obj = json.loads(wire.encode(prof))
    obj["modules"][0]["depth"] = "1"
    assert refused(decode, json.dumps(obj).encode()) == (
        400,
        "line 1: field 'modules[0].depth': expected int, got str",
    )
    step = json.loads(
        wire.encode(
            StepRecord(src=Source(run="z2", line=45), step=0, lr=(0.0001,), mom=((0.9, 0.999),))
        )
    )
    step["mom"] = [[0.9, "x"]]
    assert refused(decode, json.dumps(step).encode()) == (
        400,
        "line 1: field 'mom': could not convert string to float: 'x'",
    )


@DECODERS
def test_not_json_and_not_utf8(decode: object) -> None:
    assert refused(decode, b'{"kind":\n') == (
        400,
        "line 1: not JSON: Expecting value: line 1 column 9 (char 8)",
    )
    first = timer_line().encode() + b"\n"
    assert len(first) == 271
    assert refused(decode, first + b"\xff\xfe\n") == (400, "line 2: not UTF-8 at byte 271")


@pytest.mark.parametrize(
    "lines",
    [
        # a bad line first, then a GPU sample with a byte that is not UTF-8 in a string
        [b'{"kind":', b"GPU"],
        [b"TIMER", b"  ", b"TIMER\xc3", b'{"kind":'],
        [b"\xed\xa0\x80", b'{"kind":'],  # a surrogate's bytes, alone on a line
        [b"TIMER", b'{"kind":', b" GPU \r"],
    ],
)
def test_the_first_fault_is_named_whichever_line_holds_it(lines: list[bytes]) -> None:
    """Lines are decoded one by one, yet a byte that is not UTF-8 is named before any line.

    The text of a line in the middle of the body stays what the body decoded whole gives.
    """
    timer, gpu = timer_line().encode(), gpu_line(name="H\u00e9").encode()
    body = b"\n".join(
        line.replace(b"TIMER", timer).replace(b"GPU", gpu.replace(b"H\\u00e9", b"H\xe9"))
        for line in lines
    )
    assert outcome(parse_batch_rows, body) == outcome(reference_rows, body)
    assert isinstance(outcome(reference_rows, body), tuple)


def test_lines_are_cut_at_newlines_only() -> None:
    """A body's lines as the text's ``split("\\n")``: CR, spaces and blank lines as before."""
    timer = timer_line(group="\U0001f600 \u00e9").encode()
    text = json.loads(timer)["group"]
    body = b"\r\n".join([timer, b"", b"  " + timer + b"\t", b"\r", timer.replace(b'"z2"', b'"z3"')])
    got = parse_batch_rows(body + b"\n\n")
    assert got == reference_rows(body + b"\n\n")
    bodies = [RecordRow._make(r).body for r in got.rows]  # rows are plain tuples
    assert [wire.decode(b).group for b in bodies] == [text] * 3  # type: ignore[attr-defined]
    assert bodies == [line.strip() for line in body.decode().split("\n") if line.strip()]


def test_surrogate_pairs_are_fine() -> None:
    line = timer_line(group="\U0001f600")
    assert "\\ud83d\\ude00" in line  # json.dumps escaped the emoji as a pair
    (rec,) = batch_records(line.encode())
    assert isinstance(rec, TimerRecord) and rec.group == "\U0001f600"


def test_received_lines_are_stored_as_sent_unless_they_hold_constants() -> None:
    """The server stores the checked line itself; NaN/Infinity lines are re-encoded strictly."""
    from dsmon.model import wire
    from dsmon.model.records import Source, ThroughputRecord

    plain = ThroughputRecord(src=Source(run="r", file="f", line=7), global_step=5)
    line = wire.encode(plain)
    odd = line.replace('"samples_per_s":null', '"samples_per_s":NaN')
    assert odd != line
    (a, b) = reference_batch(f"{line}\n{odd}\n".encode())
    assert a.body == line and a.record == plain
    assert "NaN" not in b.body and wire.decode(b.body).samples_per_s is None  # type: ignore[attr-defined]


@DECODERS
@pytest.mark.parametrize("ts", ["2026-19-39T17:52:18.030", "2026-11-29T25:61:00.000", "yesterday"])
def test_a_time_that_names_no_real_moment_is_refused(decode: object, ts: str) -> None:
    assert decode(timer_line(ts="2026-11-29T14:11:04.882").encode())  # type: ignore[operator]
    assert refused(decode, timer_line(ts=ts).encode()) == (
        400,
        f"line 1: field 'ts': not an ISO-8601 date and time: {ts!r}",
    )


def test_the_server_makes_the_rows_records_make(z2_log_records: list[Record]) -> None:
    """``parse_batch_rows`` builds no record, yet stores what ``record_row`` would."""
    gpu = GpuSampleRecord(
        src=Source(run="z2", node="n1"), ts="2026-11-29T14:11:04.882", gpu_index=3
    )
    records = [*z2_log_records, gpu]
    body = "\n".join(wire.encode(r) for r in records).encode()
    got = parse_batch_rows(body)
    assert got.rows == [record_row(r, wire.encode(r)) for r in z2_log_records]
    # GPU samples are stored in their own tables: their rows are those the record makes
    assert got.samples == [sample_row(gpu)]
    assert not check_lines(body).others  # every line made without a record


def gpu_line(**changes: object) -> str:
    """A sample as a collector sends it (every field NVML gives), with ``changes``."""
    rec = GpuSampleRecord(
        src=Source(run="z2", node="n1"),
        ts="2026-11-29T14:11:04.882",
        gpu_index=3,
        uuid="GPU-h100-0003",
        name="NVIDIA H100 80GB HBM3",
        util_gpu_pct=87.0,
        util_mem_pct=41.0,
        mem_used_bytes=61_234_567_168,
        mem_total_bytes=85_520_809_984,
        power_w=612.345,
        power_limit_w=700.0,
        energy_j=124056.789,
        temperature_c=64.0,
        sm_clock_mhz=1980.0,
        mem_clock_mhz=2619.0,
        throttle_reasons=4,
        pcie_tx_bytes_per_s=2097152.0,
        pcie_rx_bytes_per_s=4194304.0,
        ecc_corrected=3,
        ecc_uncorrected=0,
        gpm_sm_active_pct=71.5,
        gpm_tensor_active_pct=43.25,
        gpm_dram_bw_pct=55.0,
    )
    obj = json.loads(wire.encode(rec))
    for name, value in changes.items():
        if name.startswith("src."):
            obj["src"][name[4:]] = value
        else:
            obj[name] = value
    return json.dumps(obj)


@pytest.mark.parametrize(
    ("changes", "fast"),
    [
        ({}, True),
        ({"util_gpu_pct": 87, "power_limit_w": 700}, True),  # integers for floats
        ({"gpm_sm_active_pct": None, "xid": None, "uuid": None}, True),
        ({"ts": "2026-11-29T14:11:04"}, False),  # not to the millisecond: kept in extra
        ({"ts": "2026-11-29T14:11:04.882123"}, False),
        ({"ts": "2026-11-29T14:11:04.882+01:00"}, False),  # a zone: stored as a record
        # times Python reads as the collectors' but writes otherwise: kept in extra
        ({"ts": "2026-W48-7T14:11:04.882"}, False),
        ({"ts": "2026-11-29T14:11:04,882"}, False),
        ({"ts": "2026-11-29 14:11:04.882"}, False),
        ({"ts": "20261129T141104.882"}, False),
        (
            {"gpm_sm_active_pct": None, "gpm_tensor_active_pct": None, "gpm_dram_bw_pct": None},
            True,
        ),  # an A100: no GPM
        ({"ts": None}, False),  # no time: stored as a record
        ({"xid": 79}, False),
        ({"step": 12}, False),
        ({"src.rank": 0}, False),
        ({"src.file": "gpu.log", "src.line": 3}, False),
        ({"power_w": 612.3456}, False),  # not whole milliwatts
        ({"mem_used_bytes": 1023}, False),  # not whole KiB
        ({"pcie_rx_bytes_per_s": 100.5}, False),
        ({"gpm_dram_bw_pct": 55.123}, False),  # finer than the column holds
        ({"power_w": float("nan")}, False),  # NaN: msgspec refuses it, parse_line takes it
    ],
)
def test_gpu_samples_are_the_rows_their_records_make(
    changes: dict[str, object], fast: bool
) -> None:
    """A collector's sample becomes its row without a record; any other, through its record."""
    body = gpu_line(**changes).encode()
    assert (not check_lines(body).others) == fast
    got = parse_batch_rows(body)
    assert got == reference_rows(body)
    (expected,) = reference_batch(body)
    assert len(got) == 1 and (got.samples == [sample_row(expected.record)] or not got.samples)  # type: ignore[arg-type]


def test_lines_left_to_parse_line_keep_their_place() -> None:
    """A line the fast path leaves (a long name, a finer GPU time) is stored where it was sent."""
    lines = [
        timer_line(src={"run": "z2", "line": 1}),
        timer_line(src={"run": "z" * 300, "line": 2}),
        gpu_line(),
        gpu_line(ts="2026-11-29T14:11:04.882123"),
        gpu_line(ts="2026-11-29T14:11:05.882"),
        timer_line(src={"run": "z2", "line": 3}),
    ]
    body = "\n".join(lines).encode()
    assert [o.number for o in check_lines(body).others] == [2, 4]
    got = parse_batch_rows(body)
    expected = reference_rows(body)
    assert [RecordRow._make(r).line for r in got.rows] == [1, 2, 3]
    assert got == expected
    assert [s.t_ms for s in got.samples] == sorted(s.t_ms for s in got.samples)


@pytest.mark.parametrize(
    "place",
    [
        {"offset": 20000, "line": 184},
        {"offset": None, "line": 184},
        {"offset": None, "line": None},  # keyed by its time
        {"offset": -5, "line": 184},  # a negative place: the key reads it from the text
        {"offset": None, "line": -1},
        {"offset": 0, "line": None},
        {"offset": (1 << 63) - 1, "line": None},  # the largest place msgspec decodes
    ],
)
def test_the_server_keys_every_place_as_records_do(place: dict[str, int | None]) -> None:
    """The server keys a line from its offset or line number as ``record_row`` does."""
    line = timer_line(src={"run": "z2", "file": "train.log", "rank": 0, **place})
    (row,) = parse_batch_rows(line.encode()).rows
    assert row == record_row(wire.decode(line), line)


#: An event line with its ``detail`` (free-form JSON) in the place of ``{}``.
_EVENT = '{{"kind": "event", "src": {{"run": "z2", "line": 3}}, "name": "x", "detail": {}}}'


@pytest.mark.parametrize(
    ("line", "fast"),
    [
        (timer_line(group="a\u0000b"), True),  # a NUL where the store takes one
        (timer_line(src={"run": "z2", "node": "a\u0000b"}), False),  # refused, by parse_line
        (timer_line(src={"run": "z" * 300}), False),  # longer than the fast check vouches for
        (timer_line(values_ms={"fwd": float("nan")}), False),  # NaN: stored re-encoded as null
        (timer_line(values_ms={"fwd": True}), False),  # a bool for a float: the model takes it
        (timer_line(group="Infinity and NaN"), True),  # only in a string: stored as sent
        # free-form JSON is read through, not built: what its full decode refuses is refused,
        # bar a number past a float's range, which parse_line takes as the line it came in
        (_EVENT.format('{"a": {"b": [1, 2e400, "\\u00e9", null]}, "c": -1e999}'), True),
        (_EVENT.format('{"a": "\\ud83d\\ude00"}'), True),  # a surrogate pair
        (_EVENT.format('{"a": "\\ud800"}'), False),  # a lone surrogate: refused
        (_EVENT.format('{"a": "x\ty"}'), False),  # a control character in a string: refused
        (_EVENT.format('{"a": [1,]}'), False),  # not JSON: refused
        (_EVENT.format("[1]"), False),  # a detail that is no object: refused
        (
            '{"kind": "config", "src": {"run": "z2"}, "origin": "user", '
            '"config": {"zero": {"stage": 1e400}}}',
            True,
        ),
    ],
)
def test_lines_the_fast_path_leaves_alone_are_judged_as_before(line: str, fast: bool) -> None:
    body = line.encode()
    try:
        expected = reference_rows(body).rows
    except BatchError as exc:
        assert not fast and refused(parse_batch_rows, body) == (exc.status, exc.message)
        return
    assert (not check_lines(body).others) == fast
    (row,) = parse_batch_rows(body).rows
    assert row[:-1] == expected[0][:-1]
    assert wire.decode(RecordRow._make(row).body) == wire.decode(RecordRow._make(expected[0]).body)


def outcome(decode: object, body: bytes) -> object:
    """What a decoder makes of ``body``: its rows, or its refusal."""
    try:
        return decode(body)  # type: ignore[operator]
    except BatchError as exc:
        return exc.status, exc.message


@pytest.mark.parametrize("depth", [50, 62, 63, 64, 100, 2000])
def test_nesting_is_counted_alike(depth: int) -> None:
    detail = "[" * depth + "]" * depth
    line = f'{{"kind": "event", "src": {{"run": "z2"}}, "name": "x", "detail": {{"d": {detail}}}}}'
    got = outcome(parse_batch_rows, line.encode())
    assert got == outcome(reference_rows, line.encode())
    if depth <= 50:
        assert isinstance(got, RowBatch)
    if depth >= 100:
        assert got == (400, "line 1: not JSON: nested more than 64 levels deep")
