"""Measured quantities several runtime rules share, computed the same way for all of them.

A rule's evidence must name the steps its numbers cover, and every rule must leave out the
same warm-up steps (allocation, JIT builds and the loss scaler's first calibration make them
many times slower). These helpers take the store-shaped frames of a :class:`HealthInputs`,
call the dashboard's analysis functions (so the checklist and the charts agree), and return
plain numbers with their step range.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from dsmon.analysis import comm, ranks, step_stats, steps
from dsmon.analysis.percentiles import Percentiles
from dsmon.health import thresholds as th
from dsmon.health.inputs import BREAKDOWN, HealthInputs, step_view
from dsmon.health.probe_measures import rank_stats
from dsmon.model.records import ENGINE_INFO


@dataclass(frozen=True, slots=True)
class StepSeries:
    """One time per optimizer step (ms, or a relative unit), and what it was measured from."""

    frame: pd.DataFrame  # columns: step, value
    source: str
    unit: str

    @property
    def steps(self) -> tuple[int, int] | None:
        """First and last step covered."""
        return step_range(self.frame)


def step_range(frame: pd.DataFrame) -> tuple[int, int] | None:
    """(first, last) of a frame's ``step`` column; None when it has no known step."""
    if frame.empty or "step" not in frame.columns:
        return None
    known = frame["step"].dropna()
    return (int(known.min()), int(known.max())) if not known.empty else None


def range_text(rng: tuple[int, int] | None) -> str:
    """``steps 3-30`` for evidence; ``steps unknown`` without a range."""
    if rng is None:
        return "steps unknown"
    return f"step {rng[0]}" if rng[0] == rng[1] else f"steps {rng[0]}-{rng[1]}"


def all_steps(inputs: HealthInputs) -> pd.DataFrame:
    """The breakdown of every timed step, warm-up included (what the comms logger covers).

    Computed once per evaluation (``HealthInputs.derived``): seven rules read it, and on a
    long run one breakdown takes a tenth of a second. Callers never change the frame.
    """
    return step_view(inputs, BREAKDOWN, steps.step_breakdown)


def breakdown(inputs: HealthInputs) -> pd.DataFrame:
    """The engine's per-step breakdown without warm-up steps (empty without timer lines).

    Kept per evaluation like :func:`all_steps`: a dozen rules read it.
    """
    bd = inputs.derived.get("steady_steps")
    if bd is None:
        bd = all_steps(inputs)
        bd = inputs.derived["steady_steps"] = bd if bd.empty else steady(bd)
    return bd


def stat(inputs: HealthInputs, name: str) -> Percentiles:
    """Whole-run figure ``name`` (``dsmon.analysis.step_stats``) over the steady steps.

    From :attr:`HealthInputs.stats` when the caller keeps it (a live dashboard, whose sorted
    values grow with new steps only), else from :func:`breakdown`; once per evaluation.
    """
    key = f"stat:{name}"
    got = inputs.derived.get(key)
    if got is None:
        got = inputs.stats(name) if inputs.stats is not None else None
        if got is None:
            got = step_stats.ranked(breakdown(inputs), name)
        inputs.derived[key] = got
    return got


