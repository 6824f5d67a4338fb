"""ZeRO-3 parameter-coordinator timers: where the time to bring parameters in goes, per step.

DeepSpeed 0.10.0 printed eight timers of ZeRO-3's ``PartitionedParameterCoordinator`` with
``wall_clock_breakdown`` on (later releases build its profiler without timers). They nest:
``*_fetch_submit`` and ``*_prefetch_submit`` time issuing the all-gathers, and the
``*_all_gather`` timer inside them times the ``all_gather_coalesced`` launch itself, while
``*_fetch_wait`` times waiting for parameters already in flight. So a step's coordinator time
is wait + submit, and it splits into three parts that never overlap:

- *wait*: parameters were requested but had not arrived (the transfer is not hidden),
- *gather*: launching the all-gathers,
- *submission*: the rest of submitting (bookkeeping per fetch, many small fetches).

The line is printed during a step's backward and covers that step's forward and backward
(the first one also the trace-recording step before it, as the timers are reset only when
logged). It is printed on rank 0 only.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from dsmon.analysis.steps import steady

#: The eight timer names, forward first, as ``partitioned_param_coordinator.py`` defines them.
TIMERS = (
    "forward_fetch_submit",
    "forward_fetch_wait",
    "forward_prefetch_submit",
    "forward_all_gather",
    "backward_fetch_submit",
    "backward_fetch_wait",
    "backward_prefetch_submit",
    "backward_all_gather",
)
WAIT = ("forward_fetch_wait", "backward_fetch_wait")
SUBMIT = (
    "forward_fetch_submit",
    "forward_prefetch_submit",
    "backward_fetch_submit",
    "backward_prefetch_submit",
)
GATHER = ("forward_all_gather", "backward_all_gather")
#: The three parts of coordinator time, in the order a diagnosis reads them.
PARTS = ("wait", "gather", "submission")
SHARE_COLUMNS = tuple(f"{p}_share" for p in PARTS)
COLUMNS = (
    "step",
    "rank",
    *(f"{t}_ms" for t in TIMERS),
    "wait_ms",
    "gather_ms",
    "submission_ms",
    "coordinator_ms",
    *SHARE_COLUMNS,
)


def coordinator_steps(timers: pd.DataFrame) -> pd.DataFrame:
    """One row per step (and rank) of the coordinator timers, with the three parts and shares.

    Args:
        timers: the store's timer frame (``Store.frames.frame(run, "timer")``).

    Returns:
        Columns :data:`COLUMNS`, sorted by step: every timer in ms (NaN when the line lacks it,
        as a timer appears only once used), ``wait_ms``, ``gather_ms``, ``submission_ms``
        (submit time outside the launch, never below 0), ``coordinator_ms`` (wait + submit) and
        each part's share of it. Empty when the run printed no coordinator line.
    """
    if timers.empty or "group" not in timers.columns:
        return pd.DataFrame(columns=list(COLUMNS))
    rows = timers[timers["group"] == "zero3_coordinator"]
    if rows.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    out = pd.DataFrame(index=rows.index)
    for key in ("step", "rank"):
        out[key] = rows[key] if key in rows.columns else pd.NA
    for name in TIMERS:
        col = f"{name}_ms"
        out[col] = rows[col].astype("float64") if col in rows.columns else float("nan")
    wait = _sum(out, WAIT)
    submit = _sum(out, SUBMIT)
    gather = _sum(out, GATHER)
    out["wait_ms"] = wait
    out["gather_ms"] = gather
    out["submission_ms"] = (submit - gather).clip(lower=0.0)
    out["coordinator_ms"] = wait + submit
    total = out["coordinator_ms"].where(out["coordinator_ms"] > 0)
    for part in PARTS:
        out[f"{part}_share"] = out[f"{part}_ms"] / total
    out = out.drop_duplicates(subset=["step", "rank"], keep="last")
    return out.sort_values(["step", "rank"], kind="stable").reset_index(drop=True)[list(COLUMNS)]


def _sum(frame: pd.DataFrame, names: tuple[str, ...]) -> pd.Series:
    """Sum of the named timers per row; a timer not printed counts as 0 (it never ran)."""
    return frame[[f"{n}_ms" for n in names]].fillna(0.0).sum(axis=1).astype("float64")


class CoordinatorSummary(NamedTuple):
    """The run's coordinator figures over its steady steps, and which part leads.

    ``coordinator_ms`` is the median step's; the part shares are of the summed time over the
    steps (so they add up to 1, and a step that waited long weighs more). ``fetch_share`` is coordinator time against the step's fwd + bwd (the phases it runs
    in), None without engine timer lines for the same steps.
    """

    steps: int
    first_step: int | None
    last_step: int | None
    coordinator_ms: float
    wait_share: float
    gather_share: float
    submission_share: float
    fetch_share: float | None
    submissions_per_step: float | None
    numel_per_submission: float | None

    @property
    def step_range(self) -> tuple[int, int] | None:
        """(first, last) step the figures cover; None when the steps are unknown."""
        if self.first_step is None or self.last_step is None:
            return None
        return (self.first_step, self.last_step)

    def share(self, part: str) -> float:
        """The share of one of :data:`PARTS`."""
        return float(getattr(self, f"{part}_share"))


def summarize(
    per_step: pd.DataFrame,
    breakdown: pd.DataFrame | None = None,
    events: pd.DataFrame | None = None,
    warmup: int = 2,
) -> CoordinatorSummary | None:
    """Figures over the steady steps of :func:`coordinator_steps`; None without a timed step.

    Args:
        per_step: :func:`coordinator_steps`.
        breakdown: the engine breakdown (:func:`dsmon.analysis.steps.step_breakdown`), for the
            coordinator's share of fwd + bwd.
        events: the ``coordinator_event`` frame, for how many submissions a step makes.
        warmup: steps left out as warm-up (the first line also holds the trace step).
    """
    rows = steady(per_step.dropna(subset=["coordinator_ms"]), warmup)
    rows = rows[rows["coordinator_ms"] > 0]
    if rows.empty:
        return None
    known = rows["step"].dropna()
    total = float(rows["coordinator_ms"].sum())
    return CoordinatorSummary(
        steps=len(rows),
        first_step=int(known.min()) if not known.empty else None,
        last_step=int(known.max()) if not known.empty else None,
        coordinator_ms=float(rows["coordinator_ms"].median()),
        wait_share=float(rows["wait_ms"].sum()) / total,
        gather_share=float(rows["gather_ms"].sum()) / total,
        submission_share=float(rows["submission_ms"].sum()) / total,
        fetch_share=_fetch_share(rows, breakdown),
        **_submissions(events, set(known.astype("int64"))),
    )


def _fetch_share(rows: pd.DataFrame, breakdown: pd.DataFrame | None) -> float | None:
    """Median over the same steps of coordinator time / (fwd + bwd) of the engine line."""
    if breakdown is None or breakdown.empty:
        return None
    phases = breakdown.dropna(subset=["step"]).groupby("step")[["fwd_ms", "bwd_ms"]].max()
    compute = (phases["fwd_ms"] + phases["bwd_ms"]).rename("compute_ms")
    joined = rows.join(compute, on="step").dropna(subset=["compute_ms"])
    joined = joined[joined["compute_ms"] > 0]
    if joined.empty:
        return None
    return float((joined["coordinator_ms"] / joined["compute_ms"]).median())


def _submissions(events: pd.DataFrame | None, steps: set[int]) -> dict[str, float | None]:
    """Median submissions per step and elements per submission, from the event-count lines."""
    none: dict[str, float | None] = {"submissions_per_step": None, "numel_per_submission": None}
    if events is None or events.empty or "event" not in events.columns:
        return none
    rows = events[events["event"].isin(SUBMIT) & events["step"].isin(steps)]
    if rows.empty:
        return none
    per = rows.groupby("step")[["count", "numel"]].sum()
    per_step = float(per["count"].median())
    total = per[per["count"] > 0]
    numel = float((total["numel"] / total["count"]).median()) if not total.empty else None
    return {"submissions_per_step": per_step, "numel_per_submission": numel}


def leading_part(summary: CoordinatorSummary, wait_line: float) -> str:
    """Which part explains the coordinator time, read in the order the causes are checked.

    A wait share at or above ``wait_line`` means the transfers are not hidden (bandwidth or
    topology); otherwise whichever of gather and submission is larger leads.
    """
    if summary.wait_share >= wait_line:
        return "wait"
    return "gather" if summary.gather_share >= summary.submission_share else "submission"
