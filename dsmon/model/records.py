"""The one record model of dsmon: typed, immutable records for everything DeepSpeed reports.

Every parser, the store, the wire format and the dashboard speak these types. Units live in
field names (``_ms``, ``_bytes``, ``_gbps``, ``_flops``, ``_pct``, ``_w``); a value the source
did not give is ``None``, never 0. Every record carries its :class:`Source`, so it can be
traced to the line that produced it and stored exactly once (see :func:`record_key`).

The kinds come in three groups, in this order: the lines DeepSpeed prints (timers, steps,
throughput, comms, loss scale, memory, config, events, autotuner), the flops profiler's block
(the one kind built of nested values), and what dsmon measures itself (NVML samples and the
probe's per-rank timings), whose fields are set by what dsmon samples rather than by what a
DeepSpeed version prints. ``docs/records.md`` documents each kind and its JSON-lines form
(``dsmon.model.wire``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, TypeVar

# --- what every record is ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Source:
    """Where a record came from.

    ``line`` is the 1-based physical line number, ``offset`` the byte offset of that line's
    start in ``file``; ``sub`` tells apart several records made from one line (e.g. a comms
    table row and its op header). Together with ``run``, ``node`` and ``file`` they are the
    record's identity: re-reading the same bytes yields the same keys, so ingest is idempotent.
    """

    run: str
    file: str | None = None
    line: int | None = None
    offset: int | None = None
    node: str | None = None
    rank: int | None = None
    sub: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """Fields every record has.

    ``ts`` is ISO-8601 without zone (``2026-11-29T14:10:22.818``) in the clock of the machine
    that wrote the line: DeepSpeed's logger prints local time with no zone, so dsmon keeps it
    as printed. Lines with no timestamp of their own (print() output) inherit the nearest
    preceding one. ``step`` is the 1-based optimizer step the record belongs to, when known
    (see docs/records.md, "Step assignment").
    """

    KIND: ClassVar[str] = ""
    src: Source
    ts: str | None = None
    step: int | None = None


# --- wall_clock_breakdown and other ``time (ms) | name: value`` lines ---------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TimerRecord(Record):
    """One ``time (ms) | a: 1.00 | b: 2.00`` line.

    ``group`` names the timer set: ``micro`` (the engine's ``*_microstep`` timers, one
    micro-batch), ``global`` (fwd/bwd/bwd_inner/bwd_allreduce/step summed over the GAS window),
    ``zero_optimizer``, ``zero3_optimizer``, ``fp16_optimizer``, ``zero3_coordinator`` (the
    eight PartitionedParameterCoordinator timers, v0.10.0), ``act_ckpt`` (activation
    checkpointing profile), ``pipeline``, ``moe``, ``swap`` (ZeRO-Infinity NVMe swapper),
    ``megatron`` (Megatron-LM / GPT-NeoX own timers) or ``other``.
    ``values_ms`` is keyed by the canonical (v0.10.1+) timer name: ``forward_microstep`` from an
    old log is stored as ``fwd_microstep``, so every version charts the same way; ``legacy``
    says the line used the old names or the ``rank=0`` prefix. ``micro_step`` is the 0-based
    index of the micro-batch inside its optimizer step (micro lines only). Megatron's
    ``(min, max) time across ranks (ms)`` block gives the maximum over ranks in ``values_ms``
    and the minimum in ``min_values_ms`` (empty for every other line).
    """

    KIND: ClassVar[str] = "timer"
    group: str
    values_ms: Mapping[str, float]
    micro_step: int | None = None
    legacy: bool = False
    min_values_ms: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class CoordinatorEventRecord(Record):
    """ZeRO-3 coordinator profiler line ``name: count = N, numel = M`` (v0.10.0 only)."""

    KIND: ClassVar[str] = "coordinator_event"
    event: str
    count: int
    numel: int


# --- progress -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StepRecord(Record):
    """``step=N, skipped=S, lr=[...], mom=[...]``: the optimizer step that just finished.

    ``lr`` has one entry per param group; ``mom`` one tuple per param group (a 1-tuple for
    SGD-style momentum floats).
    """

    KIND: ClassVar[str] = "step"
    skipped: int | None = None
    lr: tuple[float, ...] = ()
    mom: tuple[tuple[float, ...], ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputRecord(Record):
    """ThroughputTimer line, old (``N/M, SamplesPerSec=``) and new (``epoch=/micro_step=/``) form.

    Samples per second are global (train_batch_size based). Memory is the GiB figure the line
    printed, converted to bytes.
    """

    KIND: ClassVar[str] = "throughput"
    epoch: int | None = None
    micro_step: int | None = None
    global_step: int | None = None
    samples_per_s: float | None = None
    running_avg_samples_per_s: float | None = None
    mem_allocated_bytes: int | None = None
    max_mem_allocated_bytes: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class IterationRecord(Record):
    """A framework's own per-iteration line: Megatron-DeepSpeed or the pipeline engine.

    ``fmt`` is ``megatron`` or ``pipeline``. ``losses`` holds every named loss the line printed
    (``lm loss``, ``loss``, ...); ``loss`` is the main one. ``tokens_per_gpu_per_s`` is
    Megatron-DeepSpeed's ``tokens per gpu per second (tgs)``, ``actual_seqlen`` the sequence
    length it reports for the iteration, ``num_zeros`` Megatron's count of gradient elements
    that are zero (``--log-num-zeros-in-grad``).
    """

    KIND: ClassVar[str] = "iteration"
    fmt: str
    iteration: int | None = None
    total_iterations: int | None = None
    consumed_samples: int | None = None
    consumed_tokens: int | None = None
    elapsed_ms: float | None = None
    lr: float | None = None
    global_batch_size: int | None = None
    loss: float | None = None
    losses: Mapping[str, float] = field(default_factory=dict)
    loss_scale: float | None = None
    grad_norm: float | None = None
    skipped_iterations: int | None = None
    nan_iterations: int | None = None
    samples_per_s: float | None = None
    flops_per_s_per_gpu: float | None = None
    tokens_per_gpu_per_s: float | None = None
    actual_seqlen: int | None = None
    num_zeros: int | None = None


# --- comms logger -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CommOpRecord(Record):
    """One verbose comms-logger line: a single collective as it happened."""

    KIND: ClassVar[str] = "comm_op"
    op: str
    caller: str | None = None
    latency_ms: float | None = None
    msg_size_bytes: int | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CommSummaryRecord(Record):
    """One row of a ``log_summary()`` table: an op (and caller) at one message size.

    ``table`` is ``summary`` or ``straggler``; ``table_index`` counts the summary tables in a
    file (0-based), as a script may call ``log_summary()`` more than once.
    """

    KIND: ClassVar[str] = "comm_summary"
    table: str
    table_index: int
    op: str
    caller: str | None = None
    msg_size_bytes: int | None = None
    count: int | None = None
    total_latency_ms: float | None = None
    avg_latency_ms: float | None = None
    algbw_avg_gbps: float | None = None
    busbw_avg_gbps: float | None = None
    total_straggler_ms: float | None = None
    avg_straggler_ms: float | None = None


# --- loss scale, memory, config, events -----------------------------------------------------

LOSS_SCALE_EVENTS = (
    "overflow",  # a step skipped for overflow (with or without a scale change)
    "scale_down",  # the scale was reduced (Reducing dynamic loss scale ...)
    "scale_up",  # the scale was raised (Increasing dynamic loss scale ...)
    "hysteresis",  # overflow absorbed by hysteresis, scale kept
    "hysteresis_restored",  # consecutive_hysteresis restored the counter
    "static",  # static loss scale in use
    "set",  # external loss scale set
    "bf16_overflow",  # bf16 non-finite gradients, step skipped
    "min_scale",  # scale already at its minimum: the run stops
)


@dataclass(frozen=True, slots=True, kw_only=True)
class LossScaleRecord(Record):
    """An fp16 loss-scaler or bf16 overflow message of any DeepSpeed generation."""

    KIND: ClassVar[str] = "loss_scale"
    event: str
    iteration: int | None = None
    attempted_scale: float | None = None
    new_scale: float | None = None
    hysteresis: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryRecord(Record):
    """A ``see_memory_usage`` block (``memory_breakdown: true``): GB figures as bytes.

    Megatron's per-rank ``(after N iterations) memory (MB)`` line is one too: its ``reserved``
    figures are the ``cached`` ones, it prints no CPU figures, and ``label`` is ``after N
    iterations``.
    """

    KIND: ClassVar[str] = "memory"
    label: str
    allocated_bytes: int | None = None
    max_allocated_bytes: int | None = None
    cached_bytes: int | None = None
    max_cached_bytes: int | None = None
    cpu_used_bytes: int | None = None
    cpu_used_pct: float | None = None


CONFIG_ORIGINS = (
    "user_json",  # the ``json = {...}`` block: the user's dict as given
    "engine",  # the same dict, read from the engine by dsmon run's probe (its ``engine`` line)
    "effective",  # the attribute dump: values after defaults and batch inference
    "file",  # a ds_config.json read from disk
    "autotune_optimal",  # the autotuner's ds_config_optimal.json: its advice, not the run's config
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord(Record):
    """A DeepSpeed config: the user's JSON, the effective attribute dump, or a file.

    ``partial`` marks a dump that was cut (or whose start is missing): a key it lacks may have
    been printed outside what was read, so it says nothing about that setting.
    """

    KIND: ClassVar[str] = "config"
    origin: str
    config: Mapping[str, Any]
    partial: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class MonitorPointRecord(Record):
    """One point of a DeepSpeed monitor series (csv_monitor): x is ``global_samples``."""

    KIND: ClassVar[str] = "monitor"
    tag: str
    samples: int
    value: float | None
    backend: str = "csv"


@dataclass(frozen=True, slots=True, kw_only=True)
class AutotuneExperimentRecord(Record):
    """One autotuner experiment: its ``metrics.json`` (µs figures converted to ms) and config."""

    KIND: ClassVar[str] = "autotune_exp"
    name: str
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    step_ms: float | None = None
    latency_ms: float | None = None
    flops_per_s_per_gpu: float | None = None
    throughput_samples_per_s: float | None = None
    num_gpus: int | None = None
    num_nodes: int | None = None
    ds_config: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AutotuneSummaryRecord(Record):
    """One row of the autotuner's ``summary.txt`` (best experiment per tuning space)."""

    KIND: ClassVar[str] = "autotune_summary"
    tuning_space: str
    num_experiments: int | None = None
    best_metric_val: float | None = None
    best_exp_name: str | None = None
    tuning_duration_s: float | None = None  # "Tuning completed in H:MM:SS.ffffff"
    total_experiments: int | None = None  # "... Total number of experiments: N."


