"""observe.unread_lines: lines of a kind dsmon reads that it could not read are shown, not lost.

The logs are real (tests/data, each folder's README names its source); where a line is damaged
to make it unreadable, the test says how.
"""

from __future__ import annotations

from locations import DATA

from dsmon.health import Status, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import CheckResult
from dsmon.model.records import EventRecord, IterationRecord
from dsmon.parse.log import parse_text

LOG = DATA / "megatron_ds095_llama" / "train.log"


def unread_rule(text: str) -> CheckResult:
    recs, _ = parse_text(text, run="r", file="train.log")
    (result,) = [
        c
        for c in evaluate(inputs_from_records(recs, run="r")).results
        if c.rule_id == "observe.unread_lines"
    ]
    return result


def test_a_log_read_whole_passes() -> None:
    result = unread_rule(LOG.read_text())
    assert result.status is Status.PASS


def test_an_unreadable_iteration_line_is_counted_and_shown() -> None:
    """Megatron-DeepSpeed 0.9.5's log with two iteration lines' loss damaged (``lm loss: n/a``):
    neither makes a record, and the checklist says so, with the first line."""
    lines = LOG.read_text().splitlines()
    damaged = [i for i, ln in enumerate(lines) if "lm loss: " in ln][:2]
    for i in damaged:
        lines[i] = lines[i].replace("lm loss: 1.0", "lm loss: n/a")
    text = "\n".join(lines)
    recs, diag = parse_text(text, run="r", file="train.log")
    assert diag.unparsed == {"megatron_iteration": 2}
    megatron = [r for r in recs if isinstance(r, IterationRecord) and r.fmt == "megatron"]
    assert len(megatron) == 4  # of six
    told = [r for r in recs if isinstance(r, EventRecord) and r.name == "unparsed"]
    # told at the first count (once the lines around it are settled) and at the end
    assert [e.detail["count"] for e in told] == [1, 2] and told[1].src.line == len(lines)
    assert told[0].detail["first"].startswith(f"train.log:{damaged[0] + 1}:  iteration        1/")
    result = unread_rule(text)
    assert result.status is Status.WARN
    assert result.summary.startswith(
        f"2 line(s) of the run's output could not be read (Megatron iteration 2); "
        f"the first: train.log:{damaged[0] + 1}:  iteration        1/    2500 |"
    )
    assert ("Megatron iteration lines not read", 2) in [(e.label, e.value) for e in result.evidence]


def test_counts_of_two_files_add_up() -> None:
    """Two ranks' copies of the damaged log: each file's count once, summed."""
    lines = LOG.read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if "lm loss: " in ln)
    lines[i] = lines[i].replace("lm loss: 1.0", "lm loss: n/a")
    text = "\n".join(lines)
    recs = [
        *parse_text(text, run="r", file="rank0.log")[0],
        *parse_text(text, run="r", file="rank1.log")[0],
    ]
    (result,) = [
        c
        for c in evaluate(inputs_from_records(recs, run="r")).results
        if c.rule_id == "observe.unread_lines"
    ]
    assert result.status is Status.WARN
    assert "(Megatron iteration 2)" in result.summary
    assert "the first: rank0.log:" in result.summary


def test_nothing_read_is_not_a_pass() -> None:
    """A config judged alone read no output: the rule does not apply (nothing was checked)."""
    (result,) = [
        c
        for c in evaluate(inputs_from_records([], run="r")).results
        if c.rule_id == "observe.unread_lines"
    ]
    assert result.status is Status.NOT_APPLICABLE


def test_a_value_left_out_is_not_an_unread_line() -> None:
    """The real profile's root says its forward took "1.8 Gs" (57 years): the value is left out
    of the record and told as such, but every line was read, so the rule passes."""
    text = (DATA / "flops_detailed_stdout" / "train.log").read_text()
    recs, diag = parse_text(text, run="r", file="train.log")
    told = [r for r in recs if isinstance(r, EventRecord) and r.name == "unparsed"]
    assert [r.detail["kind"] for r in told] == ["value out of range"]
    assert told[0].message.startswith("1 value(s) out of range left out of their records")
    assert unread_rule(text).status is Status.PASS
