from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dsmon.model.records import (
    GpuSampleRecord,
    IterationRecord,
    Record,
    Source,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.serve.metrics import StoreCollector
from dsmon.store.store import Store, open_store

# Figures below are read by hand from tests/data/z2/train.log (DeepSpeed 0.19.8, rank 0);
# the comment on each record names its line.
LOG = "train.log"


def src(line: int, rank: int | None = 0, node: str = "node-a", run: str = "z2") -> Source:
    return Source(run=run, file=LOG, line=line, offset=line * 100, node=node, rank=rank)


def timer_184() -> TimerRecord:
    # [Rank 0] time (ms) | fwd: 350.75 | bwd: 754.18 | bwd_inner: 675.36 | bwd_allreduce: 78.63 | step: 190.22
    values = {
        "fwd": 350.75,
        "bwd": 754.18,
        "bwd_inner": 675.36,
        "bwd_allreduce": 78.63,
        "step": 190.22,
    }
    return TimerRecord(src=src(184), step=1, group="global", values_ms=values)


def timer_188() -> TimerRecord:
    # [Rank 0] time (ms) | fwd: 12.27 | bwd: 30.79 | bwd_inner: 22.41 | bwd_allreduce: 8.34 | step: 11.74
    values = {"fwd": 12.27, "bwd": 30.79, "bwd_inner": 22.41, "bwd_allreduce": 8.34, "step": 11.74}
    return TimerRecord(src=src(188), step=2, group="global", values_ms=values)


def zero_timer_186() -> TimerRecord:
    # [Rank 0] time (ms) | optimizer_allgather: 4.27 | optimizer_gradients: 0.87 | optimizer_step: 3.43
    values = {"optimizer_allgather": 4.27, "optimizer_gradients": 0.87, "optimizer_step": 3.43}
    return TimerRecord(src=src(186), step=2, group="zero_optimizer", values_ms=values)


def step_271() -> StepRecord:
    # [Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]
    return StepRecord(
        src=src(271),
        ts="2026-11-29T14:11:06.716",
        step=10,
        skipped=0,
        lr=(0.0001,),
        mom=((0.9, 0.999),),
    )


def throughput_272() -> ThroughputRecord:
    # epoch=0/micro_step=10/global_step=10, RunningAvgSamplesPerSec=138.12109932754612,
    # CurrSamplesPerSec=152.31438650869256, MemAllocated=0.43GB, MaxMemAllocated=0.43GB
    return ThroughputRecord(
        src=src(272),
        ts="2026-11-29T14:11:06.718",
        step=10,
        epoch=0,
        micro_step=10,
        global_step=10,
        samples_per_s=152.31438650869256,
        running_avg_samples_per_s=138.12109932754612,
        mem_allocated_bytes=461708984,
        max_mem_allocated_bytes=461708984,
    )


def gpu(
    index: int, ts: str, util: float | None, power: float | None, node: str = "node-a"
) -> GpuSampleRecord:
    # A made-up NVML sample (this machine has no GPU): the collector's real samples have this shape.
    return GpuSampleRecord(
        src=Source(run="z2", node=node),
        ts=ts,
        gpu_index=index,
        uuid=f"GPU-{index:08d}",
        name="NVIDIA H100 80GB HBM3",
        util_gpu_pct=util,
        mem_used_bytes=40 * 2**30,
        mem_total_bytes=80 * 2**30,
        power_w=power,
        energy_j=123456.5,
        sm_clock_mhz=1980.0,
        gpm_sm_active_pct=None,
    )


def scrape(collector: StoreCollector) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


RANK0 = {"run": "z2", "node": "node-a", "rank": "0"}
GPU0 = {
    "run": "z2",
    "node": "node-a",
    "gpu": "0",
    "uuid": "GPU-00000000",
    "model": "NVIDIA H100 80GB HBM3",
}


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Store:
    return open_store(tmp_path / "m.sqlite")


def test_newest_step_figures_per_rank(sqlite_store: Store) -> None:
    records: list[Record] = [
        timer_184(),
        zero_timer_186(),
        timer_188(),
        step_271(),
        throughput_272(),
    ]
    sqlite_store.add(records)
    got = scrape(StoreCollector(sqlite_store))
    # timer_188 came after timer_184: the newest global line wins.
    assert got[
        ("dsmon_timer_seconds", labels(**RANK0, group="global", timer="fwd"))
    ] == pytest.approx(0.01227)
    assert got[
        ("dsmon_timer_seconds", labels(**RANK0, group="global", timer="bwd_allreduce"))
    ] == pytest.approx(0.00834)
    assert got[
        ("dsmon_timer_seconds", labels(**RANK0, group="zero_optimizer", timer="optimizer_step"))
    ] == pytest.approx(0.00343)
    assert got[("dsmon_step", labels(**RANK0))] == 10
    assert got[("dsmon_skipped_steps_total", labels(**RANK0))] == 0
    assert got[("dsmon_learning_rate", labels(**RANK0, param_group="0"))] == 0.0001
    assert got[("dsmon_samples_per_second", labels(**RANK0))] == 152.31438650869256
    assert got[("dsmon_samples_per_second_avg", labels(**RANK0))] == 138.12109932754612
    assert got[("dsmon_memory_allocated_bytes", labels(**RANK0))] == 461708984
    assert got[("dsmon_records", labels(run="z2", kind="timer"))] == 3
    assert got[("dsmon_run_last_step", labels(run="z2"))] == 10


def test_gpu_samples_newest_per_gpu_and_missing_fields_absent(sqlite_store: Store) -> None:
    sqlite_store.add(
        [
            gpu(0, "2026-11-29T14:11:06.000", 97.0, 650.5),
            gpu(1, "2026-11-29T14:11:06.000", 3.0, None),
        ]
    )
    sqlite_store.add([gpu(0, "2026-11-29T14:11:07.000", 88.0, 640.0)])
    got = scrape(StoreCollector(sqlite_store))
    assert got[("dsmon_gpu_utilization_ratio", labels(**GPU0))] == pytest.approx(0.88)
    assert got[("dsmon_gpu_power_watts", labels(**GPU0))] == 640.0
    assert got[("dsmon_gpu_memory_total_bytes", labels(**GPU0))] == 80 * 2**30
    assert got[("dsmon_gpu_sm_clock_hertz", labels(**GPU0))] == 1.98e9
    assert got[("dsmon_gpu_energy_joules_total", labels(**GPU0))] == 123456.5
    gpu1 = {**GPU0, "gpu": "1", "uuid": "GPU-00000001"}
    assert got[("dsmon_gpu_utilization_ratio", labels(**gpu1))] == pytest.approx(0.03)
    # power_w None and no GPM: no sample at all, never a 0.
    assert ("dsmon_gpu_power_watts", labels(**gpu1)) not in got
    assert not [k for k in got if k[0] == "dsmon_gpu_sm_active_ratio"]


def test_each_scrape_reads_only_what_is_new(sqlite_store: Store) -> None:
    collector = StoreCollector(sqlite_store)
    sqlite_store.add([timer_184()])
    first = scrape(collector)
    assert first[("dsmon_timer_seconds", labels(**RANK0, group="global", timer="fwd"))] == 0.35075
    sqlite_store.add([timer_188()])
    second = scrape(collector)
    assert second[
        ("dsmon_timer_seconds", labels(**RANK0, group="global", timer="fwd"))
    ] == pytest.approx(0.01227)
    assert collector._views["z2"].cursor == sqlite_store.last_id("z2")


def test_series_not_updated_within_the_window_is_dropped(sqlite_store: Store) -> None:
    collector = StoreCollector(sqlite_store, window_ids=3)
    sqlite_store.add([gpu(1, "2026-11-29T14:11:00.000", 50.0, 300.0)])
    assert (
        scrape(collector)[
            ("dsmon_gpu_power_watts", labels(**{**GPU0, "gpu": "1", "uuid": "GPU-00000001"}))
        ]
        == 300.0
    )
    # GPU 1 goes silent while GPU 0 reports 4 more times: it falls out of the window.
    sqlite_store.add([gpu(0, f"2026-11-29T14:11:0{i}.000", 90.0, 600.0 + i) for i in range(1, 5)])
    got = scrape(collector)
    assert [k[1] for k in got if k[0] == "dsmon_gpu_power_watts"] == [labels(**GPU0)]
    assert got[("dsmon_gpu_power_watts", labels(**GPU0))] == 604.0


def test_iteration_lines_and_unknown_rank(sqlite_store: Store) -> None:
    # Megatron-DeepSpeed prints from the last rank with no [Rank N] prefix: rank unknown.
    it = IterationRecord(
        src=src(900, rank=None),
        step=20,
        fmt="megatron",
        iteration=20,
        loss=6.0148,
        loss_scale=4096.0,
        grad_norm=2.5,
        elapsed_ms=812.5,
    )
    sqlite_store.add([it])
    got = scrape(StoreCollector(sqlite_store))
    no_rank = {**RANK0, "rank": ""}
    assert got[("dsmon_loss", labels(**no_rank))] == 6.0148
    assert got[("dsmon_iteration_seconds", labels(**no_rank))] == 0.8125
    assert got[("dsmon_loss_scale", labels(**no_rank))] == 4096.0


def test_runs_gone_from_the_store_are_forgotten_and_empty_store_scrapes(
    sqlite_store: Store,
) -> None:
    collector = StoreCollector(sqlite_store)
    assert [k for k in scrape(collector) if not k[0].startswith("python_")] == []
    sqlite_store.add([timer_184()])
    scrape(collector)
    assert set(collector._views) == {"z2"}


def test_registering_does_not_query_the_store() -> None:
    class Down:
        def runs(self) -> list[object]:
            raise AssertionError("queried at registration")

    registry = CollectorRegistry()
    registry.register(StoreCollector(Down()))  # type: ignore[arg-type]