EVENT_NAMES = (
    "deepspeed_version",  # DeepSpeed info: version=..., git-hash=...
    "dist_backend",  # Initializing TorchBackend in DeepSpeed with backend nccl
    "world_info",  # launcher WORLD INFO DICT / dist_world_size / nnodes
    "optimizer",  # DeepSpeed Basic/Final Optimizer = X
    "zero_stage",  # Creating ... ZeRO stage N optimizer
    "zero_init",  # ZeRO set-up figures: bucket sizes, ZeRO-3 persistent parameters
    "worker_exit",  # launcher: Process N exits successfully / exits with return code = N
    "job_end",  # dsmon run: the job ended with status N (the launch command's exit status)
    "signalled",  # stopped by a signal: a launcher's "received SIGINT", a KeyboardInterrupt
    "traceback",  # a worker's exception (last line of a [rankN]: traceback, C++ terminate)
    "oom",  # CUDA out of memory
    "nccl_error",  # NCCL timeout / watchdog / error
    "autotuning",  # autotuner progress: start, resources, profile run, optimal exp, end
    "allocator_flush",  # ZeRO-3: "N pytorch allocator cache flushes since last step"
    "unparsed",  # dsmon: N lines of a known kind not read, with the first (parse/unparsed.py)
    "pipeline_stage",  # PipelineEngine: RANK=r STAGE=s LAYERS=n [a, b) STAGE_PARAMS=... TOTAL_PARAMS=...
    "engine_info",  # dsmon's probe: DeepSpeed version, comm backend, world size, device
)
#: The events that report a failure of a worker.
FAILURE_EVENTS = ("traceback", "oom", "nccl_error")
#: The ``detail`` key of a failure or ``signalled`` event printed on a line without a time of
#: its own (a worker's traceback): its ``ts`` is the last stamped line's, a time it came after.
UNSTAMPED = "unstamped"
#: The event of dsmon's probe that stands in for the version and launcher lines a log at
#: DeepSpeed's default level lacks.
ENGINE_INFO = "engine_info"
#: How a ``world_info`` event's message starts when it is the line DeepSpeed's launcher prints
#: once per node at each launch: what tells a job launched again from the one before.
LAUNCH_TEXT = "WORLD INFO DICT"


