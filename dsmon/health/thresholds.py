"""Every number the health rules compare against, with where it comes from.

A verdict is only as trustworthy as its threshold, so no rule hides a literal: each limit
lives here with its source (DeepSpeed's own defaults and code, the tuning-guide seeds in
``shared/seeds/`` where they hold up, published measurements) or, where no source gives one,
the reasoning behind the choice. Changing a policy is editing this file.
"""

from __future__ import annotations

# --- communication buckets (elements, not bytes) ----------------------------------------------
#: seed 000 section 11.2: "the best value is usually 2e8 - 5e8"; smaller means many calls and
#: launch overhead, larger means more memory held by the buckets. DeepSpeed's default is 5e8
#: (runtime/zero/config.py). The seed's other advice, "1/8 of the node's memory", confuses
#: elements with bytes and is not used.
BUCKET_MIN = 2e8
BUCKET_MAX = 5e8

# --- ZeRO-3 parameter management (elements) -----------------------------------------------------
#: (low, high) sane ranges. Defaults: max_live 1e9, prefetch 5e7, persistence 1e5, sub_group 1e9
#: (runtime/zero/config.py). The HF DeepSpeed integration recommends prefetch = 0.9 * hidden^2
#: and persistence = 10 * hidden, which for hidden sizes 1k-16k stays inside these ranges.
#: max_live below 1e8 forces re-gathers of released parameters; above 1e10 it lets 20 GB of
#: fp16 parameters stay live per GPU. A persistence threshold of 0 turns every bias and norm
#: into its own all-gather; above 1e7 large tensors stay unpartitioned on every GPU.
#: sub_group_size trades optimizer-step memory (large) against kernel launches (small); seed
#: 000's 1e8 is inside the range.
ZERO3_RANGES: dict[str, tuple[float, float]] = {
    "stage3_max_live_parameters": (1e8, 1e10),
    "stage3_prefetch_bucket_size": (5e6, 5e8),
    "stage3_param_persistence_threshold": (1e3, 1e7),
    "sub_group_size": (1e7, 1e10),
}

# --- optimizer / batch -------------------------------------------------------------------------
#: seed 000 section 2.2: with more than 32 accumulation steps, clip gradients.
GAS_CLIP_LIMIT = 32

# --- fp16 dynamic loss scaling ------------------------------------------------------------------
#: initial_scale_power: DeepSpeed's default is 16. Each power above what the model needs costs
#: about `hysteresis` skipped steps at the start (the corpus run fp16_zero2_real_overflow
#: overflowed repeatedly from 2^24); below 8 small gradients underflow and climbing back takes
#: one loss_scale_window per doubling.
INITIAL_SCALE_POWER_RANGE = (8, 24)
#: loss_scale_window: at the ceiling the scale doubles every `window` clean steps and then
#: overflows, so about hysteresis / (window + hysteresis) of all steps are skipped: 0.2 % at
#: DeepSpeed's default 1000, 2 % at 100, 28 % at the corpus run fp16_zero0's 5.
LOSS_SCALE_WINDOW_MIN = 100
#: hysteresis: overflows tolerated before the scale is halved (default 2). Above 4 a scale that
#: is genuinely too high costs that many skipped steps per halving.
HYSTERESIS_RANGE = (1, 4)
#: min_loss_scale: the run raises "Current loss scale already at minimum" when it must halve
#: below it, so the floor should leave room for this many halvings below the initial scale.
MIN_SCALE_HEADROOM_HALVINGS = 6

# --- ZeRO++ -----------------------------------------------------------------------------------
#: hpZ helps only across nodes (seed 000 section 11.11: "do not enable on a single node").
HPZ_MIN_NODES = 2

