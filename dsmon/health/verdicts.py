"""Small builders shared by rule functions, so each rule reads as its decision and nothing else.

Every config rule needs the same guard (no config -> UNKNOWN) and the same snippet format for
its fix; every range rule the same low/high wording. Keeping them here keeps each rule a few
lines long and the wording identical across the checklist.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from dsmon.ds_config.effective import ConfigView, Setting
from dsmon.ds_config.read import as_float
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, format_value

ConfigRuleFunc = Callable[[ConfigView, HealthInputs], Finding]

NO_CONFIG = (
    "no ds_config: pass the config file to dsmon check, start the job with dsmon run (its "
    'probe reads the engine\'s config), or log with "log_level": "info" (DeepSpeed >= 0.17.6 '
    "hides the config dump otherwise)"
)


def needs_config(func: ConfigRuleFunc) -> Callable[[HealthInputs], Finding]:
    """Adapt a rule over a ConfigView to the rule signature; UNKNOWN when there is no config."""

    @wraps(func)
    def rule_func(inputs: HealthInputs) -> Finding:
        if inputs.config is None:
            return Finding(Status.UNKNOWN, NO_CONFIG)
        return func(inputs.config, inputs)

    return rule_func


def not_applicable(reason: str, *evidence: Evidence) -> Finding:
    """A rule that does not apply to this setup says why, apart from the passes.

    Nothing was checked (the feature is not used, or the run has no data of that kind), so
    counting it as a pass would overstate how much of the checklist the run satisfies.
    """
    return Finding(Status.NOT_APPLICABLE, reason, evidence)


#: Snippets up to this long stay on one line; longer ones are indented like ds_config files.
ONE_LINE = 88


def fix_json(fragment: dict[str, Any]) -> str:
    """A ds_config fragment to paste: one line when short, else indented."""
    flat = json.dumps(fragment)
    return flat if len(flat) <= ONE_LINE else json.dumps(fragment, indent=2)


def nest(path: str, value: Any) -> dict[str, Any]:
    """``nest("a.b", 1)`` -> ``{"a": {"b": 1}}``: the fix fragment for one dotted path."""
    out: Any = value
    for part in reversed(path.split(".")):
        out = {part: out}
    return dict(out)


def range_finding(
    setting: Setting, low: float, high: float, why_low: str, why_high: str, suggest: float
) -> Finding:
    """Judge a numeric setting against a sane [low, high] range; outside is a warning."""
    value = as_float(setting.value)
    ev = (Evidence.of(setting), Evidence("sane range", f"{format_value(low)}-{format_value(high)}"))
    if value is None:
        return Finding(Status.WARN, f"{setting.path} is not a number: {setting.value!r}", ev)
    if value < low:
        status, why = Status.WARN, f"{setting.path} = {format_value(value)} is small: {why_low}"
    elif value > high:
        status, why = Status.WARN, f"{setting.path} = {format_value(value)} is large: {why_high}"
    else:
        return Finding(Status.PASS, f"{setting.path} = {format_value(value)} is within range", ev)
    return Finding(status, why, ev, fix_json(nest(setting.path, _num(suggest))))


def _num(value: float) -> int | float:
    """Whole numbers as int in snippets (5e8 prints as 500000000, as JSON requires)."""
    return int(value) if float(value).is_integer() else value
