"""Health: the tuning checklist with status, evidence and the fix to copy, updated live."""

from __future__ import annotations

from datetime import datetime

import streamlit as st
from streamlit.errors import StreamlitAPIException

from dsmon.health.model import CheckResult, Status
from dsmon.view.health_panel import (
    COUNT_ORDER,
    PAGE_SCRIPTS,
    SECTIONS,
    Panel,
    badge,
    by_category,
    panel,
)
from ui.page import live_body, page_header, page_view
from ui.text import md_escape

view = page_view(__file__)


def counts(p: Panel) -> None:
    """One metric per status, worst first; the rules that do not apply last, apart."""
    c = p.checklist.counts()
    cols = st.columns(len(COUNT_ORDER))
    for col, status in zip(cols, COUNT_ORDER, strict=True):
        col.metric(status.label, c[status.value])


def link(result: CheckResult) -> None:
    """A link to the page whose chart shows the rule's data."""
    script = PAGE_SCRIPTS.get(result.page or "")
    if script is None:
        return
    try:
        st.page_link(script, label=f"See the chart: {result.page}", icon=":material/insights:")
    except StreamlitAPIException:  # the page is not in this app's navigation
        st.caption(f"Chart: the {result.page} page")


#: The headline's box per status: what is wrong shows in the colour of its verdict.
HEADLINE_BOX = {Status.FAIL: st.error, Status.WARN: st.warning, Status.PASS: st.success}


def headline(p: Panel) -> None:
    """What is wrong with this run: the worst finding no other explains, with its evidence."""
    head = p.laid.headline()
    rule = f" `{head.rule_id}`" if head.rule_id else ""
    lines = [f"**What is wrong with this run:** {badge(head.status)}{rule} {md_escape(head.text)}"]
    lines += [f"- {md_escape(text)}" for text in head.evidence_lines()]
    if head.symptoms:
        lines.append(
            "\n**It also explains:** "
            + "; ".join(f"`{s.rule_id}` ({md_escape(s.summary)})" for s in head.symptoms)
        )
    HEADLINE_BOX.get(head.status, st.info)("\n".join(lines))


def details(result: CheckResult) -> None:
    """Summary, what the rule checks, evidence, fix and chart link of one result."""
    st.markdown(md_escape(result.summary))
    st.caption(result.checks)
    if result.evidence:
        st.markdown("\n".join(f"- {md_escape(e.text())}" for e in result.evidence))
    if result.fix and result.status is not Status.PASS:
        st.code(result.fix, language=result.fix_lang if result.fix_lang != "text" else None)
    if result.status is not Status.PASS:
        link(result)


def item(result: CheckResult, symptoms: tuple[CheckResult, ...] = ()) -> None:
    """One rule: badge and title as the expander label; inside, its details and symptoms.

    The problems that follow from this one are shown inside it, under its own details: a
    straggler's inflated communication share is not a second problem beside it.
    """
    opened = result.status in (Status.FAIL, Status.WARN)
    with st.expander(
        f"{badge(result.status)} **{result.title}** `{result.rule_id}`", expanded=opened
    ):
        details(result)
        for symptom in symptoms:
            st.markdown(
                f"**Follows from it:** {badge(symptom.status)} **{symptom.title}** "
                f"`{symptom.rule_id}`"
            )
            details(symptom)


def collapsed(status: Status, heading: str, results: list[CheckResult]) -> None:
    """Rules of one status in a section, together in one collapsed list.

    Each rule is one line of a single markdown element (a rule that could not tell with its
    evidence and fix under it): a browser draws one element, not the five of a rule's box.
    """
    with st.expander(f"{badge(status)} {len(results)} {heading}", expanded=False):
        st.markdown("\n".join(line for r in results for line in listed(r)))
        for r in results:
            if r.status is Status.UNKNOWN and r.fix and not one_line(r.fix):
                st.caption(f"Fix for `{r.rule_id}`:")
                st.code(r.fix, language=r.fix_lang if r.fix_lang != "text" else None)


def listed(result: CheckResult) -> list[str]:
    """A rule's lines in a collapsed list: title, id and summary.

    A rule that could not tell also has its evidence (what it did see, such as the FLOPS
    achieved when the GPU's peak is unknown) and a one-line fix under it; a longer fix
    follows the list (:func:`collapsed`).
    """
    lines = [f"- **{result.title}** `{result.rule_id}`: {md_escape(result.summary)}"]
    if result.status is not Status.UNKNOWN:
        return lines
    lines += [f"    - {md_escape(e.text())}" for e in result.evidence]
    if result.fix and one_line(result.fix):
        lines.append(f"    - fix: `{result.fix}`")
    elif result.fix:
        lines.append("    - fix: below the list")
    return lines


def one_line(fix: str) -> bool:
    """Whether a fix can be shown as inline code: one line, no backtick."""
    return "\n" not in fix and "`" not in fix


def render() -> None:
    """The whole checklist for the selected run: problems first, then what passes."""
    p = panel(view.frames, view.run, view.cutoff, datetime.now())
    st.caption(md_escape(f"Run {view.run}: {p.subject}"))
    headline(p)
    counts(p)
    for category, heading in SECTIONS:
        section = by_category(p.laid, category)
        if not any(section):
            continue
        st.subheader(heading)
        for result in section.problems:
            item(result, p.laid.symptoms_of(result))
        if section.unknown:
            collapsed(Status.UNKNOWN, "rules could not tell", section.unknown)
        if section.passing:
            collapsed(Status.PASS, "rules pass", section.passing)
        if section.not_applicable:
            collapsed(
                Status.NOT_APPLICABLE, "rules do not apply to this run", section.not_applicable
            )


page_header("Health", view)
live_body(view, render)
