"""Prometheus exposition of what the store holds: the latest step figures and GPU samples.

Sites that already run Prometheus and Grafana want DeepSpeed's numbers next to the rest of
their cluster, so ``GET /metrics`` serves, per run, node and rank, the newest optimizer-step
timers, learning rate, throughput and loss, and per GPU its newest NVML sample. Units follow
Prometheus conventions (seconds, bytes, hertz, ratios 0-1) rather than the store's ms and %.

The figures come from a custom collector over the store (prometheus_client's ``Collector``
protocol), not from gauges set at ingest time, so every ingest server and the dashboard
export the same numbers, including records that reached the store some other way
(``dsmon import``, another ingest server on the same PostgreSQL). A scrape reads only what
is new since the previous one (``after_id``), so it stays cheap on a run of millions of
records; the first scrape, or one after a burst, looks back over the last
:data:`WINDOW_IDS` records only, and a series that has not been updated within that window
(a GPU that stopped reporting) is dropped rather than frozen at its last value.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from dsmon.model.records import (
    GpuSampleRecord,
    IterationRecord,
    Record,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.store.records.filter import RecordFilter
from dsmon.store.records.runs import RunInfo
from dsmon.store.store import Store

#: How far back (in store ids, shared by all runs) a first scrape looks for the latest values.
WINDOW_IDS = 100_000
#: Rows fetched per query while catching up.
PAGE_ROWS = 20_000
#: The kinds whose newest record per node/rank (or GPU) is exported.
KINDS_EXPORTED = ("timer", "step", "throughput", "iteration", "gpu")

STEP_LABELS = ("run", "node", "rank")
GPU_LABELS = ("run", "node", "gpu", "uuid", "model")

R = TypeVar("R", bound=Record)
# (metric name, record field, factor to the metric's unit, help): the figures are data.
Spec = tuple[str, str, float, str]

THROUGHPUT_METRICS: tuple[Spec, ...] = (
    (
        "dsmon_samples_per_second",
        "samples_per_s",
        1,
        "Samples/s of the newest ThroughputTimer line",
    ),
    (
        "dsmon_samples_per_second_avg",
        "running_avg_samples_per_s",
        1,
        "Its running average samples/s",
    ),
    ("dsmon_memory_allocated_bytes", "mem_allocated_bytes", 1, "Allocated memory it printed"),
    (
        "dsmon_memory_max_allocated_bytes",
        "max_mem_allocated_bytes",
        1,
        "Peak allocated memory it printed",
    ),
)
ITERATION_METRICS: tuple[Spec, ...] = (
    (
        "dsmon_iteration",
        "iteration",
        1,
        "Newest iteration a framework (Megatron, pipeline) reported",
    ),
    ("dsmon_loss", "loss", 1, "Main loss of the newest iteration line"),
    ("dsmon_loss_scale", "loss_scale", 1, "Loss scale of the newest iteration line"),
    ("dsmon_grad_norm", "grad_norm", 1, "Gradient norm of the newest iteration line"),
    (
        "dsmon_iteration_seconds",
        "elapsed_ms",
        1e-3,
        "Time per iteration of the newest iteration line",
    ),
    (
        "dsmon_iteration_samples_per_second",
        "samples_per_s",
        1,
        "Samples/s of the newest iteration line",
    ),
    (
        "dsmon_flops_per_second_per_gpu",
        "flops_per_s_per_gpu",
        1,
        "FLOP/s per GPU of the newest iteration line",
    ),
)
GPU_METRICS: tuple[Spec, ...] = (
    (
        "dsmon_gpu_utilization_ratio",
        "util_gpu_pct",
        0.01,
        "NVML utilization.gpu (time a kernel ran)",
    ),
    ("dsmon_gpu_memory_utilization_ratio", "util_mem_pct", 0.01, "NVML utilization.memory"),
    ("dsmon_gpu_memory_used_bytes", "mem_used_bytes", 1, "GPU memory used"),
    ("dsmon_gpu_memory_total_bytes", "mem_total_bytes", 1, "GPU memory total"),
    ("dsmon_gpu_power_watts", "power_w", 1, "Power draw"),
    ("dsmon_gpu_power_limit_watts", "power_limit_w", 1, "Enforced power limit"),
    ("dsmon_gpu_temperature_celsius", "temperature_c", 1, "GPU temperature"),
    ("dsmon_gpu_sm_clock_hertz", "sm_clock_mhz", 1e6, "SM clock"),
    ("dsmon_gpu_memory_clock_hertz", "mem_clock_mhz", 1e6, "Memory clock"),
    (
        "dsmon_gpu_clock_event_reasons",
        "throttle_reasons",
        1,
        "NVML clock-event (throttle) reasons bitmask",
    ),
    ("dsmon_gpu_pcie_tx_bytes_per_second", "pcie_tx_bytes_per_s", 1, "PCIe transmit throughput"),
    ("dsmon_gpu_pcie_rx_bytes_per_second", "pcie_rx_bytes_per_s", 1, "PCIe receive throughput"),
    ("dsmon_gpu_ecc_corrected_errors", "ecc_corrected", 1, "Corrected ECC errors NVML counted"),
    (
        "dsmon_gpu_ecc_uncorrected_errors",
        "ecc_uncorrected",
        1,
        "Uncorrected ECC errors NVML counted",
    ),
    ("dsmon_gpu_sm_active_ratio", "gpm_sm_active_pct", 0.01, "GPM SM activity (Hopper and newer)"),
    ("dsmon_gpu_tensor_active_ratio", "gpm_tensor_active_pct", 0.01, "GPM tensor-core activity"),
    ("dsmon_gpu_dram_bandwidth_ratio", "gpm_dram_bw_pct", 0.01, "GPM DRAM bandwidth used"),
    ("dsmon_gpu_last_xid", "xid", 1, "Last XID error NVML reported"),
)


def _series_key(rec: Record) -> tuple[Any, ...]:
    """Which exported series a record updates: one per kind and node/rank (or GPU, timer group)."""
    s = rec.src
    if isinstance(rec, GpuSampleRecord):
        return ("gpu", s.node or "", rec.gpu_index)
    if isinstance(rec, TimerRecord):
        return ("timer", s.node or "", s.rank, rec.group)
    return (rec.KIND, s.node or "", s.rank)


@dataclass
class _RunView:
    """The newest record of each series of one run, with its id, and how far we have read."""

    cursor: int = 0
    latest: dict[tuple[Any, ...], tuple[int, Record]] = field(default_factory=dict)

    def update(self, pairs: Iterable[tuple[int, Record]]) -> None:
        for rec_id, rec in pairs:
            self.latest[_series_key(rec)] = (rec_id, rec)

    def forget_older_than(self, oldest_id: int) -> None:
        """Drop series not updated since ``oldest_id``: a GPU or rank that went away."""
        self.latest = {k: v for k, v in self.latest.items() if v[0] > oldest_id}

    def of(self, cls: type[R]) -> list[R]:
        return [rec for _, rec in self.latest.values() if isinstance(rec, cls)]


class StoreCollector:
    """A prometheus_client collector exporting the newest figures of every run in a store.

    Register it on a ``CollectorRegistry``; each scrape calls :meth:`collect`. Thread-safe:
    concurrent scrapes read the store one at a time.

    Args:
        store: the store to read (any backend).
        window_ids: how many store ids back a first scrape looks.
    """

    def __init__(self, store: Store, window_ids: int = WINDOW_IDS) -> None:
        self.store = store
        self.window_ids = window_ids
        self._views: dict[str, _RunView] = {}
        self._lock = threading.Lock()

    def describe(self) -> list[Metric]:
        """Nothing up front: registering must not query the store (it may be down)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The current metric families, after reading what the store got since last time."""
        with self._lock:
            infos = self.store.runs()
            self._refresh(infos)
            families = _families(infos, self._views)
        yield from families

    def _refresh(self, infos: list[RunInfo]) -> None:
        """Bring every run's view up to date; forget runs the store no longer has."""
        names = {info.name for info in infos}
        self._views = {k: v for k, v in self._views.items() if k in names}
        for info in infos:
            view = self._views.setdefault(info.name, _RunView())
            if info.last_id > view.cursor:
                self._catch_up(info, view)

    def _catch_up(self, info: RunInfo, view: _RunView) -> None:
        oldest = max(view.cursor, info.last_id - self.window_ids, 0)
        for kind in KINDS_EXPORTED:
            if kind in info.kinds:
                view.update(self._read(info.name, kind, oldest))
        view.cursor = info.last_id
        view.forget_older_than(info.last_id - self.window_ids)

    def _read(self, run: str, kind: str, after_id: int) -> Iterator[tuple[int, Record]]:
        """Every record of ``kind`` after ``after_id``, a page at a time."""
        while True:
            page = self.store.id_records(
                RecordFilter(run, kind, after_id=after_id, limit=PAGE_ROWS)
            )
            yield from page
            if len(page) < PAGE_ROWS:
                return
            after_id = page[-1][0]


