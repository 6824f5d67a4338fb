"""Runtime rules on step time and compute efficiency: regressions, spikes, MFU.

Step time is taken from the engine timers when the run has them, else from Megatron's
iteration lines, else from the ThroughputTimer (ms per sample); every rule says which, since
a run's first steps and its profiled step are not what it normally does.
"""

from __future__ import annotations

import pandas as pd

from dsmon.analysis import flops, peaks, steps
from dsmon.analysis.slowdown import slowdown
from dsmon.health import measures as m
from dsmon.health import thresholds as th
from dsmon.health.inputs import MICRO, HealthInputs
from dsmon.health.model import Evidence, Finding, Status, percent
from dsmon.health.registry import rule
from dsmon.health.verdicts import not_applicable

_NO_STEPS = (
    "no step timing: needs wall_clock_breakdown, throughput or iteration lines, or dsmon run"
)


@rule(
    "steps.regression",
    "Recent steps are as fast as the earlier ones",
    f"The last {percent(th.RECENT_SHARE)} of steps (at least {th.RECENT_MIN_STEPS}) against "
    "the earlier ones after warm-up: a median slowdown of "
    f"{percent(th.REGRESSION_WARN - 1)} warns, {percent(th.REGRESSION_FAIL - 1)} fails, when "
    "the recent steps are generally slower (one-sided Mann-Whitney test, p < "
    f"{th.REGRESSION_P:g}): a few samples or a bimodal run do not make a regression.",
    "runtime",
    page="steps",
    # what slows every recent step; not the run's ending, which stops the step it hits
    follows=("ranks.straggler", "gpu.throttling"),
)
def check_regression(inputs: HealthInputs) -> Finding:
    """Compare the recent window's step times with the earlier steps', with a rank test."""
    series = m.step_times(inputs)
    if series is None:
        return Finding(Status.UNKNOWN, _NO_STEPS)
    values = series.frame
    n_recent = max(th.RECENT_MIN_STEPS, int(len(values) * th.RECENT_SHARE))
    if len(values) < 2 * n_recent:
        return Finding(
            Status.UNKNOWN,
            f"only {len(values)} timed steps ({series.source}): a slowdown needs at least "
            f"{th.RECENT_MIN_STEPS} recent and {th.RECENT_MIN_STEPS} earlier ones",
        )
    earlier, recent = values.iloc[:-n_recent], values.tail(n_recent)
    got = slowdown(earlier["value"].to_numpy(), recent["value"].to_numpy())
    rng, recent_rng = m.step_range(earlier), m.step_range(recent)
    sure = (
        f"slower than {got.slower_share:.0%} of the earlier steps (one-sided Mann-Whitney "
        f"p = {got.p_value:.2g})"
    )
    ev = (
        Evidence(
            "earlier median",
            f"{got.earlier_median:.2f} {series.unit}",
            f"{m.range_text(rng)}, {series.source}",
        ),
        Evidence(
            "recent median", f"{got.recent_median:.2f} {series.unit}", m.range_text(recent_rng)
        ),
        Evidence("recent / earlier", f"{got.ratio:.2f}x"),
        Evidence("recent steps", sure, f"{got.n_recent} against {got.n_earlier}"),
    )
    if not got.ratio > th.REGRESSION_WARN:
        return Finding(
            Status.PASS,
            f"recent steps run at {got.ratio:.2f}x the earlier steps' median",
            ev,
            steps=series.steps,
        )
    if not got.p_value < th.REGRESSION_P:
        return Finding(
            Status.PASS,
            f"recent steps' median is {got.ratio:.2f}x the earlier steps', but they are not "
            f"generally slower ({sure}): noise, not a regression",
            ev,
            steps=series.steps,
        )
    status = Status.FAIL if got.ratio > th.REGRESSION_FAIL else Status.WARN
    if inputs.facts.device == "cpu":  # no GPU to throttle: the run's own output says so
        causes, fix = (
            "data loading, checkpoints and other processes on the nodes",
            "look for other processes on the nodes and slower data loading over the same steps",
        )
    else:
        causes, fix = (
            "GPU throttling, data loading and other jobs on the nodes",
            "compare the GPUs page (clocks, throttling) over the same steps",
        )
    return Finding(
        status,
        f"recent steps are {got.ratio:.2f}x slower than the earlier steps ({sure}): check {causes}",
        ev,
        fix,
        "text",
        steps=recent_rng,
    )


