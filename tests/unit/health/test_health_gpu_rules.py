"""GPU rules on NVML samples (GpuSampleRecords built here: the poller is issue #4's)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from health_support import check, evidence

from dsmon.health import HealthInputs, RunFacts, Status
from dsmon.health.gather import inputs_from_records, inputs_from_store
from dsmon.model.records import GpuSampleRecord, Source
from dsmon.store.store import open_store

GIB = 1024**3
A100 = "NVIDIA A100-SXM4-80GB"


def run_of(
    utils: list[float], n: int = 10, name: str = A100, **fields: Any
) -> list[GpuSampleRecord]:
    """``n`` one-second samples per GPU; GPU i has utilisation ``utils[i]``."""
    out = []
    for t in range(n):
        for i, util in enumerate(utils):
            values: dict[str, Any] = {
                "mem_used_bytes": 56 * GIB,
                "mem_total_bytes": 80 * GIB,
                "power_w": 300.0,
                "power_limit_w": 400.0,
                "temperature_c": 60.0,
                "throttle_reasons": 0,
                "ecc_corrected": 0,
                "ecc_uncorrected": 0,
            }
            values.update({k: (v(t, i) if callable(v) else v) for k, v in fields.items()})
            out.append(
                GpuSampleRecord(
                    src=Source(run="r", node="node1"),
                    ts=f"2026-11-29T14:00:{t:02d}.000",
                    gpu_index=i,
                    name=name,
                    util_gpu_pct=util,
                    **values,
                )
            )
    return out


def inputs(recs: list[GpuSampleRecord]) -> HealthInputs:
    return inputs_from_records(recs)


GPU_RULES = ("gpu.utilization", "gpu.balance", "gpu.memory", "gpu.throttling", "gpu.errors")


def test_healthy_gpus_pass_everything() -> None:
    healthy = inputs(run_of([92.0, 95.0, 93.0, 94.0]))
    for rule in GPU_RULES:
        assert check(healthy, rule).status is Status.PASS, rule
    r = check(healthy, "gpu.utilization")
    assert r.summary == "least busy GPU node1/gpu0: 92.0 %"
    assert evidence(r)["node1/gpu0 mean kernel-active"] == "92.0 % (40 samples, 14:00:00-14:00:09)"


def test_no_samples() -> None:
    for rule in GPU_RULES:
        assert check(HealthInputs(), rule).status is Status.UNKNOWN
    cpu = HealthInputs(facts=RunFacts(device="cpu"))
    r = check(cpu, "gpu.utilization")
    assert (r.status, r.summary) == (Status.NOT_APPLICABLE, "CPU run (no GPUs)")


@pytest.mark.parametrize(("low", "status"), [(60.0, Status.WARN), (20.0, Status.FAIL)])
def test_low_utilisation(low: float, status: Status) -> None:
    r = check(inputs(run_of([low, 95.0])), "gpu.utilization")
    assert r.status is status
    assert r.summary.startswith(f"node1/gpu0 is kernel-active only {low:.1f} %")


def test_balance_spread_fails_and_ratio_warns() -> None:
    r = check(inputs(run_of([50.0, 90.0])), "gpu.balance")
    assert (r.status, r.summary) == (Status.FAIL, "utilisation spread 0.40 > 0.3")
    r = check(inputs(run_of([72.0, 95.0])), "gpu.balance")
    assert (r.status, r.summary) == (Status.WARN, "balance 0.76 < 0.8")
    single = check(inputs(run_of([90.0])), "gpu.balance")
    assert (single.status, single.summary) == (Status.NOT_APPLICABLE, "1 GPU with samples")


def test_mixed_models_are_named() -> None:
    recs = run_of([90.0]) + [
        GpuSampleRecord(
            src=Source(run="r", node="node2"),
            ts=f"2026-11-29T14:00:{t:02d}.000",
            gpu_index=0,
            name="NVIDIA H100 80GB HBM3",
            util_gpu_pct=40.0,
        )
        for t in range(10)
    ]
    r = check(inputs(recs), "gpu.balance")
    assert r.status is Status.FAIL
    assert r.summary.endswith(
        "mixed GPU models (NVIDIA A100-SXM4-80GB, NVIDIA H100 80GB HBM3) "
        "run at the slowest one's pace"
    )


def test_memory_headroom() -> None:
    r = check(inputs(run_of([90.0], mem_used_bytes=int(78.4 * GIB))), "gpu.memory")
    assert (r.status, r.summary) == (Status.WARN, "node1/gpu0 peaked at 98.0 % of its memory")
    assert check(inputs(run_of([90.0])), "gpu.memory").summary == "peak memory 70.0 % (node1/gpu0)"


def test_throttling() -> None:
    hw = run_of([90.0], throttle_reasons=lambda t, i: 0x8 if t < 3 else 0)
    r = check(inputs(hw), "gpu.throttling")
    assert r.status is Status.FAIL
    assert (
        evidence(r)["HW slowdown / HW thermal / power brake"]
        == "30.0% of samples (10 samples, 14:00:00-14:00:09)"
    )
    hot = run_of([90.0], temperature_c=lambda t, i: 80.0 + t)
    assert check(inputs(hot), "gpu.throttling").status is Status.WARN  # 89 C at the end
    capped = check(inputs(run_of([90.0], throttle_reasons=0x4)), "gpu.throttling")
    assert capped.summary == (
        "no thermal or hardware throttling; power-capped in 100.0% of samples (normal at full load)"
    )


def test_ecc_and_xid() -> None:
    xid = run_of([90.0, 90.0], xid=lambda t, i: 79 if (t, i) == (5, 1) else None)
    r = check(inputs(xid), "gpu.errors")
    assert r.status is Status.FAIL and evidence(r)["XID"] == "79 (20 samples, 14:00:00-14:00:09)"
    unc = run_of([90.0], ecc_uncorrected=lambda t, i: 1 if t > 7 else 0)
    assert check(inputs(unc), "gpu.errors").status is Status.FAIL
    rising = run_of([90.0], ecc_corrected=lambda t, i: t)
    r = check(inputs(rising), "gpu.errors")
    assert (r.status, r.summary) == (Status.WARN, "corrected ECC errors are rising")
    bare = [
        GpuSampleRecord(
            src=Source(run="r"), ts="2026-11-29T14:00:00.000", gpu_index=0, util_gpu_pct=90.0
        )
    ]
    assert check(inputs(bare), "gpu.errors").status is Status.UNKNOWN


def test_store_summary_gives_the_verdicts_of_records_in_memory(tmp_path: Path) -> None:
    recs = run_of([60.0, 95.0])
    store = open_store(tmp_path / "s.sqlite")
    store.add(recs)
    stored = inputs_from_store(store, recs[0].src.run)
    for rule_id in ("gpu.utilization", "gpu.balance", "gpu.memory", "gpu.throttling", "gpu.errors"):
        assert check(stored, rule_id).summary == check(inputs(recs), rule_id).summary


def _crashed_with_gpus(utils: list[float]) -> list[Any]:
    """The real crash of tests/data/events_crash_step17 (steps 14:16:05-14:16:11, rank 0's
    RuntimeError at step 17) with two GPUs sampled once a second from 14:16:05, the n-th
    sample of each at ``utils[n]`` %."""
    from shared_fixtures import DATA

    from dsmon.parse.log import parse_text

    recs: list[Any] = parse_text((DATA / "events_crash_step17" / "train.log").read_text(), "r")[0]
    for t, util in enumerate(utils):
        at = f"2026-11-29T14:16:{5 + t:02d}.000"
        recs += [dataclasses.replace(s, ts=at) for s in run_of([util, util], n=1)]
    return recs


def test_a_crash_explains_low_utilisation_only_by_the_samples_after_it() -> None:
    """Idle GPUs after the last step lower the mean: a crash explains a low figure only when
    those samples, taken as idle, are enough to make it. Sampled while the steps ran, a low
    utilisation is a problem of its own, not a symptom of the crash."""
    from dsmon.health.registry import evaluate
    from dsmon.health.triage import triage

    during = inputs(_crashed_with_gpus([20.0] * 8))  # 14:16:05-14:16:12: the steps' time only
    r = check(during, "gpu.utilization")
    assert r.status is Status.FAIL
    assert r.follows == ("ranks.straggler",)
    assert "samples after the last step" not in evidence(r)
    laid = triage(evaluate(during))
    assert "gpu.utilization" not in [s.rule_id for s in laid.headline().symptoms]
    assert "gpu.utilization" in [p.rule_id for p in laid.problems]

    after = inputs(_crashed_with_gpus([90.0] * 8 + [0.0] * 28))  # then idle to 14:16:40
    r = check(after, "gpu.utilization")
    assert r.status is Status.FAIL  # 20 % over the whole window
    assert evidence(r)["samples after the last step"] == "28 s of 35 s"
    laid = triage(evaluate(after))
    assert laid.headline().rule_id == "run.state"
    assert "gpu.utilization" in [s.rule_id for s in laid.headline().symptoms]
