"""CommsParser on real comms-logger output: verbose op lines and log_summary() tables.

Expected values are read by hand from the files under tests/data/ (each folder has a README.md
naming its source). Message sizes map to bytes as the nearest integer to the printed, rounded
1024-based figure (``3.56 MB`` -> round(3.56 * 1024**2) = 3732931), see dsmon.model.units.
"""

from __future__ import annotations

from collections import Counter

from locations import DATA

from dsmon.model.records import CommOpRecord, CommSummaryRecord, EventRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.parse.families.comms import CommsParser
from dsmon.parse.log import LogParser


def parse_lines(lines: list[str], file: str = "train.log") -> tuple[list[Record], Diagnostics]:
    parser = LogParser("run", file, parsers=[CommsParser()])
    return list(parser.feed_lines(lines)), parser.diag


def parse(rel: str) -> tuple[list[CommOpRecord], list[CommSummaryRecord], Diagnostics]:
    recs, diag = parse_lines((DATA / rel).read_text().splitlines(), rel)
    ops = [r for r in recs if isinstance(r, CommOpRecord)]
    rows = [r for r in recs if isinstance(r, CommSummaryRecord)]
    assert len(ops) + len(rows) == len(recs)
    return ops, rows, diag


def row_values(row: CommSummaryRecord) -> tuple[object, ...]:
    return (
        row.op,
        row.caller,
        row.msg_size_bytes,
        row.count,
        row.total_latency_ms,
        row.avg_latency_ms,
        row.algbw_avg_gbps,
        row.busbw_avg_gbps,
    )


# --- summary table --------------------------------------------------------------------------


def test_summary_table_rows() -> None:
    ops, rows, diag = parse("comms_logger/train.log")
    assert ops == []
    assert len(rows) == 11
    assert {(r.table, r.table_index) for r in rows} == {("summary", 0)}
    by_line = {r.src.line: r for r in rows}
    # "                    3.56 MB             20                  1536.33             77.09 ..."
    assert row_values(by_line[214]) == ("all_reduce", None, 3732931, 20, 1536.33, 77.09, 0.94, 0.47)
    assert row_values(by_line[205]) == ("broadcast", None, 512, 26, 220.48, 8.49, 0.0, 0.0)
    assert row_values(by_line[216]) == (
        "all_gather_into_tensor",
        None,
        1866465,  # 1.78 MB
        20,
        918.4,
        46.07,
        0.75,
        0.38,
    )
    assert row_values(by_line[218]) == ("log_summary_barrier", None, 0, 1, 0.51, 0.51, 0.0, 0.0)
    assert by_line[214].total_straggler_ms is None and by_line[214].step is None
    assert by_line[214].ts == "2026-11-29T14:12:04.408"  # the last stamped line before the table
    assert [r.op for r in rows].count("broadcast") == 7
    assert diag.unparsed == {}


def test_table_ends_at_the_first_foreign_line() -> None:
    """The script's ``[train.py] done`` line after the table is not an op: the table is over."""
    lines = (DATA / "comms_logger/train.log").read_text().splitlines()
    assert lines[218].startswith("[train.py] done")
    # a real row of the table, repeated after the end, is no longer read as part of it
    recs, _ = parse_lines(lines[:219] + [lines[213]] + lines[219:])
    assert len(recs) == 11


def test_debug_table_has_callers_and_verbose_lines() -> None:
    ops, rows, diag = parse("comms_logger_verbose/train.log")
    assert len(ops) == 80
    assert len(rows) == 11
    first = ops[0]
    assert (first.src.line, first.src.rank, first.ts) == (28, 0, "2026-11-29T14:12:13.192")
    assert (first.op, first.caller, first.latency_ms) == ("broadcast", "_broadcast_model", 0.68)
    assert (first.msg_size_bytes, first.algbw_gbps, first.busbw_gbps) == (262144, 3.09, 3.09)
    assert Counter((o.op, o.caller) for o in ops) == {
        ("broadcast", "_broadcast_model"): 53,
        ("all_reduce", "allreduce_bucket"): 8,
        ("all_reduce", "get_grad_norm_direct"): 8,
        ("all_gather_into_tensor", "all_gather_into_tensor_dp_groups"): 8,
        ("log_summary_barrier", "log_summary"): 2,
        ("barrier", "main"): 1,
    }
    by_line = {r.src.line: r for r in rows}
    assert row_values(by_line[277]) == (
        "all_reduce",
        "allreduce_bucket",
        3732931,
        8,
        490.23,
        61.08,
        1.01,
        0.5,
    )
    assert row_values(by_line[279]) == (
        "all_reduce",
        "get_grad_norm_direct",
        4,
        8,
        20.49,
        2.51,
        0.0,
        0.0,
    )
    assert by_line[283].caller == "log_summary"
    assert diag.unparsed == {}


