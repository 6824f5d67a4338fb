"""The flops-profiler records: one block of ``print_model_profile`` and its module tree.

Apart from the other log-parsed kinds of :mod:`dsmon.model.records` because this is the one
kind built of nested values (the aggregated section and the module tree of a block) and the
the largest: the catalogue of the one-line kinds reads more easily without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from dsmon.model.record_base import Record


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleAggregate:
    """One entry of the aggregated section: the top classes at one depth for one metric.

    ``metric`` is ``params``, ``macs`` or ``fwd_latency``; ``value`` is in the metric's base
    unit (count, MACs, ms).
    """

    depth: int
    metric: str
    module_class: str
    value: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ModuleProfile:
    """One node of the detailed per-module tree; ``path`` is the dotted module name."""

    path: str
    module_class: str
    depth: int
    params: float | None = None
    params_pct: float | None = None
    macs: float | None = None
    macs_pct: float | None = None
    fwd_latency_ms: float | None = None
    fwd_latency_pct: float | None = None
    fwd_flops_per_s: float | None = None
    extra: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FlopsProfileRecord(Record):
    """A flops-profiler block (summary, aggregated section, detailed tree).

    Counts are plain numbers (``params_per_gpu`` = 932610.0 for ``932.61 K``), rates are per
    second, latencies ms. ``width`` is the label column width (70 since v0.10.1, 60 before).
    ``partial`` says the block was cut (a run killed mid-profile, a pasted excerpt): what was
    read is kept, and a figure the block never reached is None, not a measurement.
    """

    KIND: ClassVar[str] = "flops_profile"
    profile_step: int | None = None
    world_size: int | None = None
    data_parallel_size: int | None = None
    model_parallel_size: int | None = None
    batch_size_per_gpu: int | None = None
    params_per_gpu: float | None = None
    params_total: float | None = None
    fwd_macs_per_gpu: float | None = None
    fwd_flops_per_gpu: float | None = None
    fwd_flops_total: float | None = None
    fwd_latency_ms: float | None = None
    fwd_flops_per_s_per_gpu: float | None = None
    bwd_latency_ms: float | None = None
    bwd_flops_per_s_per_gpu: float | None = None
    fwd_bwd_flops_per_s_per_gpu: float | None = None
    step_latency_ms: float | None = None
    iter_latency_ms: float | None = None
    flops_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None
    bwd_factor: float | None = None
    width: int | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    top_modules: tuple[ModuleAggregate, ...] = ()
    modules: tuple[ModuleProfile, ...] = ()
    partial: bool = False
