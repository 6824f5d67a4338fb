"""AutotunerParser on real autotuner output: the results table in a log, and progress lines.

Data (see each folder's README.md): autotune_gpt2_large is a published ``summary.txt``;
autotune_issue_lines holds autotuner log lines pasted in public issues; flops_z0 is a corpus run
whose log lines stand in for the other output a log holds between the table and its end. Tests
that reshape a real file say so; the lines themselves are never invented.
"""

from __future__ import annotations

from locations import DATA

from dsmon.model.records import AutotuneSummaryRecord, EventRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.parse.families.autotuner import MAX_AWAIT, AutotunerParser
from dsmon.parse.log import LogParser, parse_text


def lines(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").splitlines()


def autotuner_only(text_lines: list[str]) -> tuple[list[Record], Diagnostics]:
    parser = LogParser("r", "train.log", parsers=[AutotunerParser()])
    return list(parser.feed_lines(text_lines)), parser.diag


def autotuning_events(recs: list[Record]) -> list[EventRecord]:
    return [r for r in recs if isinstance(r, EventRecord) and r.name == "autotuning"]


def test_directory_lines_and_a_cut_resources_line() -> None:
    recs, diag = parse_text("\n".join(lines("autotune_issue_lines/startup.log")), "r", "s.log")
    events = autotuning_events(recs)
    assert [(e.detail["stage"], e.detail.get("which"), e.detail.get("path")) for e in events] == [
        ("directory", "experiments", "autotuning_exps"),  # autotuner.py:71
        ("directory", "results", "autotuning_exps"),  # autotuner.py:84
    ]
    assert [e.src.line for e in events] == [3, 4]
    assert events[1].ts == "2023-12-02T13:51:47.931"
    # "active_resources = Ordere": cut by the paste, so no resources are made up
    assert all(e.detail["stage"] != "resources" for e in events)
    assert diag.unparsed == {}


def test_no_optimal_configuration_found() -> None:
    (event,) = autotuning_events(autotuner_only(lines("autotune_issue_lines/no_optimal.log"))[0])
    assert event.detail == {"stage": "no_optimal"}
    assert event.ts == "2023-12-04T11:52:08.378"


def test_table_in_a_log_waits_for_its_completion_line() -> None:
    """summary.txt as the autotuner prints it in a log: table, then other output, then the
    completion line; a few real log lines of flops_z0 stand in for the other output."""
    table = lines("autotune_gpt2_large/summary.txt")
    other = lines("flops_z0/train.log")[:10]
    recs, diag = autotuner_only(table[:7] + other + table[7:])
    rows = [r for r in recs if isinstance(r, AutotuneSummaryRecord)]
    assert [r.tuning_space for r in rows] == ["z0", "z1", "z2", "z3", "global"]
    assert {(r.tuning_duration_s, r.total_experiments) for r in rows} == {(1653.988447, 13)}
    assert [r.src.line for r in rows] == [3, 4, 5, 6, 7]
    assert rows[3].best_metric_val == 0.0  # "| z3 | 1 | 0 | z3_gas1_tmbspg3 |"
    assert diag.unparsed == {}


def test_table_whose_completion_line_never_comes() -> None:
    """The same table with more than MAX_AWAIT other lines after it, then the end of input."""
    table = lines("autotune_gpt2_large/summary.txt")
    other = lines("flops_z0/train.log")
    assert len(other) > MAX_AWAIT
    recs, _ = autotuner_only(table[:7] + other)
    rows = [r for r in recs if isinstance(r, AutotuneSummaryRecord)]
    assert [r.num_experiments for r in rows] == [4, 5, 3, 1, 13]
    assert {r.tuning_duration_s for r in rows} == {None}
    recs, _ = autotuner_only(table[:7])  # the input ends right after the table
    assert [r.best_exp_name for r in recs if isinstance(r, AutotuneSummaryRecord)][-1] == (
        "z1_gas1_tmbspg3"
    )


def test_a_second_table_completes_the_first() -> None:
    """summary.txt twice in a row (a second tuning in the same log), the first without its
    completion line."""
    table = lines("autotune_gpt2_large/summary.txt")
    recs, _ = autotuner_only(table[:7] + table)
    rows = [r for r in recs if isinstance(r, AutotuneSummaryRecord)]
    assert len(rows) == 10
    assert [r.tuning_duration_s for r in rows[:5]] == [None] * 5
    assert [r.total_experiments for r in rows[5:]] == [13] * 5
    assert [r.src.line for r in rows[5:]] == [10, 11, 12, 13, 14]


def test_pipe_tables_of_others_are_not_taken() -> None:
    """The separator and rows of the table without its header: someone else's table."""
    recs, diag = autotuner_only(lines("autotune_gpt2_large/summary.txt")[1:7])
    assert recs == [] and diag.unparsed == {}
