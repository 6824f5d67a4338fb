"""The one place rules are registered, and the loop that evaluates them.

Adding a rule is writing one function decorated with :func:`rule` in a module listed in
:data:`RULE_MODULES` (one module of :mod:`dsmon.health.rules` per topic) and its test. Every surface (``dsmon check``, the dashboard panel)
calls :func:`evaluate`, so they can never disagree about which rules exist or their order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from dsmon.health.fixes import effective_fix
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import CATEGORY_TIERS, Checklist, CheckResult, Finding, Rule, Status, Tier

RuleFunc = Callable[[HealthInputs], Finding]

#: Modules holding rules, in the order their rules are listed.
RULE_MODULES = (
    "schema",
    "config",
    "precision",
    "features",
    "observability",
    "communication",
    "loss_scale",
    "network",
    "memory",
    "steps",
    "run",
    "ranks",
    "gpus",
)
CATEGORIES = ("config", "runtime", "gpu")

_RULES: dict[str, Rule] = {}


def rule(
    rule_id: str,
    title: str,
    checks: str,
    category: str,
    page: str | None = None,
    *,
    tier: Tier | None = None,
    follows: tuple[str, ...] = (),
) -> Callable[[RuleFunc], RuleFunc]:
    """Register a rule function under a unique id.

    Args:
        rule_id: dotted id shown in every surface (``zero.overlap_comm``).
        title: what a passing rule means, in a few words.
        checks: one sentence on what the rule looks at and why it matters.
        category: ``config``, ``runtime`` or ``gpu``.
        page: the dashboard page with the chart behind a runtime rule.
        tier: how its problems rank against others of the same status (default: from the
            category, :data:`dsmon.health.model.CATEGORY_TIERS`); the run's state is
            :attr:`Tier.STATE`.
        follows: the rules whose problem would explain one of this rule's, most direct
            first (:mod:`dsmon.health.triage` shows it under that cause).

    Raises:
        ValueError: the id is taken or the category unknown (a programming error).
    """
    if category not in CATEGORIES:
        raise ValueError(f"rule {rule_id}: unknown category {category!r}")

    def register(func: RuleFunc) -> RuleFunc:
        if rule_id in _RULES and _RULES[rule_id].func is not func:
            raise ValueError(f"rule id {rule_id!r} registered twice")
        _RULES[rule_id] = Rule(
            rule_id,
            title,
            checks,
            category,
            func,
            page,
            CATEGORY_TIERS[category] if tier is None else tier,
            follows,
        )
        return func

    return register


def all_rules() -> tuple[Rule, ...]:
    """Every registered rule, importing the rule modules first, in :data:`RULE_MODULES` order.

    Registration order alone depends on which rule module some other import loaded first; the
    order every surface lists rules in must not.
    """
    for name in RULE_MODULES:
        importlib.import_module(f"dsmon.health.rules.{name}")
    rank = {f"dsmon.health.rules.{name}": i for i, name in enumerate(RULE_MODULES)}
    return tuple(
        sorted(_RULES.values(), key=lambda r: rank.get(r.func.__module__, len(RULE_MODULES)))
    )


def run_rule(r: Rule, inputs: HealthInputs) -> CheckResult:
    """Evaluate one rule; a rule tripping over malformed data yields UNKNOWN, not a crash.

    Its fix is reduced to what would change the config in effect (:mod:`dsmon.health.fixes`).

    Only the errors bad input causes (a string where a number belongs, a missing column) are
    turned into UNKNOWN; anything else is a bug and propagates.
    """
    try:
        f = effective_fix(r.func(inputs), inputs)
    except (TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError) as exc:
        f = Finding(Status.UNKNOWN, f"could not evaluate: {type(exc).__name__}: {exc}")
    return CheckResult(
        rule_id=r.id,
        title=r.title,
        checks=r.checks,
        category=r.category,
        status=f.status,
        summary=f.summary,
        evidence=f.evidence,
        fix=f.fix,
        fix_lang=f.fix_lang,
        page=r.page,
        steps=f.steps,
        tier=r.tier,
        follows=r.follows if f.follows is None else f.follows,
        explains=f.explains,
    )


def evaluate(inputs: HealthInputs, rules: Iterable[Rule] | None = None) -> Checklist:
    """Run every rule (or the given ones) on one set of inputs."""
    chosen = all_rules() if rules is None else tuple(rules)
    return Checklist(tuple(run_rule(r, inputs) for r in chosen))