def _families(infos: list[RunInfo], views: dict[str, _RunView]) -> list[Metric]:
    """All metric families, each holding the samples of every run."""
    families: list[Metric] = [*_run_families(infos)]
    families += _timer_families(views)
    families += _step_families(views)
    families += _table_families(
        views, ThroughputRecord, THROUGHPUT_METRICS, STEP_LABELS, _rank_labels
    )
    families += _table_families(
        views, IterationRecord, ITERATION_METRICS, STEP_LABELS, _rank_labels
    )
    families += _table_families(views, GpuSampleRecord, GPU_METRICS, GPU_LABELS, _gpu_labels)
    families.append(_energy_family(views))
    return families


def _rank_labels(run: str, rec: Record) -> list[str]:
    rank = rec.src.rank
    return [run, rec.src.node or "", "" if rank is None else str(rank)]


def _gpu_labels(run: str, rec: GpuSampleRecord) -> list[str]:
    return [run, rec.src.node or "", str(rec.gpu_index), rec.uuid or "", rec.name or ""]


def _run_families(infos: list[RunInfo]) -> list[Metric]:
    records = GaugeMetricFamily(
        "dsmon_records", "Records stored per run and kind", labels=["run", "kind"]
    )
    last_step = GaugeMetricFamily(
        "dsmon_run_last_step", "Highest optimizer step seen in the run", labels=["run"]
    )
    for info in infos:
        for kind, n in info.kinds.items():
            records.add_metric([info.name, kind], n)
        if info.last_step is not None:
            last_step.add_metric([info.name], info.last_step)
    return [records, last_step]