def test_zero3_table_sizes() -> None:
    _, rows, _ = parse("comms_z3_overlap_true/train.log")
    assert len(rows) == 27
    assert Counter(r.op for r in rows) == {
        "broadcast": 11,
        "barrier": 1,
        "all_gather_into_tensor": 12,
        "reduce_scatter_tensor": 1,
        "all_reduce": 1,
        "log_summary_barrier": 1,
    }
    assert [r.op for r in rows][10:13] == ["broadcast", "barrier", "all_gather_into_tensor"]
    sizes = [r.msg_size_bytes for r in rows if r.op == "all_gather_into_tensor"]
    assert sizes == [
        256,
        512,
        768,
        1024,
        16384,
        32768,
        98304,
        99072,
        131072,
        131328,
        132096,
        1835008,
    ]
    scatter = [r for r in rows if r.op == "reduce_scatter_tensor"]
    assert [row_values(r) for r in scatter] == [
        ("reduce_scatter_tensor", None, 3732931, 20, 1615.19, 81.03, 0.95, 0.47)
    ]
    assert rows[0].msg_size_bytes == 0 and rows[0].total_latency_ms == 54.59  # "0B"


def test_two_tables_in_one_file_and_old_op_names() -> None:
    ops, rows, diag = parse("comms_v07_docs/comms.log")
    assert [(o.op, o.latency_ms, o.msg_size_bytes) for o in ops] == [
        ("reduce_scatter_base", 9.46, 711836303),  # 678.86 MB
        ("all_gather_base", 0.11, 6291456),  # 6.0 MB
        ("all_gather_base", 0.08, 6291456),
    ]
    assert [o.src.rank for o in ops] == [0, 0, 0]
    assert [(o.algbw_gbps, o.busbw_gbps) for o in ops][0] == (1204.52, 1129.23)
    assert [r.table_index for r in rows] == [0, 0, 0, 1, 1, 1]
    assert row_values(rows[1]) == ("broadcast", None, 103022592, 1, 8317.12, 8317.12, 0.2, 0.19)
    assert row_values(rows[5]) == (
        "reduce_scatter_base",
        "reduce_scatter_fn",
        711836303,
        80,
        1527.17,
        13.94,
        1211.75,
        1136.01,
    )
    assert diag.unparsed == {}


# --- old verbose form ------------------------------------------------------------------------


def test_old_rank_prefixed_verbose_lines() -> None:
    ops, rows, diag = parse("comms_v08_verbose/train.log")
    assert rows == []
    assert len(ops) == 8
    first = ops[0]
    assert (first.src.line, first.src.rank, first.ts) == (2, 0, "2023-01-11T13:27:07.209")
    assert (first.op, first.caller) == ("broadcast", "_broadcast_model")
    assert (first.latency_ms, first.msg_size_bytes) == (4138.4, 1147)  # 1.12 KB
    assert (first.algbw_gbps, first.busbw_gbps) == (0.0, 0.0)
    assert [(o.msg_size_bytes, o.algbw_gbps) for o in ops[3:5]] == [(256, 0.02), (589824, 28.76)]
    assert diag.unparsed == {}


# --- damage ----------------------------------------------------------------------------------


def test_verbose_line_wrapped_by_the_terminal_is_joined() -> None:
    """comms_logger_verbose line 28 cut at column 150, as a narrow terminal wraps it."""
    lines = (DATA / "comms_logger_verbose/train.log").read_text().splitlines()
    wrapped = lines[:27] + [lines[27][:150], lines[27][150:]] + lines[28:]
    recs, diag = parse_lines(wrapped)
    ops = [r for r in recs if isinstance(r, CommOpRecord)]
    assert len(ops) == 80
    (first,) = [r for r in ops if r.src.line == 28]
    assert (first.latency_ms, first.msg_size_bytes, first.busbw_gbps) == (0.68, 262144, 3.09)
    assert diag.unparsed == {}


