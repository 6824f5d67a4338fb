"""zero3.fragmentation on real output: DeepSpeed's own flush warning, a 2021 ZeRO-3 memory block.

Data: tests/data/zero3_flush_warning_v0100/train.log (DeepSpeed 0.10.0's stage-3 warning, the
retry count staged as its README says), field excerpt 03 (ZeRO-3 on 64 V100s, DeepSpeed 0.3.17:
``MA 2.34 GB ... CA 5.4 GB``), and the corpus runs z2/z3 (DeepSpeed 0.19.8, no flushes).
"""

from __future__ import annotations

import json

from field_logs import field_path
from health_support import check, corpus_inputs, evidence
from locations import DATA
from shared_fixtures import read_log

from dsmon.ds_config.effective import ConfigView
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Status

RUN = DATA / "zero3_coordinator_v0100"
FLUSH_RUN = DATA / "zero3_flush_warning_v0100"
RULE = "zero3.fragmentation"


def test_flush_warnings_point_at_sub_group_size() -> None:
    cfg = ConfigView(json.loads((RUN / "ds_config.json").read_text()), source="ds_config.json")
    inputs = inputs_from_records(read_log(FLUSH_RUN / "train.log", "flushes"), config=cfg)
    r = check(inputs, RULE)
    assert r.status is Status.WARN
    assert r.summary.startswith("12 allocator cache flushes in 4 steps")  # 3 per warning
    assert evidence(r) == {
        "zero_optimization.sub_group_size": "1e9 (default)",
        "allocator cache flushes": "12 (4 warnings, first at train.log:208)",
    }
    assert r.fix == '{"zero_optimization": {"sub_group_size": 100000000}}'
    assert r.page == "training"


def test_reserved_far_above_allocated_in_a_zero3_memory_block() -> None:
    r = check(inputs_from_records(read_log(field_path(3), "field03")), RULE)
    assert r.status is Status.WARN
    (label,) = evidence(r)
    assert label == "reserved / allocated"
    # the first block: "Stage 3 initialize beginning", MA 2.34 GB, CA 5.4 GB (ratio 2.31)
    assert evidence(r)[label].startswith("5.40 / 2.34 GiB (Stage 3 initialize beginning, 03_")
    assert "reserved 2.3x allocated" in r.summary
    assert r.fix == '{"zero_optimization": {"sub_group_size": 100000000}}'


def test_quiet_zero3_run_passes_and_other_stages_are_not_judged() -> None:
    z3_run = DATA / "z3"
    cfg = ConfigView(json.loads((z3_run / "ds_config.json").read_text()), source="ds_config.json")
    z3 = check(inputs_from_records(read_log(z3_run / "train.log", "z3"), config=cfg), RULE)
    assert z3.status is Status.PASS and z3.fix is None
    assert "memory_breakdown is off" in z3.summary
    assert check(corpus_inputs("z3"), RULE).status is Status.UNKNOWN  # a config, no log
    z2 = check(corpus_inputs("z2"), RULE)
    assert z2.status is Status.NOT_APPLICABLE and "stage 2" in z2.summary