def _timer_families(views: dict[str, _RunView]) -> list[Metric]:
    """``dsmon_timer_seconds``: each timer of the newest line of each group (fwd, bwd, step...)."""
    fam = GaugeMetricFamily(
        "dsmon_timer_seconds",
        "Newest DeepSpeed timer line per group (global: one optimizer step; micro: one micro-batch)",
        labels=[*STEP_LABELS, "group", "timer"],
    )
    for run, view in sorted(views.items()):
        for rec in view.of(TimerRecord):
            for timer, ms in rec.values_ms.items():
                fam.add_metric([*_rank_labels(run, rec), rec.group, timer], ms / 1000.0)
    return [fam]


def _step_families(views: dict[str, _RunView]) -> list[Metric]:
    """Step number, skipped steps and learning rate per param group, from ``step=N`` lines."""
    step = GaugeMetricFamily(
        "dsmon_step", "Newest optimizer step reported", labels=list(STEP_LABELS)
    )
    skipped = CounterMetricFamily(
        "dsmon_skipped_steps", "Steps skipped (fp16 overflow) so far", labels=list(STEP_LABELS)
    )
    lr = GaugeMetricFamily(
        "dsmon_learning_rate", "Learning rate per param group", labels=[*STEP_LABELS, "param_group"]
    )
    for run, view in sorted(views.items()):
        for rec in view.of(StepRecord):
            labels = _rank_labels(run, rec)
            if rec.step is not None:
                step.add_metric(labels, rec.step)
            if rec.skipped is not None:
                skipped.add_metric(labels, rec.skipped)
            for i, value in enumerate(rec.lr):
                lr.add_metric([*labels, str(i)], value)
    return [step, skipped, lr]


def _energy_family(views: dict[str, _RunView]) -> Metric:
    """NVML's energy counter only grows (it resets with the driver), so it is a counter."""
    fam = CounterMetricFamily(
        "dsmon_gpu_energy_joules", "Energy used since the driver loaded", labels=list(GPU_LABELS)
    )
    for run, view in sorted(views.items()):
        for rec in view.of(GpuSampleRecord):
            if rec.energy_j is not None:
                fam.add_metric(_gpu_labels(run, rec), rec.energy_j)
    return fam


def _table_families(
    views: dict[str, _RunView],
    cls: type[Record],
    table: tuple[Spec, ...],
    label_names: tuple[str, ...],
    labels_of: Callable[[str, Any], list[str]],
) -> list[Metric]:
    """One gauge family per table row; a field the record lacks (None) gives no sample."""
    families: list[Metric] = []
    for name, field_name, factor, doc in table:
        fam = GaugeMetricFamily(name, doc, labels=list(label_names))
        for run, view in sorted(views.items()):
            for rec in view.of(cls):
                value = getattr(rec, field_name)
                if value is not None:
                    fam.add_metric(labels_of(run, rec), float(value) * factor)
        families.append(fam)
    return families
