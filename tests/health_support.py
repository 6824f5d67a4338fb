"""Helpers shared by the tests/test_health_*.py files: configs, corpus runs, verdict lookup."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from locations import DATA

from dsmon.ds_config.effective import ConfigView
from dsmon.health import HealthInputs, RunFacts, evaluate
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Checklist, CheckResult
from dsmon.health.registry import all_rules
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import Record
from dsmon.parse.base import Diagnostics

SEEDS = DATA / "health_seed_configs"
CORPUS = DATA / "health_corpus"

#: Corpus runs that other tests read too, kept once in their own folder under tests/data/
#: (run -> folder); health_corpus/ holds the other runs under their corpus names.
RUN_FOLDERS = {
    "act_ckpt": "act_ckpt",
    "comms_logger": "comms_logger",
    "comms_logger_verbose": "comms_logger_verbose",
    "crash_rank1_step17": "events_crash_rank1_step17",
    "crash_step17": "events_crash_step17",
    "csv_tensorboard": "csv_tensorboard",
    "flops_detailed_file": "flops_detailed_file",
    "flops_detailed_stdout": "flops_detailed_stdout",
    "fp16_zero0": "fp16_zero0",
    "fp16_zero2": "fp16_zero2",
    "fp16_zero3": "fp16_zero3",
    "grad_accum": "grad_accum",
    "memory_breakdown": "memory_breakdown",
    "pipeline_wallclock_crash": "events_pipeline_wallclock_crash",
    "sigkill_all": "events_sigkill_all",
    "warmup_lr": "warmup_lr",
    "z0": "flops_z0",
    "z0_default_loglevel": "z0_default_loglevel",
    "z2": "z2",
    "z2_offload_optimizer": "config_z2_offload",
    "z3": "z3",
    "z3_overlap_true": "comms_z3_overlap_true",
}
#: Runs judged on their log (train.log beside ds_config.json); the others on their config alone.
LOGGED_RUNS = frozenset(
    {"fp16_zero2", "fp16_zero0", "z3_overlap_false", "z3_overlap_true", "crash_step17",
     "grad_accum", "z0", "sigkill_all"}
)  # fmt: skip


def corpus_dir(run: str) -> Path:
    """The folder under tests/data that holds a corpus run's files."""
    return DATA / RUN_FOLDERS[run] if run in RUN_FOLDERS else CORPUS / run


def corpus_runs() -> set[str]:
    """Every corpus run with a ds_config.json here, by its corpus name."""
    return set(RUN_FOLDERS) | {p.parent.name for p in CORPUS.glob("*/ds_config.json")}


def seed(name: str, **kw: Any) -> ConfigView:
    """A seed config from tests/data/health_seed_configs as a ConfigView."""
    return ConfigView(json.loads((SEEDS / name).read_text()), source=name, **kw)


def corpus_config(run: str, **kw: Any) -> ConfigView:
    """A corpus run's ds_config.json as a ConfigView."""
    path = corpus_dir(run) / "ds_config.json"
    return ConfigView(json.loads(path.read_text()), source=str(path), **kw)


@cache
def corpus_records(run: str) -> tuple[Record, ...]:
    """Every record of a corpus run: its train.log and ds_config.json, or the config alone."""
    out: list[Record] = []
    where = corpus_dir(run) if run in LOGGED_RUNS else corpus_dir(run) / "ds_config.json"
    for found in discover(where):
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
    """One rule's result, evaluated as the checklist evaluates it (rules are independent, so
    the others need not run; whole checklists are compared in test_corpus_run_verdicts)."""
    (rule,) = (r for r in all_rules() if r.id == rule_id)
    return result(evaluate(inputs, [rule]), rule_id)


def evidence(r: CheckResult) -> dict[str, str]:
    """A result's evidence as ``label -> 'value (where)'`` text."""
    return {e.label: e.text().split(" = ", 1)[1] for e in r.evidence}
