"""Comms-logger output from real runs: verbose per-op lines (v0.9.2, ``rank=0 |`` prefix, double
spaces) and ``log_summary()`` tables (an indented 2025 XPU table with negative totals, a PR's
straggler-column variant). Expected values are read off the excerpts by hand
(../shared/corpus/field, excerpts 01, 34, 49, 50, 51)."""

from __future__ import annotations

from field_logs import lines, of, parse_field

from dsmon.model.records import (
    CommOpRecord,
    CommSummaryRecord,
    EventRecord,
    LossScaleRecord,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.parse.base import OUT_OF_RANGE
from dsmon.parse.log import parse_text

KB, MB = 1024, 1024 * 1024


def test_01_verbose_reduce_ops_with_hysteresis_and_old_timers() -> None:
    recs, diag = parse_field(1)
    assert sum(diag.unparsed.values()) == 0
    ops = of(recs, CommOpRecord)
    assert len(ops) == 40
    first = ops[0]  # line 3
    assert (first.op, first.caller, first.src.rank) == ("reduce", None, 0)
    assert first.latency_ms == 0.05 and first.msg_size_bytes == 372  # "372.0 B"
    assert (first.algbw_gbps, first.busbw_gbps) == (0.07, 0.07)  # "0.07  | busbw"
    assert ops[1].msg_size_bytes == round(3.89 * KB)
    assert ops[2].msg_size_bytes == round(20.32 * KB) and ops[2].latency_ms == 0.26
    assert {o.op for o in ops} == {"reduce", "all_reduce"}
    hyst, over = of(recs, LossScaleRecord)
    assert (hyst.event, hyst.attempted_scale, hyst.hysteresis) == ("hysteresis", 65536, 1)
    assert (over.event, over.attempted_scale, over.new_scale) == ("overflow", 65536, 32768)
    micro, glob = of(recs, TimerRecord)
    assert micro.group == "micro" and micro.legacy and micro.values_ms["fwd_microstep"] == 17.97
    assert glob.group == "global" and set(glob.values_ms.values()) == {0.0}


def test_34_init_broadcasts_between_c10d_barrier_lines() -> None:
    recs, diag = parse_field(34)
    assert sum(diag.unparsed.values()) == 0
    (version,) = of(recs, EventRecord)
    assert version.name == "deepspeed_version" and version.detail["version"] == "0.9.2"
    ops = of(recs, CommOpRecord)
    assert [o.op for o in ops] == ["broadcast"] * 8
    assert [o.msg_size_bytes for o in ops] == [576, 64, 36 * KB, 128, 288 * KB, 32, 320, 20]
    assert ops[0].latency_ms == 3907.38 and ops[0].ts == "2023-05-15T14:37:35.318"
    assert (ops[4].algbw_gbps, ops[4].busbw_gbps) == (23.04, 23.04)


def test_49_indented_xpu_summary_table_with_negative_totals() -> None:
    recs, diag = parse_field(49)
    # four totals printed negative: no duration, left out and counted (dsmon.model.check.fit)
    assert diag.unparsed == {OUT_OF_RANGE: 4}
    rows = of(recs, CommSummaryRecord)
    assert len(rows) == 19
    assert {(r.table, r.table_index) for r in rows} == {("summary", 0)}
    by_op: dict[str, list[CommSummaryRecord]] = {}
    for r in rows:
        by_op.setdefault(r.op, []).append(r)
    assert [len(by_op[op]) for op in by_op] == [6, 9, 2, 1, 1]
    first = by_op["broadcast"][0]
    assert (first.msg_size_bytes, first.count) == (4 * KB, 25)
    assert (first.total_latency_ms, first.avg_latency_ms) == (980.95, 0.33)
    assert (first.algbw_avg_gbps, first.busbw_avg_gbps) == (0.11, 0.11)  # "tput_avg (Gbps)"
    assert by_op["broadcast"][-1].msg_size_bytes == 1000 * MB
    big = by_op["all_reduce"][5]
    assert big.msg_size_bytes == 874 * MB
    assert big.total_latency_ms is None  # printed -259904.95: a gap, not a duration
    assert (big.avg_latency_ms, big.busbw_avg_gbps) == (246.25, 59.53)
    assert by_op["all_reduce"][0].msg_size_bytes == 4  # "4.0 B"
    assert by_op["all_gather_into_tensor"][1].total_latency_ms is None  # printed -527532.78
    assert by_op["barrier"][0].msg_size_bytes == 0  # "0B"
    (end,) = by_op["log_summary_barrier"]
    assert (end.count, end.total_latency_ms, end.avg_latency_ms) == (1, 498.65, 498.65)
    assert first.ts == "2025-11-10T12:29:58.136"  # the ezpz header just before the table


def test_50_straggler_column_beside_total_latency() -> None:
    recs, diag = parse_field(50)
    assert sum(diag.unparsed.values()) == 0
    (row,) = of(recs, CommSummaryRecord)
    assert (row.op, row.msg_size_bytes, row.count) == ("broadcast", round(4.94 * KB), 1)
    assert row.total_latency_ms == 0.24
    assert row.total_straggler_ms == 0.06  # "Total straggler(ms)", one space before the next
    assert row.avg_latency_ms == 0.24
    assert (row.algbw_avg_gbps, row.busbw_avg_gbps) == (0.17, 0.17)


def test_51_last_step_ops_timers_and_tqdm_glued_end() -> None:
    recs, diag = parse_field(51)
    assert sum(diag.unparsed.values()) == 0
    ops = of(recs, CommOpRecord)
    assert [o.op for o in ops] == ["reduce"] * 4 + ["all_reduce"] * 2 + ["all_gather"]
    gather = ops[-1]
    assert (gather.latency_ms, gather.msg_size_bytes) == (0.25, round(20.32 * KB))
    assert (gather.algbw_gbps, gather.busbw_gbps) == (10.84, 10.16)
    assert all(o.step == 150 for o in ops)  # the step that "step=150" names
    (step,) = of(recs, StepRecord)
    assert (step.step, step.skipped, step.mom) == (150, 2, ((0.8, 0.999),))
    (tput,) = of(recs, ThroughputRecord)
    assert tput.samples_per_s == 621.6258695591763 and tput.mem_allocated_bytes == 0
    groups = [t.group for t in of(recs, TimerRecord)]
    assert groups == ["zero_optimizer", "micro", "global"]


def test_50_table_pasted_with_a_leading_backtick() -> None:
    """The same table as an issue shows it when the paste opens an inline code span."""
    text = "`" + "\n".join(lines(50)) + "`"
    recs, diag = parse_text(text)
    (row,) = of(recs, CommSummaryRecord)
    assert (row.op, row.total_latency_ms, row.total_straggler_ms) == ("broadcast", 0.24, 0.06)
    assert sum(diag.unparsed.values()) == 0


def test_34_verbose_line_with_re_spaced_labels_reads_the_same() -> None:
    line = lines(34)[22]  # "... comm op: broadcast | time (ms): 0.10 | msg size: 288.0 KB | ..."
    assert "msg size: 288.0 KB | algbw (Gbps): 23.04" in line
    respaced = line.replace("algbw (Gbps)", "algbw (G" + " " * 11 + "bps)").replace(
        "msg size", "msg    size"
    )
    recs, diag = parse_text(respaced)
    (op,) = of(recs, CommOpRecord)
    assert (op.msg_size_bytes, op.algbw_gbps, op.busbw_gbps) == (288 * KB, 23.04, 23.04)
    assert sum(diag.unparsed.values()) == 0
