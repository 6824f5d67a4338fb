"""zero3.coordinator and network.compression: real output first, record objects for the rest.

Real data: tests/data/zero3_coordinator_v0100 (DeepSpeed 0.10.0 on CPU, the only coordinator
timers there are), field excerpt 49 (a 256-node Aurora run's log_summary() table) and 51
(2-node ThetaGPU verbose comm ops, all under 1 MiB). No real run shows a slow inter-node
network, a large fetch share or a 1-bit optimizer, so those verdicts are checked on record
objects built here (values chosen to land on each side of the thresholds).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from field_logs import field_path
from health_support import check, corpus_inputs, evidence
from locations import DATA
from shared_fixtures import read_log

from dsmon.ds_config.effective import ConfigView
from dsmon.health import HealthInputs, RunFacts
from dsmon.health.gather import inputs_from_records
from dsmon.health.model import Status
from dsmon.model.records import CommSummaryRecord, Record, Source, TimerRecord

RUN = DATA / "zero3_coordinator_v0100"
COORD = "zero3.coordinator"
NET = "network.compression"


def _with_nodes(inputs: HealthInputs, nodes: int, world: int | None = None) -> HealthInputs:
    facts = dataclasses.replace(inputs.facts, nodes=nodes, world_size=world)
    return dataclasses.replace(inputs, facts=facts)


def test_coordinator_on_the_real_run() -> None:
    cfg = ConfigView(json.loads((RUN / "ds_config.json").read_text()), source="ds_config.json")
    r = check(inputs_from_records(read_log(RUN / "train.log", "coord"), config=cfg), COORD)
    assert r.status is Status.PASS
    # steps 3-8; hand sums in test_analysis_coordinator: wait 50.78 of 64.62 ms
    assert (
        r.summary == "fetches take 10.1% of fwd + bwd; wait leads the parameter fetch time (78.6%)"
    )
    ev = evidence(r)
    assert ev["wait share of fetch time"] == "78.6% (steps 3-8, rank 0)"
    assert ev["gather share of fetch time"] == "16.9% (steps 3-8, rank 0)"
    assert ev["submission share of fetch time"] == "4.5% (steps 3-8, rank 0)"
    assert ev["submissions per step p50"] == "1 (steps 3-8, rank 0)"
    assert ev["zero_optimization.stage3_prefetch_bucket_size"] == "5e7 (default)"
    assert r.steps == (3, 8) and r.page == "communication"


def test_coordinator_not_applicable_without_its_lines() -> None:
    r = check(corpus_inputs("z3"), COORD)
    assert r.status is Status.NOT_APPLICABLE and "0.10.0" in r.summary


def _steps(values: dict[str, float], fwd: float = 20.0, bwd: float = 40.0) -> list[Record]:
    """Six steps of an engine line and a coordinator line each (record objects)."""
    out: list[Record] = []
    for step in range(1, 7):
        out.append(
            TimerRecord(
                src=Source(run="r", line=2 * step),
                step=step,
                group="zero3_coordinator",
                values_ms=values,
            )
        )
        engine = {"fwd": fwd, "bwd": bwd, "bwd_inner": bwd, "bwd_allreduce": 0.0, "step": 5.0}
        out.append(
            TimerRecord(
                src=Source(run="r", line=2 * step + 1), step=step, group="global", values_ms=engine
            )
        )
    return out


def _zero3(**zero: Any) -> ConfigView:
    return ConfigView({"zero_optimization": {"stage": 3, **zero}}, source="ds_config.json")


def test_large_wait_share_points_at_the_network_and_hpz() -> None:
    waiting = {"forward_fetch_wait": 14.0, "backward_fetch_wait": 6.0, "forward_fetch_submit": 2.0}
    inputs = _with_nodes(inputs_from_records(_steps(waiting), config=_zero3()), 2, 16)
    r = check(inputs, COORD)
    assert r.status is Status.WARN
    assert r.summary.startswith("fetches take 36.7% of fwd + bwd (> 25%); wait leads")  # 22/60
    assert "bandwidth or topology" in r.summary
    assert json.loads(r.fix or "") == {
        "zero_optimization": {
            "stage3_prefetch_bucket_size": 100000000,
            "zero_hpz_partition_size": 8,
        }
    }


def test_gather_then_submission_lead_with_their_own_fixes() -> None:
    gather = {"forward_fetch_wait": 2.0, "forward_fetch_submit": 18.0, "forward_all_gather": 16.0}
    r = check(inputs_from_records(_steps(gather), config=_zero3()), COORD)
    assert r.status is Status.WARN and "gather leads" in r.summary
    assert json.loads(r.fix or "") == {"zero_optimization": {"zero_quantized_weights": True}}
    many = {"forward_prefetch_submit": 20.0, "forward_all_gather": 2.0, "backward_fetch_wait": 1.0}
    cfg = _zero3(stage3_param_persistence_threshold=0, stage3_prefetch_bucket_size=2e8)
    r2 = check(inputs_from_records(_steps(many), config=cfg), COORD)
    assert r2.status is Status.WARN and "submission leads" in r2.summary
    # max_live_parameters is already DeepSpeed's default 1e9: not repeated in the fix
    assert json.loads(r2.fix or "") == {
        "zero_optimization": {
            "stage3_prefetch_bucket_size": 400000000,
            "stage3_param_persistence_threshold": 100000,
        }
    }


def test_compression_on_a_real_multi_node_table() -> None:
    """Aurora, 256 nodes: the large all-reduces ran at 56-67 Gbps, no compression needed."""
    inputs = _with_nodes(inputs_from_records(read_log(field_path(49), "aurora")), 256)
    r = check(inputs, NET)
    assert r.status is Status.PASS
    # rows >= 477 MB: all_reduce 874.0 MB 59.53, 914.0 MB 66.53, 954.38 MB 59.54, 954.4 MB
    # 56.14, 1650 calls each: the weighted median is the second smallest, 59.53
    assert evidence(r)["busbw of the largest messages"] == (
        "59.53 Gbps (comms logger: all_reduce, 874-954 MiB, 6600 calls, median weighted by calls)"
    )
    assert evidence(r)["compression in use"] == "unknown (config)"


def test_small_messages_say_nothing_about_the_link() -> None:
    inputs = _with_nodes(inputs_from_records(read_log(field_path(51), "theta")), 2)
    r = check(inputs, NET)
    assert r.status is Status.UNKNOWN and "under 1 MiB" in r.summary


def _summary_rows(busbw: float, sizes: Sequence[int] = (64 << 20, 256 << 20)) -> list[Record]:
    return [
        CommSummaryRecord(
            src=Source(run="r", line=i + 1),
            table="summary",
            table_index=0,
            op="all_reduce",
            msg_size_bytes=size,
            count=100,
            total_latency_ms=1000.0,
            avg_latency_ms=10.0,
            algbw_avg_gbps=busbw,
            busbw_avg_gbps=busbw,
        )
        for i, size in enumerate(sizes)
    ]


def test_slow_network_gets_compression_that_fits_the_stage() -> None:
    raw = {"zero_optimization": {"stage": 0}}
    no_zero = ConfigView(raw, source="ds_config.json", version=(0, 19, 6))
    r = check(_with_nodes(inputs_from_records(_summary_rows(12.0), config=no_zero), 4, 32), NET)
    assert r.status is Status.WARN and "12.0 Gbps (<= 25)" in r.summary
    assert json.loads(r.fix or "") == {"optimizer": {"type": "ZeroOneAdam"}}
    before_zero_one = ConfigView(raw, source="ds_config.json", version=(0, 5, 10))
    r = check(_with_nodes(inputs_from_records(_summary_rows(12.0), config=before_zero_one), 4), NET)
    assert json.loads(r.fix or "") == {"optimizer": {"type": "OneBitAdam"}}
    assert "ZeRO++" not in r.summary  # 0.5.10 has no ZeRO++ either
    r3 = check(_with_nodes(inputs_from_records(_summary_rows(25.0), config=_zero3()), 4, 32), NET)
    assert r3.status is Status.WARN
    assert json.loads(r3.fix or "") == {
        "zero_optimization": {
            "zero_quantized_weights": True,
            "zero_quantized_gradients": True,
            "zero_hpz_partition_size": 8,
        }
    }


def test_no_one_bit_advice_where_deepspeed_dropped_them() -> None:
    """0.19.7 removed OneBitAdam, ZeroOneAdam and OneBitLamb: ZeRO++ is what is left."""
    for version in ((0, 19, 8), None):
        cfg = ConfigView({"zero_optimization": {"stage": 0}}, version=version)
        r = check(_with_nodes(inputs_from_records(_summary_rows(12.0), config=cfg), 4, 32), NET)
        assert r.status is Status.WARN
        assert "Adam" not in r.summary and "Adam" not in (r.fix or "")
        assert json.loads(r.fix or "") == {
            "zero_optimization": {
                "stage": 3,
                "zero_quantized_weights": True,
                "zero_quantized_gradients": True,
                "zero_hpz_partition_size": 8,
            }
        }
    old = ConfigView({"zero_optimization": {"stage": 1}}, version=(0, 3, 16))
    r = check(_with_nodes(inputs_from_records(_summary_rows(12.0), config=old), 2), NET)
    assert r.status is Status.WARN and r.fix is None  # ZeRO on, and no ZeRO++ yet (0.10.0)
    assert r.summary.endswith("(OneBitAdam without ZeRO, their convergence verified with fp16)")


def test_one_bit_adam_on_a_fast_network_is_a_cost() -> None:
    cfg = ConfigView({"optimizer": {"type": "OneBitAdam"}}, source="ds_config.json")
    r = check(_with_nodes(inputs_from_records(_summary_rows(180.0), config=cfg), 2), NET)
    assert r.status is Status.WARN
    assert r.summary.startswith("optimizer OneBitAdam on a 180 Gbps network")
    assert json.loads(r.fix or "") == {"optimizer": {"type": "Adam"}}
    mid = check(_with_nodes(inputs_from_records(_summary_rows(60.0), config=cfg), 2), NET)
    assert mid.status is Status.PASS and "compression in use" in mid.summary


def test_one_node_is_not_judged() -> None:
    inputs = HealthInputs(facts=RunFacts(nodes=1))
    assert check(inputs, NET).status is Status.NOT_APPLICABLE
