"""What is wrong with a run: the most severe finding first, each symptom under its cause.

A checklist of forty verdicts answers "what is wrong" only when its order does. During a
hang, the hang's FAIL must come before three pieces of config advice; and with one slow rank,
"communication is 35 % of a step" is not a second problem but what the others' waiting for
that rank looks like on rank 0's timers. So every surface (``dsmon check`` as text and JSON,
the dashboard's Health page) takes its order, its cause links and its one headline from here:

- problems (warn, fail) are ordered by status, then by :class:`~dsmon.health.model.Tier`
  (the run's state, then what was measured, then config advice), then the rules other rules
  name as a cause (a straggler before a communication share), then by rule order;
- a problem whose rule ``follows`` another rule that is itself a problem is a *symptom*: it is
  shown under that cause (the root of a chain: slow steps under a stall under a hang), never
  beside it;
- the headline is the first problem that is not a symptom, with its evidence and the
  symptoms it explains; without a problem it says so, and how much could not be checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsmon.health.model import Checklist, CheckResult, Status

#: Evidence lines a headline carries (the whole list stays with the finding itself).
HEADLINE_EVIDENCE = 4


def severity_key(
    result: CheckResult, order: int = 0, cause: bool = False
) -> tuple[int, int, int, int]:
    """Sort key, worst first: status, tier, whether other rules name it as a cause, order."""
    return (-result.status.severity, int(result.tier), 0 if cause else 1, order)


def causes(checklist: Checklist) -> dict[str, str]:
    """The cause of each problem that is a symptom: rule id -> the root cause's rule id.

    A problem follows the first rule it names that is a problem too and whose finding
    explains others' (``Finding.explains``); that rule's own cause, if it has one, is
    followed in turn, so a symptom sits under the root of its chain. Rules that name each
    other in a loop explain nothing: each stays a finding of its own.
    """
    problems = {r.rule_id: r for r in checklist.results if r.problem}
    direct = {}
    for rid, r in problems.items():
        cause = next(
            (c for c in r.follows if c in problems and c != rid and problems[c].explains), None
        )
        if cause is not None:
            direct[rid] = cause
    out: dict[str, str] = {}
    for rid in direct:
        seen, at = {rid}, direct[rid]
        while at in direct and at not in seen:
            seen.add(at)
            at = direct[at]
        if at not in seen:  # a root outside any loop
            out[rid] = at
    return out


@dataclass(frozen=True, slots=True)
class Triage:
    """A checklist laid out as every surface shows it.

    ``problems``: the warn and fail results that are not symptoms, worst first;
    ``symptoms``: per cause's rule id, the problems it explains, worst first; ``rest``: the
    unknown, passing and not-applicable results, in that order and rule order within each.
    """

    problems: tuple[CheckResult, ...]
    symptoms: Mapping[str, tuple[CheckResult, ...]]
    rest: tuple[CheckResult, ...]
    counts: Mapping[str, int]

    @property
    def top(self) -> CheckResult | None:
        """The headline's finding: the worst problem that no other problem explains."""
        return self.problems[0] if self.problems else None

    def symptoms_of(self, result: CheckResult) -> tuple[CheckResult, ...]:
        """The problems that follow from ``result``."""
        return self.symptoms.get(result.rule_id, ())

    def headline(self) -> Headline:
        """What is wrong with this run, in one finding (or that nothing was found)."""
        top = self.top
        if top is not None:
            return Headline(top.status, top.summary, top, self.symptoms_of(top))
        unknown = self.counts.get(Status.UNKNOWN.value, 0)
        passed = self.counts.get(Status.PASS.value, 0)
        text = f"no problem found: {passed} rules pass"
        if unknown:
            text += f", {unknown} could not tell (data missing: see why below)"
        return Headline(Status.PASS, text)


@dataclass(frozen=True, slots=True)
class Headline:
    """The one line at the top of the Health page and of ``dsmon check``.

    ``result`` is the finding it quotes (None when nothing is wrong); ``symptoms`` are the
    other problems that finding explains.
    """

    status: Status
    text: str
    result: CheckResult | None = None
    symptoms: tuple[CheckResult, ...] = ()

    @property
    def rule_id(self) -> str | None:
        """The quoted finding's rule, if any."""
        return self.result.rule_id if self.result is not None else None

    def evidence_lines(self) -> list[str]:
        """The quoted finding's first evidence, as every surface prints it."""
        if self.result is None:
            return []
        return [e.text() for e in self.result.evidence[:HEADLINE_EVIDENCE]]

    def to_dict(self) -> dict[str, Any]:
        """The ``headline`` of ``dsmon check --json``."""
        return {
            "status": self.status.value,
            "id": self.rule_id,
            "title": self.result.title if self.result is not None else None,
            "summary": self.text,
            "evidence": self.evidence_lines(),
            "explains": [s.rule_id for s in self.symptoms],
        }


def triage(checklist: Checklist) -> Triage:
    """Lay a checklist out: problems worst first with their symptoms, then the rest."""
    order = {r.rule_id: i for i, r in enumerate(checklist.results)}
    named = {c for r in checklist.results for c in r.follows}
    caused = causes(checklist)

    def key(r: CheckResult) -> tuple[int, int, int, int]:
        return severity_key(r, order[r.rule_id], r.rule_id in named)

    problems = sorted((r for r in checklist.results if r.problem), key=key)
    symptoms: dict[str, list[CheckResult]] = {}
    for r in problems:
        if r.rule_id in caused:
            symptoms.setdefault(caused[r.rule_id], []).append(r)
    rest = [
        r
        for status in (Status.UNKNOWN, Status.PASS, Status.NOT_APPLICABLE)
        for r in checklist.by_status(status)
    ]
    return Triage(
        problems=tuple(r for r in problems if r.rule_id not in caused),
        symptoms={k: tuple(v) for k, v in symptoms.items()},
        rest=tuple(rest),
        counts=checklist.counts(),
    )


def to_dict(checklist: Checklist) -> dict[str, Any]:
    """``Checklist.to_dict`` with the headline, and each result's cause and symptoms."""
    laid = triage(checklist)
    caused = causes(checklist)
    doc = checklist.to_dict()
    doc["headline"] = laid.headline().to_dict()
    for entry in doc["results"]:
        entry["cause"] = caused.get(entry["id"])
        entry["symptoms"] = [s.rule_id for s in laid.symptoms.get(entry["id"], ())]
    return doc
