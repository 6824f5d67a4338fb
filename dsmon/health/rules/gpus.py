"""GPU rules on NVML samples: utilisation, balance, memory, throttling, hardware errors.

NVML's utilisation is kernel-active time (any kernel running), not SM occupancy, so a high
figure proves less than it seems while a low one is a clear signal. The samples come from the
collectors' NVML poller; without them (no NVML, a CPU run) every rule here says UNKNOWN or
not applicable rather than guessing.
"""

from __future__ import annotations

import pandas as pd

from dsmon.health import thresholds as th
from dsmon.health.gather import GPU_SUMMARY
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status, percent
from dsmon.health.registry import rule
from dsmon.health.stall import STEP_TIME_KINDS, last_ts
from dsmon.health.verdicts import not_applicable
from dsmon.store.gpu.rows import SW_POWER_CAP, SW_THERMAL, THROTTLE_BITS


def samples(inputs: HealthInputs) -> pd.DataFrame:
    """The run's per-GPU summary (``dsmon.store.gpu.buckets.summary``: one row per GPU)."""
    return inputs.frame(GPU_SUMMARY)


def _none(inputs: HealthInputs) -> Finding:
    """The verdict when there are no samples: n/a on CPU, else UNKNOWN."""
    if inputs.facts.device == "cpu":
        return not_applicable("CPU run (no GPUs)")
    return Finding(Status.UNKNOWN, "no GPU samples: run the collector's NVML poller on each node")


def _window(df: pd.DataFrame) -> str:
    """The time span and sample count of the samples, for evidence."""
    n = int(df["samples"].sum())
    first, last = df["first_ts"].dropna(), df["last_ts"].dropna()
    if first.empty or last.empty:
        return f"{n} samples"
    return f"{n} samples, {first.min():%H:%M:%S}-{last.max():%H:%M:%S}"


def per_gpu_mean(df: pd.DataFrame, col: str) -> pd.Series:
    """Mean of a metric per GPU label (GPUs with no value left out), lowest first."""
    return df.set_index("gpu")[col].dropna().astype("float64").sort_values()


#: The rules of the run's ending (a crash, a hang, a stall): a low mean follows them only through
#: the samples taken after the last step, while the GPUs had no step to run (:func:`_low_causes`).
_ENDINGS = ("run.errors", "ranks.hang", "run.stalled")


def _after_last_step(inputs: HealthInputs, df: pd.DataFrame) -> tuple[float, float] | None:
    """Seconds of the samples' window after the run's last step, and the window's seconds.

    None when the window or the last step's time is not known.
    """
    first, last = df["first_ts"].dropna(), df["last_ts"].dropna()
    step = last_ts(inputs, STEP_TIME_KINDS)
    if first.empty or last.empty or step is None:
        return None
    window = (last.max() - first.min()).total_seconds()
    return max((last.max() - step).total_seconds(), 0.0), window


def _low_causes(inputs: HealthInputs, df: pd.DataFrame, low: float) -> tuple[Evidence, ...]:
    """Evidence of the samples after the last step, when an ending could explain ``low``.

    An ending lowers a GPU's mean only through the samples taken after it, while the GPU had
    no step to run: it could explain the finding only if the mean over the rest, with those
    samples taken as idle, reaches the goal. Empty when it could not (or is not known).
    """
    tail = _after_last_step(inputs, df)
    if tail is None:
        return ()
    after, window = tail
    if not 0 < after < window or low * window / (window - after) < th.GPU_UTIL_WARN:
        return ()
    return (Evidence("samples after the last step", f"{after:.0f} s of {window:.0f} s"),)