# --- communication share (runtime) ------------------------------------------------------------
#: seed 004: "communication overhead share < 25 %". Above half of every step, the run is
#: communication-bound (dsmon's choice of a fail line).
COMM_SHARE_WARN = 0.25
COMM_SHARE_FAIL = 0.50
#: seed 000 section 11.1's example flags "allgather = 60 ms (24 % of fwd)" and
#: "reduce_scatter = 110 ms (28 % of bwd)" as worth a look: the same 25 % line per phase.
PHASE_COMM_SHARE_WARN = 0.25
#: overlap efficiency = (compute + comm - step) / min(compute, comm): 1 = fully hidden,
#: 0 = serial. seed 000 section 11.3: overlap usually saves 30 %+, so below 0.3 it is not working.
OVERLAP_MIN = 0.30

# --- GPUs (NVML) ------------------------------------------------------------------------------
#: seed 004: "resource utilisation > 75 %". NVML's util is kernel-active time, an upper bound
#: on real SM use, so falling below it is a clear signal. Below 25 % the GPUs mostly wait.
GPU_UTIL_WARN = 75.0
GPU_UTIL_FAIL = 25.0
#: seed 004's code: rebalance when max(util) - min(util) > 0.3 (fraction), and its target
#: "balance > 0.8", read here as min/max of the per-GPU mean utilisation.
GPU_SPREAD_FAIL = 0.30
GPU_BALANCE_WARN = 0.80
#: NVML's "used" includes PyTorch's caching allocator's reserve, so a healthy run sits high;
#: above 95 % of the card a fragmentation OOM is near.
GPU_MEM_WARN_FRAC = 0.95
#: temperatures at which datacenter GPUs start thermal slowdown (A100/H100 ~85-90 C).
GPU_TEMP_WARN_C = 85.0
#: share of samples with a throttle reason set before it is reported.
THROTTLE_WARN_SHARE = 0.05
#: NVML clocks-event (throttle) reason bits (nvml.h nvmlClocksEventReason*).
THROTTLE_BITS: dict[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}
#: reasons that mean broken cooling or power delivery rather than a busy GPU.
THROTTLE_HW_BITS = 0x8 | 0x40 | 0x80

# --- loss scale (runtime) ---------------------------------------------------------------------
#: share of optimizer steps skipped for overflow. At DeepSpeed's defaults about 0.2 % are
#: (see LOSS_SCALE_WINDOW_MIN); above 1 % the scaler is fighting the model, above 10 % the
#: run is losing a tenth of its updates.
SKIPPED_WARN = 0.01
SKIPPED_FAIL = 0.10
#: the scale is "collapsing" when it is within this many halvings of min_loss_scale.
SCALE_COLLAPSE_HALVINGS = 4

# --- step time (runtime) ----------------------------------------------------------------------
#: steps left out as warm-up (the ThroughputTimer itself skips the first 2).
WARMUP_STEPS = 2
#: recent window for regression: the last 20 % of steps, at least 3.
RECENT_SHARE = 0.2
RECENT_MIN_STEPS = 3
#: recent median step time over the run's median (or inverse throughput ratio).
REGRESSION_WARN = 1.2
REGRESSION_FAIL = 1.5
#: a step slower than this many run medians is a spike.
SPIKE_FACTOR = 3.0

# --- MFU ------------------------------------------------------------------------------------
#: Megatron-LM on A100 (Narayanan et al., SC21, "Efficient Large-Scale Language Model Training
#: on GPU Clusters Using Megatron-LM"): 52 % of peak per GPU for a 1T model on 3072 GPUs. Well
#: tuned large runs reach 40-55 %; below 30 % there is usually something to fix. The seed's
#: "92 % compute efficiency" for a 175B run (seed 003) is beyond any published figure. The
#: evidence cites ``dsmon.peaks.A100_REFERENCE`` (the dashboard's band) next to the verdict.
MFU_WARN = 0.30

# --- stalled run ------------------------------------------------------------------------------
#: no new step for max(STALL_MIN_S, STALL_FACTOR x median step time) while the collector is
#: alive: well before NCCL's default 600 s collective timeout kills the job.
STALL_MIN_S = 30.0
STALL_FACTOR = 5.0
NCCL_TIMEOUT_S = 600.0