def test_verbose_line_cut_for_good_keeps_what_it_has() -> None:
    """comms_logger_verbose line 28 cut at column 150 with its continuation lost: the next line
    has its own logger header, so nothing will be joined."""
    lines = (DATA / "comms_logger_verbose/train.log").read_text().splitlines()
    recs, diag = parse_lines(lines[:27] + [lines[27][:150]] + lines[28:])
    ops = [r for r in recs if isinstance(r, CommOpRecord)]
    assert len(ops) == 80
    (cut,) = [r for r in ops if r.src.line == 28]
    assert (cut.op, cut.latency_ms, cut.msg_size_bytes, cut.busbw_gbps) == (
        "broadcast",
        0.68,
        None,
        None,
    )
    assert diag.unparsed == {"comm_op": 1}
    assert diag.examples["comm_op"][0].startswith("train.log:28: field 'busbw (Gbps)': ")


def test_damaged_row_is_counted_and_the_table_goes_on() -> None:
    """comms_logger with the count of the 1.5 KB broadcast row damaged."""
    lines = (DATA / "comms_logger/train.log").read_text().splitlines()
    lines[205] = lines[205].replace("4                   29.53", "four                29.53")
    recs, diag = parse_lines(lines)
    assert len([r for r in recs if isinstance(r, CommSummaryRecord)]) == 10
    assert diag.unparsed == {"comm_summary": 1}
    assert diag.examples["comm_summary"][0].startswith("train.log:206: ")
    (told,) = [r for r in recs if isinstance(r, EventRecord)]  # the loss, for the Health page
    assert told.name == "unparsed" and told.src.line == 206
    assert told.detail == {
        "kind": "comm_summary",
        "count": 1,
        "first": diag.examples["comm_summary"][0],
    }


def test_damaged_verbose_value_is_counted_and_named() -> None:
    lines = (DATA / "comms_v08_verbose/train.log").read_text().splitlines()
    lines[1] = lines[1].replace("msg size: 1.12 KB", "msg size: 1.12 parsecs")
    recs, diag = parse_lines(lines)
    (first,) = [r for r in recs if isinstance(r, CommOpRecord) and r.src.line == 2]
    assert first.msg_size_bytes is None and first.latency_ms == 4138.4
    assert diag.unparsed == {"comm_op": 1}
    assert diag.examples["comm_op"][0].startswith("train.log:2: field 'msg size': ")


def test_straggler_table_in_deepspeeds_layout() -> None:
    """No real ``show_straggler=True`` output was found to copy, so this renders the layout with
    DeepSpeed's own format strings (deepspeed/utils/comms_logging.py, ``log_all``) around the real
    all_reduce figures of comms_logger; the summary table before it is the real one."""
    lines = (DATA / "comms_logger/train.log").read_text().splitlines()
    header = (
        f"{'Comm. Op': <20}{'Message Size': <20}{'Count': <20}{'Total comm lat(ms)': <20}"
        f"{'Total straggler(ms)': <20}{'Avg comm lat(ms)': <20}{'Avg straggler(ms)': <20}"
    )
    row = f"{' ': <20}{'3.56 MB': <20}{20: <20}{1536.33: <20.2f}{12.5: <20.2f}{77.09: <20.2f}"
    row += f"{0.62: <20.2f}"
    straggler = ["_" * 31, "Breakdown with straggler effect", "-" * 31, header, "all_reduce", row]
    recs, diag = parse_lines(lines[:218] + straggler + lines[218:])
    rows = [r for r in recs if isinstance(r, CommSummaryRecord)]
    assert len(rows) == 12
    last = rows[-1]
    assert (last.table, last.table_index, last.op, last.msg_size_bytes) == (
        "straggler",
        0,
        "all_reduce",
        3732931,
    )
    assert (last.total_latency_ms, last.total_straggler_ms) == (1536.33, 12.5)
    assert (last.avg_latency_ms, last.avg_straggler_ms) == (77.09, 0.62)
    assert last.algbw_avg_gbps is None
    assert diag.unparsed == {}