@rule(
    "gpu.utilization",
    f"Every GPU is busy at least {th.GPU_UTIL_WARN:g} % of the time",
    "Mean NVML utilization.gpu (kernel-active time, not SM occupancy) per GPU over the "
    f"samples: below {th.GPU_UTIL_WARN:g} % the GPU waits on data, communication or the host. "
    "A crash, a hang or a stall is named as its cause only when the samples after the run's "
    "last step, taken as idle, are enough to bring the mean that low.",
    "gpu",
    page="gpus",
    follows=(*_ENDINGS, "ranks.straggler"),
)
def check_utilization(inputs: HealthInputs) -> Finding:
    """Judge the least busy GPU."""
    df = samples(inputs)
    if df.empty:
        return _none(inputs)
    util = per_gpu_mean(df, "util_gpu_pct")
    if util.empty:
        return Finding(Status.UNKNOWN, "the samples carry no utilisation")
    low_gpu, low = str(util.index[0]), float(util.iloc[0])
    ev = tuple(
        Evidence(f"{g} mean kernel-active", f"{v:.1f} %", _window(df))
        for g, v in util.head(4).items()
    )
    if low >= th.GPU_UTIL_WARN:
        return Finding(Status.PASS, f"least busy GPU {low_gpu}: {low:.1f} %", ev)
    status = Status.FAIL if low < th.GPU_UTIL_FAIL else Status.WARN
    after = _low_causes(inputs, df, low)
    return Finding(
        status,
        f"{low_gpu} is kernel-active only {low:.1f} % of the time (< {th.GPU_UTIL_WARN:g} %)",
        ev + after,
        "check comm.share and data loading (num_workers, pin_memory)",
        "text",
        follows=None if after else ("ranks.straggler",),
    )


@rule(
    "gpu.balance",
    "GPUs are evenly loaded",
    f"Spread of mean utilisation across GPUs: max - min above {th.GPU_SPREAD_FAIL:g} fails (a "
    f"rebalancing trigger); min/max below {th.GPU_BALANCE_WARN:g} warns (its "
    f"'balance > {th.GPU_BALANCE_WARN:g}' target).",
    "gpu",
    page="gpus",
)
def check_balance(inputs: HealthInputs) -> Finding:
    """Compare the most and least busy GPUs, and name mixed GPU models."""
    df = samples(inputs)
    if df.empty:
        return _none(inputs)
    util = per_gpu_mean(df, "util_gpu_pct")
    if len(util) < 2:
        return not_applicable(f"{len(util)} GPU with samples")
    lo, hi = float(util.iloc[0]), float(util.iloc[-1])
    spread, balance = (hi - lo) / 100.0, (lo / hi if hi > 0 else 1.0)
    models = sorted({str(n) for n in df.get("name", pd.Series(dtype=object)).dropna()})
    ev = (
        Evidence("busiest", f"{util.index[-1]} {hi:.1f} %", _window(df)),
        Evidence("least busy", f"{util.index[0]} {lo:.1f} %"),
        Evidence("max - min", f"{spread:.2f}"),
        Evidence("min / max", f"{balance:.2f}"),
        Evidence("GPU models", ", ".join(models) or "unknown", "NVML"),
    )
    mixed = (
        f"; mixed GPU models ({', '.join(models)}) run at the slowest one's pace"
        if len(models) > 1
        else ""
    )
    if spread > th.GPU_SPREAD_FAIL:
        return Finding(
            Status.FAIL,
            f"utilisation spread {spread:.2f} > {th.GPU_SPREAD_FAIL}{mixed}",
            ev,
            "find the straggler on the GPUs page heatmap",
            "text",
        )
    if balance < th.GPU_BALANCE_WARN:
        return Finding(Status.WARN, f"balance {balance:.2f} < {th.GPU_BALANCE_WARN}{mixed}", ev)
    return Finding(Status.PASS, f"balance {balance:.2f}, spread {spread:.2f}{mixed}", ev)


@rule(
    "gpu.memory",
    "GPU memory keeps some headroom",
    f"Peak NVML memory used / total per GPU: above {percent(th.GPU_MEM_WARN_FRAC)} a fragmentation OOM is near (NVML "
    "counts PyTorch's cached reserve too, so healthy runs sit high).",
    "gpu",
    page="gpus",
)
def check_memory(inputs: HealthInputs) -> Finding:
    """Warn when a GPU's peak memory use is above GPU_MEM_WARN_FRAC of the card."""
    df = samples(inputs)
    if df.empty:
        return _none(inputs)
    used = df.set_index("gpu")["mem_used_pct_max"].dropna().astype("float64").sort_values()
    if used.empty:
        return Finding(Status.UNKNOWN, "the samples carry no memory figures")
    top_gpu, top = str(used.index[-1]), float(used.iloc[-1])
    ev = (Evidence(f"{top_gpu} peak memory", f"{top:.1f} %", _window(df)),)
    if top / 100.0 <= th.GPU_MEM_WARN_FRAC:
        return Finding(Status.PASS, f"peak memory {top:.1f} % ({top_gpu})", ev)
    fix = '{"zero_optimization": {"stage": 3}}  // or lower train_micro_batch_size_per_gpu'
    return Finding(Status.WARN, f"{top_gpu} peaked at {top:.1f} % of its memory", ev, fix, "text")