@rule(
    "steps.spikes",
    f"No step takes more than {th.SPIKE_FACTOR:g}x the median",
    f"Steps slower than {th.SPIKE_FACTOR:g}x the median step time (after warm-up): checkpoint saves, evaluation, "
    "data stalls or a straggling rank.",
    "runtime",
    page="steps",
    # no finding explains a spike: the run's ending stops the step it hits, so that step is
    # never timed, and a straggler slows every step, not a few
)
def check_spikes(inputs: HealthInputs) -> Finding:
    """List the steps slower than SPIKE_FACTOR x the median."""
    series = m.step_times(inputs)
    if series is None:
        return Finding(Status.UNKNOWN, _NO_STEPS)
    values = series.frame
    med = m.median(values["value"])
    spikes = values[values["value"] > th.SPIKE_FACTOR * med].sort_values("value", ascending=False)
    rng = series.steps
    ev = [
        Evidence("median step", f"{med:.2f} {series.unit}", f"{m.range_text(rng)}, {series.source}")
    ]
    if spikes.empty:
        return Finding(
            Status.PASS, f"no step above {th.SPIKE_FACTOR:g}x the median", tuple(ev), steps=rng
        )
    ev += [
        Evidence(f"step {step}", f"{value:.2f} {series.unit} ({value / med:.1f}x)")
        for step, value in zip(spikes["step"].head(3), spikes["value"].head(3), strict=True)
    ]
    return Finding(
        Status.WARN,
        f"{len(spikes)} of {len(values)} steps took over {th.SPIKE_FACTOR:g}x the median",
        tuple(ev),
        "open the Steps page's slowest steps; match them with checkpoint or eval times",
        "text",
        steps=rng,
    )


def _achieved_tflops(inputs: HealthInputs) -> tuple[float, str] | None:
    """Achieved TFLOPS per GPU: profiled FLOPs over every step's timers, else the profile's."""
    prof = inputs.frame("flops_profile")
    if not prof.empty:
        row = prof.iloc[-1]
        fwd, factor = row.get("fwd_flops_per_gpu"), row.get("bwd_factor")
        bd = m.breakdown(inputs)
        if pd.notna(fwd) and not bd.empty:
            micro_rows = m.step_view(inputs, MICRO, steps.micro_breakdown)
            micro = flops.micro_batches_per_step(micro_rows)
            per = 1.0 + (float(factor) if pd.notna(factor) else 2.0)
            iter_s = m.per_step(bd, "total_ms") / 1000.0
            tf = per * float(fwd) * micro / iter_s.where(iter_s > 0) / flops.TERA
            if tf.notna().any():
                return m.median(tf.dropna()), "profiled FLOPs x every step's timers (median)"
        if pd.notna(row.get("flops_per_s_per_gpu")):
            return float(row["flops_per_s_per_gpu"]) / flops.TERA, "flops profiler, one step"
    it = inputs.frame("iteration")
    if (
        not it.empty
        and "flops_per_s_per_gpu" in it.columns
        and it["flops_per_s_per_gpu"].notna().any()
    ):
        return m.median(it["flops_per_s_per_gpu"].dropna()) / flops.TERA, "iteration lines (median)"
    return None


