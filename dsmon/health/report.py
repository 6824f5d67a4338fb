"""The checklist as terminal text and as the JSON document CI reads.

Both forms carry the same facts as the dashboard panel: per rule its status, title, summary,
evidence and the fix to copy, and the one headline that says what is wrong with the run
(:mod:`dsmon.health.triage`). The text form is meant to be read top to bottom in a terminal:
the headline, then the problems worst first (the run's state before measured problems before
config advice), each with the problems it explains indented under it, then the rules that
could not tell, the passes, short, and the rules that do not apply to this run (listed apart:
nothing was checked), then one summary line.
"""

from __future__ import annotations

import textwrap
from typing import Any

from dsmon.health import triage
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Checklist, CheckResult, Status

#: Exit status of ``dsmon check`` per worst verdict (issue #5: 0 all pass, 1 warn, 2 fail).
EXIT_CODES = {
    Status.NOT_APPLICABLE: 0,
    Status.PASS: 0,
    Status.UNKNOWN: 0,
    Status.WARN: 1,
    Status.FAIL: 2,
}
_ORDER = (Status.FAIL, Status.WARN, Status.UNKNOWN, Status.PASS, Status.NOT_APPLICABLE)
_LABEL = {
    Status.PASS: "PASS",
    Status.WARN: "WARN",
    Status.FAIL: "FAIL",
    Status.UNKNOWN: "UNKN",
    Status.NOT_APPLICABLE: "N/A ",
}
#: Statuses printed as title and summary only (evidence with --verbose).
_SHORT = frozenset({Status.PASS, Status.NOT_APPLICABLE})
_WIDTH = 100


def exit_code(checklist: Checklist) -> int:
    """0 when nothing warns or fails, 1 on warnings, 2 on failures."""
    return EXIT_CODES[checklist.status]


def subject_line(inputs: HealthInputs, subject: str) -> str:
    """One line naming what was checked and what is known about the run."""
    return f"dsmon check: {subject} - {facts_line(inputs)}"


def facts_line(inputs: HealthInputs) -> str:
    """What is known about the run: version, ranks and nodes, device, config source."""
    facts = inputs.facts
    parts = [f"DeepSpeed {facts.version_label}"]
    if facts.world_size:
        nodes = f" on {facts.nodes} node(s)" if facts.nodes else ""
        parts.append(f"{facts.world_size} rank(s){nodes}")
    if facts.device:
        parts.append(facts.device + (f" ({', '.join(facts.gpu_names)})" if facts.gpu_names else ""))
    cfg = inputs.config
    parts.append(f"config: {cfg.source or cfg.origin} ({cfg.origin})" if cfg else "no config")
    return ", ".join(parts)


def format_result(r: CheckResult, verbose: bool = False, depth: int = 0) -> list[str]:
    """The lines of one result: header, summary, and for problems evidence and fix.

    ``depth`` 1 is a symptom printed under its cause: indented, and saying so.
    """
    pad = "    " * depth
    head = f"{pad}{_LABEL[r.status]}  {r.rule_id}  {r.title}"
    lines = [head]
    indent = pad + " " * 6
    if depth:
        lines.append(f"{indent}(follows from the finding above)")
    lines += textwrap.wrap(r.summary, _WIDTH, initial_indent=indent, subsequent_indent=indent)
    if r.status in _SHORT and not verbose:
        return lines
    for e in r.evidence:
        lines += textwrap.wrap(
            e.text(), _WIDTH, initial_indent=indent + "- ", subsequent_indent=indent + "  "
        )
    if r.page and r.status not in _SHORT:
        lines.append(f"{indent}chart: dashboard page '{r.page}'")
    if r.fix and r.status not in _SHORT:
        lines.append(f"{indent}fix ({r.fix_lang}):")
        lines += [f"{indent}  {line}" for line in r.fix.splitlines()]
    return lines


def headline_lines(checklist: Checklist) -> list[str]:
    """``What is wrong: FAIL ranks.hang: ...`` with the finding's evidence and what it explains."""
    head = triage.triage(checklist).headline()
    label = _LABEL[head.status].strip()
    rule = f"{head.rule_id}: " if head.rule_id else ""
    lines = textwrap.wrap(
        f"What is wrong: {label} {rule}{head.text}", _WIDTH, subsequent_indent=" " * 6
    )
    for text in head.evidence_lines():
        lines += textwrap.wrap(
            text, _WIDTH, initial_indent=" " * 6 + "- ", subsequent_indent=" " * 8
        )
    if head.symptoms:
        lines.append(" " * 6 + "explains: " + ", ".join(s.rule_id for s in head.symptoms))
    return lines


def format_text(checklist: Checklist, header: str, verbose: bool = False) -> str:
    """The whole report: header, headline, problems worst first with their symptoms, totals."""
    laid = triage.triage(checklist)
    lines = [header, "", *headline_lines(checklist), ""]
    for r in laid.problems:
        lines += format_result(r, verbose)
        for s in laid.symptoms_of(r):
            lines += format_result(s, verbose, depth=1)
    for r in laid.rest:
        lines += format_result(r, verbose)
    counts = checklist.counts()
    lines += [
        "",
        "Summary: "
        + ", ".join(f"{counts[s.value]} {s.value}" for s in _ORDER)
        + f" -> {checklist.status.value}",
    ]
    return "\n".join(lines)


def to_json(checklist: Checklist, inputs: HealthInputs, subject: str) -> dict[str, Any]:
    """The ``--format json`` document: the checklist plus what was checked."""
    facts = inputs.facts
    doc = triage.to_dict(checklist)
    doc["subject"] = subject
    doc["exit_code"] = exit_code(checklist)
    doc["facts"] = {
        "deepspeed_version": facts.version_label,
        "device": facts.device,
        "world_size": facts.world_size,
        "dp_size": facts.dp_size,
        "nodes": facts.nodes,
        "gpus": list(facts.gpu_names),
        "config": None
        if inputs.config is None
        else {"source": inputs.config.source, "origin": inputs.config.origin},
    }
    return doc