def steady(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows after the warm-up steps (:func:`dsmon.analysis.steps.steady`)."""
    return steps.steady(frame, th.WARMUP_STEPS)


def per_step(bd: pd.DataFrame, column: str) -> pd.Series:
    """One value per step: the slowest rank's, since the step waits for it."""
    # the two columns, not the whole breakdown, copied without the rows missing either
    rows = bd[["step", column]].dropna()
    return steps.max_per_step(rows, column)


#: The probe's step time is the wall time from one optimizer step's end to the next: the
#: script's own work between steps (data loading, logging, evaluation) is in it.
PROBE_STEP_SOURCE = "dsmon run's probe (wall time between optimizer steps, slowest rank)"


def step_times(inputs: HealthInputs) -> StepSeries | None:
    """Step durations: engine timers, iteration times, the probe's, or inverse throughput.

    The first source the run has wins, in that order.

    Kept per evaluation: the stall rule asks on every live refresh, other rules once.
    """
    if "step_times" not in inputs.derived:
        inputs.derived["step_times"] = _step_times(inputs)
    series: StepSeries | None = inputs.derived["step_times"]
    return series


def _step_times(inputs: HealthInputs) -> StepSeries | None:
    """:func:`step_times`, computed."""
    bd = breakdown(inputs)
    if not bd.empty and bd["total_ms"].notna().any():
        s = per_step(bd, "total_ms")
        return StepSeries(_series(s), "engine timers (fwd + bwd + step, slowest rank)", "ms")
    it = inputs.frame("iteration")
    if not it.empty and "elapsed_ms" in it.columns and it["elapsed_ms"].notna().any():
        rows = steady(_stepped(it, "iteration")).dropna(subset=["elapsed_ms"])
        s = rows.groupby("step")["elapsed_ms"].max().astype("float64")
        return StepSeries(_series(s), "iteration lines (elapsed time per iteration)", "ms")
    s = ranks.step_wall_ms(steady(rank_stats(inputs)))
    if not s.empty:
        return StepSeries(_series(s), PROBE_STEP_SOURCE, "ms")
    tp = inputs.frame("throughput")
    if not tp.empty and "samples_per_s" in tp.columns and tp["samples_per_s"].notna().any():
        rows = steady(_stepped(tp, "global_step")).dropna(subset=["samples_per_s"])
        rows = rows[rows["samples_per_s"] > 0]
        s = (1000.0 / rows.groupby("step")["samples_per_s"].min()).astype("float64")
        return StepSeries(
            _series(s), "throughput lines (ms per sample, every steps_per_print)", "ms/sample"
        )
    return None


def _stepped(frame: pd.DataFrame, alt: str) -> pd.DataFrame:
    """The frame with ``step`` filled from another step-number column where unknown."""
    out = frame.copy()
    if alt in out.columns:
        out["step"] = out["step"].astype("Float64").fillna(out[alt].astype("Float64"))
    return out


def _series(s: pd.Series) -> pd.DataFrame:
    """A step-indexed series as a ``step, value`` frame sorted by step."""
    # one value per step, so there are no ties: a series already in step order (the
    # engine timers' always is) is not sorted again, and no frame is copied to rename it
    out = pd.DataFrame({"step": s.index.to_numpy(dtype="int64"), "value": s.to_numpy()})
    if out["step"].is_monotonic_increasing:
        return out
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def comm_ops(inputs: HealthInputs) -> pd.DataFrame:
    """Per-collective totals from the comms logger (summary table, else verbose lines)."""
    summary = inputs.frame("comm_summary")
    if not summary.empty:
        return comm.comm_ops(summary)
    return comm.comm_ops(inputs.frame("comm_op"))


#: Collectives of the training step proper (init-time broadcasts and barriers left out).
TRAINING_OPS = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "reduce",
    "send",
    "recv",
)