@rule(
    "flops.mfu",
    f"Model FLOPs utilisation is at least {percent(th.MFU_WARN)}",
    "Achieved TFLOPS per GPU (flops profiler, or Megatron's TFLOPs) against the dense peak of "
    "the GPU model and training dtype; well-tuned large runs reach 40-55 % on A100.",
    "runtime",
    page="flops",
    follows=("ranks.straggler", "comm.share", "gpu.utilization", "gpu.throttling"),
)
def check_mfu(inputs: HealthInputs) -> Finding:
    """MFU against MFU_WARN; UNKNOWN without a FLOPS figure or a known GPU peak."""
    got = _achieved_tflops(inputs)
    if got is None and inputs.facts.device == "cpu":
        return not_applicable("CPU run (no GPU peak to compare with)")
    if got is None:
        return Finding(Status.UNKNOWN, "no achieved FLOPS: enable the flops profiler")
    achieved, src = got
    if inputs.config is not None:
        dtype, how = peaks.training_dtype(inputs.config.raw), "config"
    else:
        dtype, how = "bf16", "assumed: no ds_config (mixed precision is the norm)"
    ev = [
        Evidence("achieved", f"{achieved:.3f} TFLOPS per GPU", src),
        Evidence("dtype", dtype, how),
    ]
    if inputs.facts.device == "cpu":
        return not_applicable("CPU run (no GPU peak to compare with)", *ev)
    names = inputs.facts.gpu_names
    peak = peaks.find_peak(names[0]) if names else None
    value = peak.tflops.get(dtype) if peak else None
    if peak is None or value is None:
        why = "GPU model unknown" if not names else f"no {dtype} peak for {names[0]}"
        return Finding(Status.UNKNOWN, f"{why}: MFU needs the GPU's peak", tuple(ev))
    share = achieved / value
    ev += [
        Evidence("peak", f"{value:g} TFLOPS ({peak.model}, dense {dtype})", peak.source),
        Evidence("reference", peaks.A100_REFERENCE.label, peaks.A100_REFERENCE.source),
    ]
    if share >= th.MFU_WARN:
        return Finding(Status.PASS, f"MFU {share:.1%}", tuple(ev))
    return Finding(
        Status.WARN,
        f"MFU {share:.1%} < {th.MFU_WARN:.0%}: see the communication "
        "and GPU rules for where the time goes",
        tuple(ev),
        "raise train_micro_batch_size_per_gpu if memory allows; check comm.share",
        "text",
    )


@rule(
    "loss.finite",
    "The loss and gradient norm stay finite",
    "Megatron's iteration lines count the NaN iterations of each log interval; the Hugging "
    "Face Trainer's log dicts print a NaN or inf loss or grad norm. Either means the model "
    "diverged or a batch broke it; the latest interval says whether it goes on.",
    "runtime",
    page="training",
)
def check_finite(inputs: HealthInputs) -> Finding:
    """Fail while the latest logged interval had a NaN; warn when an earlier one had."""
    it = inputs.frame("iteration")
    if it.empty or "nan_iterations" not in it.columns or it["nan_iterations"].isna().all():
        return not_applicable(
            "no line of this run reports NaNs (Megatron's iteration lines and the Hugging Face "
            "Trainer's log dicts do)"
        )
    rows = it.dropna(subset=["nan_iterations"])
    if "fmt" in rows.columns:
        rows = rows[rows["fmt"] != "trainer_summary"]  # a whole-run average, no interval
    bad = rows[rows["nan_iterations"] > 0]
    ev = [Evidence("logged intervals with NaN or inf", f"{len(bad)} of {len(rows)}")]
    if bad.empty:
        return Finding(Status.PASS, f"no NaN or inf in {len(rows)} logged intervals", tuple(ev))
    first, latest = _step_of(bad.iloc[0]), rows.iloc[-1]
    ev.append(Evidence("first", f"step {first}", f"{bad.iloc[0]['file']}:{bad.iloc[0]['line']}"))
    if latest["nan_iterations"] > 0:
        return Finding(
            Status.FAIL,
            f"NaN or inf since step {first}, still in the latest interval (step "
            f"{_step_of(latest)}): the run no longer learns",
            tuple(ev),
            "lower the learning rate or lengthen its warmup and keep gradient_clipping on; "
            "with fp16, train in bf16; then look at the batches just before the first one",
            "text",
        )
    return Finding(
        Status.WARN, f"NaN or inf at step {first}; later intervals are finite", tuple(ev)
    )


def _step_of(row: pd.Series) -> str:
    """A row's step for display (``?`` when unknown)."""
    step = row.get("step")
    return "?" if step is None or pd.isna(step) else str(int(step))
