"""Every number the health rules compare against, with where it comes from.

A verdict is only as trustworthy as its threshold, so no rule hides a literal: each limit
lives here with its source (DeepSpeed's own defaults, code and documentation, published
measurements) or, where no source gives one, the reasoning behind dsmon's choice. Changing a policy is editing this file.
"""

from __future__ import annotations

from dsmon.analysis import steps, stragglers
from dsmon.store.gpu import rows as gpu_rows

# --- communication buckets (elements, not bytes) ----------------------------------------------
#: DeepSpeed's default is 5e8 (runtime/zero/config.py), the value its config-json docs and
#: ZeRO tutorial (https://www.deepspeed.ai/tutorials/zero/) use. Smaller buckets mean many
#: calls and launch overhead, larger ones more memory held by the buckets; 2e8 as the lower
#: line is dsmon's choice. Sizes count elements, not bytes.
BUCKET_MIN = 2e8
BUCKET_MAX = 5e8

# --- ZeRO-3 parameter management (elements) -----------------------------------------------------
#: (low, high) sane ranges. Defaults: max_live 1e9, prefetch 5e7, persistence 1e5, sub_group 1e9
#: (runtime/zero/config.py). The HF DeepSpeed integration recommends prefetch = 0.9 * hidden^2
#: and persistence = 10 * hidden, which for hidden sizes 1k-16k stays inside these ranges.
#: max_live below 1e8 forces re-gathers of released parameters; above 1e10 it lets 20 GB of
#: fp16 parameters stay live per GPU. A persistence threshold of 0 turns every bias and norm
#: into its own all-gather; above 1e7 large tensors stay unpartitioned on every GPU.
#: sub_group_size trades optimizer-step memory (large) against kernel launches (small).
ZERO3_RANGES: dict[str, tuple[float, float]] = {
    "stage3_max_live_parameters": (1e8, 1e10),
    "stage3_prefetch_bucket_size": (5e6, 5e8),
    "stage3_param_persistence_threshold": (1e3, 1e7),
    "sub_group_size": (1e7, 1e10),
}

# --- optimizer / batch -------------------------------------------------------------------------
#: with more than 32 accumulation steps, clip gradients (dsmon's line: long accumulation sums
#: many micro-batches into one update, so one bad batch weighs more).
GAS_CLIP_LIMIT = 32

# --- fp16 dynamic loss scaling ------------------------------------------------------------------
#: initial_scale_power: DeepSpeed's default is 16. Each power above what the model needs costs
#: about `hysteresis` skipped steps at the start (a real fp16 run overflowed repeatedly when
#: started from 2^24); below 8 small gradients underflow and climbing back takes
#: one loss_scale_window per doubling.
INITIAL_SCALE_POWER_RANGE = (8, 24)
#: loss_scale_window: at the ceiling the scale doubles every `window` clean steps and then
#: overflows, so about hysteresis / (window + hysteresis) of all steps are skipped: 0.2 % at
#: DeepSpeed's default 1000, 2 % at 100, 28 % at a window of 5.
LOSS_SCALE_WINDOW_MIN = 100
#: hysteresis: overflows tolerated before the scale is halved (default 2). Above 4 a scale that
#: is genuinely too high costs that many skipped steps per halving.
HYSTERESIS_RANGE = (1, 4)
#: min_loss_scale: the run raises "Current loss scale already at minimum" when it must halve
#: below it, so the floor should leave room for this many halvings below the initial scale.
MIN_SCALE_HEADROOM_HALVINGS = 6

# --- ZeRO++ -----------------------------------------------------------------------------------
#: hpZ helps only across nodes: it keeps a secondary copy per node to cut inter-node traffic
#: (ZeRO++ paper, https://arxiv.org/abs/2306.10209), so on one node there is nothing to save.
HPZ_MIN_NODES = 2

# --- communication share (runtime) ------------------------------------------------------------
#: exposed communication above a quarter of each step is worth a look, above half the run is
#: communication-bound (dsmon's choice of both lines).
COMM_SHARE_WARN = 0.25
COMM_SHARE_FAIL = 0.50
#: the same 25 % line per phase: all-gathers against fwd, reductions against bwd.
PHASE_COMM_SHARE_WARN = 0.25
#: overlap efficiency = (compute + comm - step) / min(compute, comm): 1 = fully hidden,
#: 0 = serial. Below 0.3 overlap is hardly working (dsmon's choice).
OVERLAP_MIN = 0.30