def trusted_comm_ops(inputs: HealthInputs, bd_all: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Comms-logger totals, or (empty, why) when they cannot be wall-clock durations.

    The logger's latencies must fit in the time the timed steps took; on DeepSpeed's CPU
    accelerator they add up to more than the whole run, so a rule that used them would report
    nonsense like a 200 % communication share.
    """
    ops = comm_ops(inputs)
    if ops.empty:
        return ops, None
    total = op_latency_ms(ops, TRAINING_OPS)
    wall = float(per_step(bd_all, "total_ms").sum()) if not bd_all.empty else 0.0
    if total is not None and wall > 0 and total > wall:
        why = (
            f"comms-logger latencies ({total:.0f} ms) exceed the timed steps' wall time "
            f"({wall:.0f} ms): not usable as durations"
        )
        return ops.iloc[0:0], why
    return ops, None


def op_latency_ms(ops: pd.DataFrame, prefixes: tuple[str, ...]) -> float | None:
    """Total latency of the ops whose name starts with one of ``prefixes``; None if none ran."""
    if ops.empty:
        return None
    rows = ops[ops["op"].astype(str).str.startswith(prefixes)]
    if rows.empty:
        return None
    return float(rows["total_latency_ms"].astype("float64").sum())


def median(values: pd.Series) -> float:
    """Median as float (NaN for no value): :func:`dsmon.analysis.comm.median`."""
    return comm.median(values)


def built_optimizer(inputs: HealthInputs) -> tuple[str, str] | None:
    """The class DeepSpeed built for the config's optimizer, and where that is said.

    ``DeepSpeed Basic Optimizer = X`` (INFO), else the class dsmon run's probe saw. Some
    releases (0.10.0) take ``torch_adam`` out of the config before printing it, so the
    printed config alone would say FusedAdam for a run on torch's AdamW.
    """
    ev = inputs.frame("event")
    if ev.empty or "detail" not in ev.columns:
        return None
    for detail in reversed(ev.loc[ev["name"] == "optimizer", "detail"].tolist()):
        if isinstance(detail, Mapping) and detail.get("which") == "basic":
            return str(detail.get("optimizer")), "log: DeepSpeed Basic Optimizer"
    for detail in reversed(ev.loc[ev["name"] == ENGINE_INFO, "detail"].tolist()):
        if isinstance(detail, Mapping) and detail.get("optimizer"):
            return str(detail["optimizer"]).rsplit(".", 1)[-1], "dsmon run's probe"
    return None


def job_finished(inputs: HealthInputs) -> bool:
    """Whether the launcher reported the workers' exit (successful or not)."""
    ev = inputs.frame("event")
    return not ev.empty and bool((ev["name"] == "worker_exit").any())


def trainer_formats(inputs: HealthInputs) -> frozenset[str]:
    """The Hugging Face Trainer's log dicts the run printed (``fmt`` of its iteration records).

    A run the Trainer drives goes through Accelerate, which sets ``steps_per_print`` to inf
    whatever the config says, and whose log dicts carry the loss DeepSpeed does not print.
    """
    if "trainer_formats" not in inputs.derived:  # three rules ask, on every live refresh
        it = inputs.frame("iteration")
        fmts = it["fmt"].dropna().unique() if "fmt" in it.columns else ()
        inputs.derived["trainer_formats"] = frozenset(
            str(f) for f in fmts if str(f).startswith("trainer")
        )
    found: frozenset[str] = inputs.derived["trainer_formats"]
    return found


#: Loss-scale events printed once for each optimizer step skipped on an overflow.
SKIP_EVENTS = ("overflow", "bf16_overflow")
#: Kinds whose ``step`` says how many steps the run has made.
_STEPPED = ("timer", "rank_step", "iteration", "throughput", "step")


def _stepped_frame(inputs: HealthInputs, kind: str) -> pd.DataFrame:
    """A kind's rows with their ``step`` (the probe's steps from their summary)."""
    frame = rank_stats(inputs) if kind == "rank_step" else inputs.frame(kind)
    return frame if "step" in frame.columns else pd.DataFrame({"step": pd.Series(dtype=float)})


def overflow_skips(inputs: HealthInputs) -> tuple[int, int] | None:
    """Steps skipped on an overflow, counted from the messages, and steps made; None: unknown.

    Without ``step=`` lines (whose ``skipped=`` counter is exact) the ``OVERFLOW! Skipping
    step`` messages still count: one a skipped step, from rank 0 (some optimizers print one
    on every rank, so the rank that printed most counts).
    """
    ls = inputs.frame("loss_scale")
    if ls.empty or "event" not in ls.columns:
        return None  # before any step frame is loaded: most runs print no overflow at all
    made = [_stepped_frame(inputs, k)["step"].max() for k in _STEPPED]
    made = [s for s in made if pd.notna(s)]
    if not made:
        return None
    skips = ls[ls["event"].isin(SKIP_EVENTS)]
    if skips.empty:
        return 0, int(max(made))
    return int(skips.groupby(skips["rank"].fillna(-1)).size().max()), int(max(made))
