"""The health checklist: checks of a DeepSpeed run as rules with evidence and a fix.

Rules live in this package, one small function each, registered in :mod:`registry`; they read
one :class:`~dsmon.health.inputs.HealthInputs` (a ds_config, facts about the run, the store's
frames) and return a verdict with the numbers behind it. ``dsmon check`` and the dashboard's
health page both call :func:`evaluate`, so they always show the same list.
"""

from __future__ import annotations

from dsmon.health.inputs import HealthInputs, RunFacts
from dsmon.health.model import Checklist, CheckResult, Evidence, Finding, Rule, Status
from dsmon.health.registry import all_rules, evaluate

__all__ = [
    "CheckResult",
    "Checklist",
    "Evidence",
    "Finding",
    "HealthInputs",
    "Rule",
    "RunFacts",
    "Status",
    "all_rules",
    "evaluate",
]