# --- ZeRO-3 parameter coordinator (DeepSpeed 0.10.0's timers) -----------------------------------
#: parameter fetch time (wait + submit) against the fwd + bwd it runs in: the same quarter as
#: the exposed-communication line above (dsmon's choice), since both are communication the
#: step waits for.
COORD_FETCH_SHARE_WARN = 0.25
#: waiting for in-flight parameters at half of the fetch time or more means the transfers are
#: not hidden behind compute: bandwidth or topology, read before gather and submission.
COORD_WAIT_LEADS = 0.50
#: suggested prefetch bucket: double the current one within these bounds (DeepSpeed's default
#: 5e7 is the floor; 5e8 is the top of ZERO3_RANGES' sane range).
PREFETCH_BUCKET_DEFAULT = 5e7
PREFETCH_BUCKET_SUGGEST = (PREFETCH_BUCKET_DEFAULT, BUCKET_MAX)
#: DeepSpeed's defaults (runtime/zero/config.py): persistence 1e5, max live parameters 1e9.
PERSISTENCE_DEFAULT = 1e5
MAX_LIVE_DEFAULT = 1e9

# --- network-aware advice (comms logger) --------------------------------------------------------
#: inter-node bus bandwidth at or below which compressed communication pays: DeepSpeed's 1-bit
#: and 0/1 Adam and 1-bit LAMB tutorials target "communication-constrained clusters" (Ethernet),
#: and about 25 Gbps (a 25 GbE link) is where dsmon draws that line.
LOW_INTERNODE_GBPS = 25.0
#: above this (InfiniBand EDR / 100 GbE and faster, dsmon's choice) compressing the gradients
#: costs compute and convergence care for little saved time.
FAST_INTERNODE_GBPS = 100.0

# --- memory fragmentation (ZeRO-3) --------------------------------------------------------------
#: see_memory_usage's CA (reserved by the caching allocator) at twice MA (held by tensors) or
#: more, with at least 1 GiB between them: half the reserved memory holds no tensor, the
#: allocator's blocks are cut up (dsmon's lines; small CPU-run figures stay below the gap).
RESERVED_OVER_ALLOCATED = 2.0
RESERVED_GAP_MIN_BYTES = 1 << 30
#: sub_group_size: DeepSpeed's default 1e9 (runtime/zero/config.py); suggest a tenth of the
#: current value, not below the low end of ZERO3_RANGES.
SUB_GROUP_DEFAULT = 1e9
SUB_GROUP_SHRINK = 10.0

# --- GPUs (NVML) ------------------------------------------------------------------------------
#: GPU utilisation under 75 % (dsmon's line): NVML's util is kernel-active time, an upper
#: bound on real SM use, so falling below it is a clear signal. Below 25 % the GPUs mostly wait.
GPU_UTIL_WARN = 75.0
GPU_UTIL_FAIL = 25.0
#: rebalance when max(util) - min(util) > 0.3 (fraction), and warn below a balance of 0.8,
#: min/max of the per-GPU mean utilisation (dsmon's lines).
GPU_SPREAD_FAIL = 0.30
GPU_BALANCE_WARN = 0.80
#: NVML's "used" includes PyTorch's caching allocator's reserve, so a healthy run sits high;
#: above 95 % of the card a fragmentation OOM is near.
GPU_MEM_WARN_FRAC = 0.95
#: temperatures at which datacenter GPUs start thermal slowdown (A100/H100 ~85-90 C).
GPU_TEMP_WARN_C = 85.0
#: share of samples with a throttle reason set before it is reported.
THROTTLE_WARN_SHARE = 0.05
#: reasons that mean broken cooling or power delivery rather than a busy GPU.
THROTTLE_HW_BITS = gpu_rows.HW_SLOWDOWN | gpu_rows.HW_THERMAL | gpu_rows.HW_POWER_BRAKE

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
WARMUP_STEPS = steps.WARMUP_STEPS
#: recent window for regression: the last 20 % of steps, at least 8, against at least as
#: many earlier ones. Fewer samples a side cannot tell a slowdown from a bimodal run's noise:
#: three throughput samples once "failed at 1.71x" with the newest among the fastest. Eight
#: against eight lets a rank test reach p = 0.0001 when every recent step is slower.
RECENT_SHARE = 0.2
RECENT_MIN_STEPS = 8
#: recent median step time over the earlier steps' median (or inverse throughput ratio).
REGRESSION_WARN = 1.2
REGRESSION_FAIL = 1.5
#: ... and the recent steps generally slower: a one-sided Mann-Whitney p-value below this
#: (dsmon's line: one false alarm in a hundred runs whose speed did not change).
REGRESSION_P = 0.01
#: a step slower than this many run medians is a spike.
SPIKE_FACTOR = 3.0

