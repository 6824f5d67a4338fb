"""Records dsmon measures itself rather than parses from a log: NVML samples, probe timings.

Apart from the log-parsed kinds of :mod:`dsmon.model.records` because no DeepSpeed line
produces them: dsmon's NVML poller and the probe ``dsmon run`` loads into every rank make them,
so what they hold is set by what dsmon samples, not by what a DeepSpeed version prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from dsmon.model.record_base import Record

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
    "start",  # the engine was called for the first time; nothing timed yet
    "forward",  # inside DeepSpeedEngine.forward
    "backward",  # inside DeepSpeedEngine.backward (the gradient reduction included)
    "step",  # inside DeepSpeedEngine.step
    "outside",  # between engine calls: data loading, the user's own code
    "exited",  # the process ended normally
    "failed",  # the process ended on an uncaught exception (``error`` names it)
)
#: The phases of a rank's last heartbeat when its process has ended.
ENDED_PHASES = ("exited", "failed")


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
