"""Advice for the DeepSpeed that ran, live on a REAL bf16 job through ``dsmon run``.

The bf16 scenario of ``tests/scenarios.py`` (2 ranks, ZeRO-1, DeepSpeed's default log level):
no config dump and no version line reach the log, so the config and the version come from rank
0's probe, which read them from the engine. While the job trains, the checklist evaluated on
the store must give no bf16 advice to a bf16 run and propose only keys and optimizers the
running DeepSpeed has; after the job ends, the same from the store (post-mortem).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import scenarios
from deepspeed_support import DEADLINE_S, deepspeed_bin, end, wait_for

from dsmon.ds_config import names, schema
from dsmon.ds_config.releases import knowledge
from dsmon.health import HealthInputs, evaluate
from dsmon.health.gather import inputs_from_store
from dsmon.health.model import Checklist, Status
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow


def judge(store_path: Path, *, live: bool) -> tuple[HealthInputs, Checklist]:
    store = open_store(store_path)
    try:
        inputs = inputs_from_store(store, "job", now=datetime.now() if live else None)
    finally:
        store.close()
    return inputs, evaluate(inputs)


def engine_config_stored(store_path: Path) -> bool:
    store = open_store(store_path)
    try:
        if not any(r.name == "job" for r in store.runs()):
            return False
        configs = store.records("job", "config")
        return any(getattr(c, "origin", None) == "engine" for c in configs)
    finally:
        store.close()


def leaves(node: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value and path not in schema.OPAQUE:
            out += leaves(value, f"{path}.")
        else:
            out.append((path, value))
    return out


def assert_true_for_the_release(inputs: HealthInputs, checklist: Checklist) -> None:
    version = inputs.facts.ds_version
    assert version is not None  # the probe's engine line names it
    assert inputs.config is not None and inputs.config.origin == "engine"
    by_id = {r.rule_id: r for r in checklist.results}
    assert by_id["precision.bf16"].status is Status.PASS
    assert by_id["observe.flops_profiler"].status is Status.NOT_APPLICABLE  # a CPU run
    for r in checklist.results:
        assert "use bf16" not in r.summary and '"bf16"' not in (r.fix or ""), r.rule_id
        if r.fix and r.fix_lang == "json":
            for path, value in leaves(json.loads(r.fix)):
                assert knowledge().exists(path, version), (r.rule_id, path)
                if path == "optimizer.type":
                    assert str(value).lower() in names.ds_optimizers(version)


def test_bf16_run_live_and_after(tmp_path: Path) -> None:
    ds_bin = deepspeed_bin()
    scenario = scenarios.SCENARIOS["bf16"]
    store = tmp_path / "store.sqlite"
    proc = scenarios.start(scenario, tmp_path / "job", store, ds_bin, home=tmp_path)
    try:
        wait_for("the engine's config in the store", lambda: engine_config_stored(store), [proc])
        inputs, live = judge(store, live=True)
        assert_true_for_the_release(inputs, live)
        assert proc.wait(timeout=DEADLINE_S) == 0
    finally:
        end(proc)
    inputs, after = judge(store, live=False)
    assert_true_for_the_release(inputs, after)
    config_verdicts = {r.rule_id: r.status for r in after.results if r.category == "config"}
    assert config_verdicts == {r.rule_id: r.status for r in live.results if r.category == "config"}