@dataclass(frozen=True, slots=True, kw_only=True)
class EventRecord(Record):
    """A run-level happening worth showing or checking: version, crash, exit, OOM, ..."""

    KIND: ClassVar[str] = "event"
    name: str
    message: str = ""
    detail: Mapping[str, Any] = field(default_factory=dict)


# --- the flops profiler's block -------------------------------------------------------------


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


# --- NVML ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSampleRecord(Record):
    """One NVML poll of one GPU. ``util_gpu_pct`` is NVML's kernel-active time, not SM occupancy."""

    KIND: ClassVar[str] = "gpu"
    gpu_index: int
    uuid: str | None = None
    name: str | None = None
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    gpm_sm_active_pct: float | None = None
    gpm_tensor_active_pct: float | None = None
    gpm_dram_bw_pct: float | None = None
    xid: int | None = None


# --- dsmon's per-rank probe (``dsmon run``) -----------------------------------------------

PROBE_PHASES = (
    "init",  # the engine is being built (inside deepspeed.initialize)
    "idle",  # the engine is built and not yet called: the script loads, compiles, waits
    "start",  # the engine was called for the first time (a probe installed after it was built)
    "forward",  # inside DeepSpeedEngine.forward
    "backward",  # inside DeepSpeedEngine.backward (the gradient reduction included)
    "step",  # inside DeepSpeedEngine.step
    "outside",  # between engine calls: data loading, the user's own code
    "exited",  # the process ended normally
    "failed",  # the process ended on an uncaught exception (``error`` names it)
)
#: The phases of a rank's last heartbeat when its process has ended.
ENDED_PHASES = ("exited", "failed")
#: The phases of a rank that has not begun its first step.
STARTING_PHASES = ("init", "idle", "start")


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveStat:
    """One rank's collectives of one op, size bucket and group size in one optimizer step.

    ``bucket_bytes`` is the power of two at or below each call's message size (None: the
    probe could not size the call); ``msg_bytes`` sums the calls' message sizes as
    nccl-tests counts them (an all-gather's whole output, a reduce-scatter's whole input);
    ``time_ms`` sums their time on the rank's clock (``cpu``: host time; ``cuda``: CUDA
    events on the calling stream), waiting for the other ranks included; None for calls
    made with ``async_op=True``, which return before their work is done.
    """

    op: str
    bucket_bytes: int | None = None
    group_size: int | None = None
    calls: int = 0
    msg_bytes: int | None = None
    time_ms: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankStepRecord(Record):
    """One rank's optimizer step, timed by the probe inside that rank (every rank, not rank 0).

    ``fwd_ms``/``bwd_ms``/``step_ms`` sum the engine calls of the step's gradient-accumulation
    window (``micro_steps`` forwards); ``clock`` says how: ``cuda`` (CUDA events, device time)
    or ``cpu`` (the monotonic clock). ``total_ms`` is the host time since the rank's previous
    step ended (data loading and the user's code included). ``comm_ms`` is the host time the
    rank spent blocked in DeepSpeed's collectives, None when none blocked: a rank that waits
    for a slower one spends that wait there, so ``total_ms - comm_ms`` is the time the rank
    itself needed. ``skipped_steps`` (the engine's count of steps skipped on overflow so far)
    and ``loss_scale`` (the optimizer's, after the step) are what the log's ``step=`` and
    loss-scale lines report at INFO; probes before 2026-12-05 did not write them.
    ``input_ms`` is the host time outside the engine before the window's forwards, since the
    rank's previous engine call ended (data loading and the script's host work; None on a
    rank's first step). ``loss`` is the mean of the losses the window passed to
    ``engine.backward`` (this rank's), ``grad_norm`` the engine's global gradient norm after
    the step (None when not finite: an overflow), and ``collectives`` the step's collective
    calls summed per op, size bucket and group (:class:`CollectiveStat`); probes before
    2026-12-06 wrote none of these.
    """

    KIND: ClassVar[str] = "rank_step"
    fwd_ms: float | None = None
    bwd_ms: float | None = None
    step_ms: float | None = None
    comm_ms: float | None = None
    total_ms: float | None = None
    micro_steps: int | None = None
    clock: str | None = None
    skipped_steps: int | None = None
    loss_scale: float | None = None
    input_ms: float | None = None
    loss: float | None = None
    grad_norm: float | None = None
    collectives: tuple[CollectiveStat, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRecord(Record):
    """Where one rank is now: its phase (one of :data:`PROBE_PHASES`) and since when.

    Written every second while the phase changes and at least every 5 s while it does not,
    so a heartbeat that stops means a stopped or dead process. ``step`` is the step the rank
    is working on; ``collective`` names the ``deepspeed.comm`` call it is in (``all_reduce``),
    when it is in one; ``phase_since`` is when it entered the phase (same clock as ``ts``).
    ``error`` is the uncaught exception (``RuntimeError: ...``) of a ``failed`` rank.
    """

    KIND: ClassVar[str] = "heartbeat"
    phase: str
    collective: str | None = None
    phase_since: str | None = None
    pid: int | None = None
    error: str | None = None


# --- the catalogue of kinds, and a record's identity ---------------------------------------

RECORD_TYPES: tuple[type[Record], ...] = (
    TimerRecord,
    CoordinatorEventRecord,
    StepRecord,
    ThroughputRecord,
    IterationRecord,
    FlopsProfileRecord,
    CommOpRecord,
    CommSummaryRecord,
    LossScaleRecord,
    MemoryRecord,
    ConfigRecord,
    MonitorPointRecord,
    AutotuneExperimentRecord,
    AutotuneSummaryRecord,
    EventRecord,
    GpuSampleRecord,
    RankStepRecord,
    HeartbeatRecord,
)
KINDS: dict[str, type[Record]] = {t.KIND: t for t in RECORD_TYPES}


def record_key(rec: Record) -> tuple[str, str, str, str, int, str]:
    """The identity under which a record is stored once: source position, not content.

    Records from a file are keyed by byte offset when known (stable across restarts of a
    tailer), else by line number; GPU samples by GPU index and timestamp.
    """
    s = rec.src
    if isinstance(rec, GpuSampleRecord):
        pos = f"g{rec.gpu_index}@{rec.ts}"
    else:
        pos = source_position(s.offset, s.line, rec.ts)
    return (s.run, s.node or "", s.file or "", pos, s.sub, rec.KIND)


def source_position(offset: int | None, line: int | None, ts: str | None) -> str:
    """The position part of a (non-GPU) record's identity: byte offset, else line, else time.

    Apart from :func:`record_key` because the ingest server keys a checked JSON line
    without building its record first.
    """
    if offset is not None:
        return f"o{offset}"
    if line is not None:
        return f"l{line}"
    return f"t{ts}"


R = TypeVar("R", bound=Record)
#: Each kind's field names, read once: :func:`with_step` copies them.
_FIELDS: dict[type[Record], tuple[str, ...]] = {
    t: tuple(f.name for f in fields(t)) for t in RECORD_TYPES
}


def with_step(rec: R, step: int) -> R:
    """A new record equal to ``rec`` but for its step: ``dataclasses.replace`` at half its cost.

    The step clock learns a record's step after its parser made it, on every line of a log;
    ``replace`` runs the whole ``__init__`` again for values that passed it already. Records
    stay immutable: this builds a new one, field by field, as a frozen dataclass's own
    ``__init__`` does.
    """
    new = object.__new__(type(rec))
    for name in _FIELDS[type(rec)]:
        object.__setattr__(new, name, getattr(rec, name))
    object.__setattr__(new, "step", step)
    return new
