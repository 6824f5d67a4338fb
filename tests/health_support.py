"""Helpers shared by the tests/test_health_*.py files: configs, corpus runs, verdict lookup."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from dsmon.health import ConfigView, HealthInputs, RunFacts, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Checklist, CheckResult
from dsmon.load.files import discover, read_found
from dsmon.model.records import Record
from dsmon.parse.base import Diagnostics

DATA = Path(__file__).parent / "data"
SEEDS = DATA / "health_seed_configs"
CORPUS = DATA / "health_corpus"


def seed(name: str, **kw: Any) -> ConfigView:
    """A seed config from tests/data/health_seed_configs as a ConfigView."""
    return ConfigView(json.loads((SEEDS / name).read_text()), source=name, **kw)


def corpus_config(run: str, **kw: Any) -> ConfigView:
    """A corpus run's ds_config.json as a ConfigView."""
    path = CORPUS / run / "ds_config.json"
    return ConfigView(json.loads(path.read_text()), source=str(path), **kw)


@cache
def corpus_records(run: str) -> tuple[Record, ...]:
    """Every record of a corpus run folder (its train.log and ds_config.json)."""
    out: list[Record] = []
    for found in discover(CORPUS / run):
        out.extend(read_found(found, run, Diagnostics()))
    return tuple(out)


def corpus_inputs(run: str, **kw: Any) -> HealthInputs:
    """HealthInputs of a corpus run, as ``dsmon check RUN_FOLDER`` builds them."""
    return inputs_from_records(corpus_records(run), run=run, **kw)


def config_inputs(cfg: ConfigView, **facts: Any) -> HealthInputs:
    """Inputs holding only a config (and optional facts): ``dsmon check ds_config.json``."""
    return HealthInputs(config=cfg, facts=RunFacts(**facts))


def result(checklist: Checklist, rule_id: str) -> CheckResult:
    """The result of one rule in a checklist."""
    return next(r for r in checklist.results if r.rule_id == rule_id)


def check(inputs: HealthInputs, rule_id: str) -> CheckResult:
    """Evaluate the checklist and return one rule's result."""
    return result(evaluate(inputs), rule_id)


def evidence(r: CheckResult) -> dict[str, str]:
    """A result's evidence as ``label -> 'value (where)'`` text."""
    return {e.label: e.text().split(" = ", 1)[1] for e in r.evidence}
