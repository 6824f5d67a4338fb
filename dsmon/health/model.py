"""What a health rule says: a status, the evidence it used, and the fix to copy.

A user trusts a checklist only when every verdict shows the numbers behind it and, when
something is wrong, what to change. So a rule never returns a bare boolean: it returns a
:class:`Finding` (status, one-line summary, evidence, fix), and the registry joins it with the
rule's identity into a :class:`CheckResult` that every surface (terminal, JSON, dashboard)
renders the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any

from dsmon.ds_config.effective import Setting


class Status(StrEnum):
    """A rule's verdict.

    UNKNOWN means the data it needs is missing, not that all is well. NOT_APPLICABLE means the
    rule cannot apply to this run (the feature it checks is not used, or the run has no data of
    its kind, such as GPU samples on a CPU run): nothing was checked, so it is not a pass.
    """

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    UNKNOWN = "unknown"
    NOT_APPLICABLE = "n/a"

    @property
    def severity(self) -> int:
        """Order for "worst of": fail > warn > unknown > pass > not applicable."""
        return _SEVERITY[self]

    @property
    def label(self) -> str:
        """How surfaces name the status to people (``Pass``, ``N/A``)."""
        return "N/A" if self is Status.NOT_APPLICABLE else self.value.capitalize()


_SEVERITY = {
    Status.NOT_APPLICABLE: 0,
    Status.PASS: 1,
    Status.UNKNOWN: 2,
    Status.WARN: 3,
    Status.FAIL: 4,
}


def worst(statuses: Iterable[Status]) -> Status:
    """The most severe status, PASS for none: used to fold per-item verdicts into one."""
    return max(statuses, key=lambda s: s.severity, default=Status.PASS)


class Tier(IntEnum):
    """Which of two findings of one status is worse for the run: the lower tier.

    A hung or crashed run makes every other verdict moot until it runs again, and a measured
    problem costs time now, where config advice only may: the headline and every list put a
    hang and a crash before a slow step, and a slow step before a config key.
    """

    STATE = 0  #: the run stopped, crashed or hangs
    MEASURED = 1  #: measured on the run: step time, communication, ranks, GPUs
    ADVICE = 2  #: read from the config: what a key would change


#: The tier of a rule of each category, unless the rule names its own.
CATEGORY_TIERS = {"config": Tier.ADVICE, "runtime": Tier.MEASURED, "gpu": Tier.MEASURED}


@dataclass(frozen=True, slots=True)
class Evidence:
    """One value a rule looked at, and where it came from.

    ``where`` names the source a user can check by hand: a config path with ``(default)``
    when the key was absent, or the step range and ranks a measured number covers.
    """

    label: str
    value: Any
    where: str = ""

    @classmethod
    def of(cls, setting: Setting, label: str | None = None) -> Evidence:
        """A config setting as evidence: ``path = value (set | default | "auto" ... filled in)``."""
        return cls(label or setting.path, setting.value, setting.origin)

    def text(self) -> str:
        """``label = value (where)``, the form every surface prints."""
        where = f" ({self.where})" if self.where else ""
        return f"{self.label} = {format_value(self.value)}{where}"


def percent(share: float) -> str:
    """A share as rules write it (``0.25`` -> ``25 %``): how a threshold enters product text."""
    return f"{share * 100:g} %"


def format_value(value: Any) -> str:
    """Numbers as people write them in ds_config (5e8, not 500000000.0); others via str."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "null"
    if isinstance(value, int | float) and abs(value) >= 1e5:
        short = f"{float(value):g}"
        if float(short) == float(value):
            return short.replace("e+0", "e").replace("e+", "e")
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass(frozen=True, slots=True)
class Finding:
    """What a rule function returns: its verdict on the data it was given.

    ``fix`` is a snippet to copy (a ds_config fragment, or a line of Python or shell);
    ``fix_lang`` tells a renderer how to highlight it. ``follows`` names the rules whose
    problem would explain this one (:mod:`dsmon.health.triage` shows it under the first of
    them that is a problem): None keeps the ones the rule was registered with, ``()`` says
    that this verdict stands on its own (the rule measured around the usual cause).
    ``explains`` False says that this problem causes no other rule's, though they name its
    rule: a job stopped from outside made no step slow and no collective wait, as a crash does.
    """

    status: Status
    summary: str
    evidence: tuple[Evidence, ...] = ()
    fix: str | None = None
    fix_lang: str = "json"
    steps: tuple[int, int] | None = None
    follows: tuple[str, ...] | None = None
    explains: bool = True


@dataclass(frozen=True, slots=True)
class Rule:
    """A registered rule: its identity, what it checks, and the function that checks it.

    ``page`` names the dashboard page whose chart shows the data (``steps``, ``comms``,
    ``gpus``, ``flops``), so the checklist can link there. ``tier`` orders its problems
    against other rules' of the same status; ``follows`` names the rules whose problem
    would explain one of this rule's (a communication share inflated by a straggler, slow
    steps during a hang).
    """

    id: str
    title: str
    checks: str
    category: str
    func: Any = field(repr=False, compare=False)
    page: str | None = None
    tier: Tier = Tier.MEASURED
    follows: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class CheckResult:
    """A rule's identity joined with its finding: one line of the checklist."""

    rule_id: str
    title: str
    checks: str
    category: str
    status: Status
    summary: str
    evidence: tuple[Evidence, ...] = ()
    fix: str | None = None
    fix_lang: str = "json"
    page: str | None = None
    steps: tuple[int, int] | None = None
    tier: Tier = Tier.MEASURED
    follows: tuple[str, ...] = ()
    explains: bool = True

    @property
    def problem(self) -> bool:
        """Whether the verdict asks for action (warn or fail): what a headline can be."""
        return self.status in (Status.WARN, Status.FAIL)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form of ``dsmon check --json`` and ``GET`` consumers."""
        return {
            "id": self.rule_id,
            "title": self.title,
            "checks": self.checks,
            "category": self.category,
            "status": self.status.value,
            "summary": self.summary,
            "evidence": [
                {"label": e.label, "value": _jsonable(e.value), "where": e.where}
                for e in self.evidence
            ],
            "fix": self.fix,
            "fix_lang": self.fix_lang,
            "page": self.page,
            "steps": list(self.steps) if self.steps else None,
            "tier": self.tier.name.lower(),
        }


def _jsonable(value: Any) -> Any:
    """Evidence values as JSON: containers become lists/dicts, odd objects their str."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return str(value)


@dataclass(frozen=True, slots=True)
class Checklist:
    """All results of one evaluation, with the counts every surface shows first."""

    results: tuple[CheckResult, ...]

    @property
    def status(self) -> Status:
        """The worst verdict of the list."""
        return worst(r.status for r in self.results)

    def counts(self) -> dict[str, int]:
        """How many results have each status, every status present (0 when none)."""
        out = {s.value: 0 for s in Status}
        for r in self.results:
            out[r.status.value] += 1
        return out

    def by_status(self, status: Status) -> tuple[CheckResult, ...]:
        """The results with one status, in rule order."""
        return tuple(r for r in self.results if r.status is status)

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``dsmon check --json``."""
        return {
            "status": self.status.value,
            "counts": self.counts(),
            "results": [r.to_dict() for r in self.results],
        }