def _share(df: pd.DataFrame, mask: int) -> float:
    """Share of samples with any of ``mask``'s throttle bits set (across every GPU).

    Per-bit counts are summed, so a sample with two of ``mask``'s bits counts twice: the
    rules' masks never hold two reasons that NVML reports together.
    """
    known = int(df["throttle_known"].sum())
    if not known:
        return 0.0
    hits = sum(int(df[f"thr_{bit}"].sum()) for bit in THROTTLE_BITS if bit & mask)
    return min(hits / known, 1.0)


@rule(
    "gpu.throttling",
    "GPU clocks are not throttled by heat or power faults",
    "NVML clock-event reasons: HW slowdown, HW thermal and power-brake slowdowns fail above "
    f"{percent(th.THROTTLE_WARN_SHARE)} of samples; SW thermal slowdown or temperatures of "
    f"{th.GPU_TEMP_WARN_C:g} C and more warn.",
    "gpu",
    page="gpus",
)
def check_throttling(inputs: HealthInputs) -> Finding:
    """Judge hardware and thermal throttling; a power cap alone is only reported."""
    df = samples(inputs)
    if df.empty:
        return _none(inputs)
    hw, thermal = _share(df, th.THROTTLE_HW_BITS), _share(df, SW_THERMAL)
    power = _share(df, SW_POWER_CAP)
    hottest = df["temperature_c_max"].dropna()
    temp = float(hottest.max()) if not hottest.empty else float("nan")
    ev = (
        Evidence("HW slowdown / HW thermal / power brake", f"{hw:.1%} of samples", _window(df)),
        Evidence("SW thermal slowdown", f"{thermal:.1%} of samples"),
        Evidence("SW power cap", f"{power:.1%} of samples"),
        Evidence("max temperature", f"{temp:.0f} C" if temp == temp else "unknown"),
    )
    if hw > th.THROTTLE_WARN_SHARE:
        return Finding(
            Status.FAIL,
            f"hardware slowdown in {hw:.1%} of samples: cooling or power delivery problem",
            ev,
            "nvidia-smi -q -d PERFORMANCE  # on the node",
            "text",
        )
    if thermal > th.THROTTLE_WARN_SHARE or temp >= th.GPU_TEMP_WARN_C:
        return Finding(
            Status.WARN, f"thermal throttling ({thermal:.1%} of samples, max {temp:.0f} C)", ev
        )
    note = f"; power-capped in {power:.1%} of samples (normal at full load)" if power else ""
    return Finding(Status.PASS, f"no thermal or hardware throttling{note}", ev)


def _max(df: pd.DataFrame, col: str) -> float | None:
    """Largest value of a column, None when absent or all missing."""
    if col not in df.columns or not df[col].notna().any():
        return None
    return float(pd.to_numeric(df[col], errors="coerce").max())


@rule(
    "gpu.errors",
    "No ECC or XID errors",
    "Uncorrected ECC errors or an XID event mean a GPU returned wrong data or fell off the "
    "bus; corrected ECC errors that keep rising announce a failing card.",
    "gpu",
    page="gpus",
)
def check_gpu_errors(inputs: HealthInputs) -> Finding:
    """Fail on uncorrected ECC or XID; warn when corrected ECC counts rise."""
    df = samples(inputs)
    if df.empty:
        return _none(inputs)
    xid, unc = _max(df, "xid_max"), _max(df, "ecc_uncorrected_max")
    rise = df["ecc_corrected_rise"].dropna()
    ev = (
        Evidence("XID", xid if xid else "none", _window(df)),
        Evidence("uncorrected ECC", unc if unc is not None else "not reported"),
        Evidence("corrected ECC rise", float(rise.max()) if not rise.empty else "not reported"),
    )
    if (xid or 0) > 0 or (unc or 0) > 0:
        return Finding(
            Status.FAIL,
            "GPU hardware errors (XID or uncorrected ECC): drain the node",
            ev,
            "nvidia-smi -q -d ECC; dmesg | grep -i xid",
            "text",
        )
    if not rise.empty and rise.max() > 0:
        return Finding(Status.WARN, "corrected ECC errors are rising", ev)
    if xid is None and unc is None and rise.empty:
        return Finding(Status.UNKNOWN, "the samples carry no ECC or XID fields", ev)
    return Finding(Status.PASS, "no ECC or XID errors", ev)
