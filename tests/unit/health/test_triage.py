"""What is wrong with a run (dsmon.health.triage): worst first, symptoms under their cause.

The ordering and the links on made-up verdicts here; on real DeepSpeed runs in
tests/unit/health/test_verdicts.py.
"""

from __future__ import annotations

from dsmon.health.model import Checklist, CheckResult, Status, Tier
from dsmon.health.report import format_text
from dsmon.health.triage import causes, to_dict, triage


def result(
    rule_id: str,
    status: Status,
    tier: Tier = Tier.MEASURED,
    follows: tuple[str, ...] = (),
    category: str = "runtime",
) -> CheckResult:
    return CheckResult(
        rule_id, f"title of {rule_id}", "checks", category, status, f"{rule_id} says so",
        tier=tier, follows=follows,
    )  # fmt: skip


def test_a_hang_comes_before_config_advice_and_slow_steps() -> None:
    checklist = Checklist(
        (
            result("zero.overlap_comm", Status.WARN, Tier.ADVICE, category="config"),
            result("schema.keys", Status.FAIL, Tier.ADVICE, category="config"),
            result("steps.regression", Status.WARN),
            result("ranks.hang", Status.FAIL, Tier.STATE),
            result("gpu.memory", Status.UNKNOWN),
        )
    )
    laid = triage(checklist)
    assert [r.rule_id for r in laid.problems] == [
        "ranks.hang",  # a fail of the run's state
        "schema.keys",  # a fail, config
        "steps.regression",  # a warning measured on the run ...
        "zero.overlap_comm",  # ... before a warning of advice
    ]
    assert laid.headline().rule_id == "ranks.hang"
    assert [r.rule_id for r in laid.rest] == ["gpu.memory"]


def test_a_symptom_sits_under_the_root_of_its_chain() -> None:
    checklist = Checklist(
        (
            result("comm.share", Status.WARN, follows=("ranks.straggler",)),
            result("steps.regression", Status.WARN, follows=("run.stalled", "ranks.straggler")),
            result("run.stalled", Status.FAIL, Tier.STATE, follows=("ranks.hang",)),
            result("ranks.hang", Status.FAIL, Tier.STATE, follows=("run.errors",)),
            result("run.errors", Status.PASS, Tier.STATE),
            result("ranks.straggler", Status.PASS),
        )
    )
    # run.errors passes and the straggler rule passes: neither is a cause here
    assert causes(checklist) == {"steps.regression": "ranks.hang", "run.stalled": "ranks.hang"}
    laid = triage(checklist)
    assert [r.rule_id for r in laid.problems] == ["ranks.hang", "comm.share"]
    assert [r.rule_id for r in laid.symptoms_of(laid.problems[0])] == [
        "run.stalled",
        "steps.regression",
    ]
    head = laid.headline()
    assert head.status is Status.FAIL and head.text == "ranks.hang says so"
    doc = to_dict(checklist)
    assert doc["headline"]["id"] == "ranks.hang"
    assert doc["headline"]["explains"] == ["run.stalled", "steps.regression"]
    by_id = {r["id"]: r for r in doc["results"]}
    assert by_id["steps.regression"]["cause"] == "ranks.hang"
    assert by_id["ranks.hang"]["symptoms"] == ["run.stalled", "steps.regression"]
    assert by_id["comm.share"]["cause"] is None  # its cause passes: it stands on its own


def test_rules_naming_each_other_do_not_loop() -> None:
    checklist = Checklist(
        (
            result("a.one", Status.WARN, follows=("a.two",)),
            result("a.two", Status.WARN, follows=("a.one",)),
        )
    )
    assert causes(checklist) == {}  # a circle: no root, so no symptom
    laid = triage(checklist)
    # no finding is lost: whatever the links say, every problem is shown somewhere
    shown = {r.rule_id for r in laid.problems} | {
        s.rule_id for group in laid.symptoms.values() for s in group
    }
    assert shown == {"a.one", "a.two"}


def test_without_a_problem_the_headline_says_what_could_not_be_told() -> None:
    checklist = Checklist(
        (result("comm.share", Status.UNKNOWN), result("steps.spikes", Status.PASS))
    )
    head = triage(checklist).headline()
    assert head.status is Status.PASS and head.result is None
    assert (
        head.text
        == "no problem found: 1 rules pass, 1 could not tell (data missing: see why below)"
    )
    text = format_text(checklist, "dsmon check: x")
    assert text.splitlines()[2].startswith("What is wrong: PASS no problem found")


def test_the_text_report_indents_a_symptom_under_its_cause() -> None:
    checklist = Checklist(
        (
            result("comm.share", Status.WARN, follows=("ranks.straggler",)),
            result("ranks.straggler", Status.WARN),
        )
    )
    lines = format_text(checklist, "dsmon check: x").splitlines()
    assert lines[2] == "What is wrong: WARN ranks.straggler: ranks.straggler says so"
    assert lines[3] == "      explains: comm.share"
    at = lines.index("WARN  ranks.straggler  title of ranks.straggler")
    assert lines[at + 2] == "    WARN  comm.share  title of comm.share"
    assert lines[at + 3] == "          (follows from the finding above)"