# --- MFU ------------------------------------------------------------------------------------
#: Megatron-LM on A100 (Narayanan et al., SC21, "Efficient Large-Scale Language Model Training
#: on GPU Clusters Using Megatron-LM"): 52 % of peak per GPU for a 1T model on 3072 GPUs. Well
#: tuned large runs reach 40-55 %; below 30 % there is usually something to fix. The
#: evidence cites ``dsmon.analysis.peaks.A100_REFERENCE`` (the dashboard's band) next to the verdict.
MFU_WARN = 0.30

# --- stalled run ------------------------------------------------------------------------------
#: no new step for max(STALL_MIN_S, STALL_FACTOR x median step time) while the collector is
#: alive: well before the collective timeout (below) kills the job.
STALL_MIN_S = 30.0
STALL_FACTOR = 5.0
#: DeepSpeed's collective timeout, ``deepspeed.constants.default_pg_timeout``, which
#: ``deepspeed.init_distributed`` gives the process group whatever its backend (NCCL's
#: watchdog and gloo alike): 30 minutes from 0.3.11 to 0.19.5, 10 minutes from 0.19.6, or
#: ``$DEEPSPEED_TIMEOUT`` minutes when set (read from each release's constants.py).
COLLECTIVE_TIMEOUT_S = 600.0
COLLECTIVE_TIMEOUT_BEFORE_S = 1800.0
COLLECTIVE_TIMEOUT_SINCE = (0, 19, 6)
#: silence (no step, no log line) for this long is shown as such: a run loading, compiling
#: or evaluating between steps, whose heartbeats tell whether its ranks are alive.
SILENT_AFTER_S = STALL_MIN_S

# --- every rank (dsmon run's probe) -----------------------------------------------------------
#: straggler score = slowest rank's busy time / the median rank's, per step (1.0 = balanced).
#: Its median over the steady steps above 1.2 means the others wait a sixth of each step for
#: one rank; above 1.5 a third (dsmon's lines; the same 20 % / 50 % as step regressions).
STRAGGLER_WARN = 1.2
STRAGGLER_FAIL = 1.5
#: the score needs this many steps seen by two or more ranks.
STRAGGLER_MIN_STEPS = 3
#: ... and one rank slowest in at least this share of them to be named: jitter makes the
#: ranks take turns (the measurements behind the line: dsmon.analysis.stragglers).
STRAGGLER_CONSISTENT_SHARE = stragglers.CONSISTENT_SHARE
#: a rank whose time before its forwards (data loading and host work outside the engine,
#: dsmon run's probe) is a tenth of its step is bound by its input: PyTorch's DataLoader
#: documentation has data loaded ahead of the step (worker processes, pinned memory,
#: prefetching), which leaves a rank no time waiting for it. A third of the step fails: the
#: same third as a straggler's (dsmon's lines).
INPUT_BOUND_WARN = 0.10
INPUT_BOUND_FAIL = 0.33
#: the probe writes a heartbeat at least every 5 s (collectors/probe/recorder.py KEEPALIVE_S):
#: a rank silent for three of them while others still report has stopped. A stopped rank's
#: last second of heartbeats is never written (the probe's writer stops with it), and the
#: collector polls every 0.5 s: the rule can fire about 16 s after the rank stopped, well
#: inside the collective timeout.
HEARTBEAT_SILENT_S = 15.0
#: a live rank in one phase longer than max(HANG_MIN_S, HANG_STEP_FACTOR x the median step)
#: is stuck (the same lines as the stall rule).
HANG_MIN_S = STALL_MIN_S
HANG_STEP_FACTOR = STALL_FACTOR
