"""Steps: where each optimizer step's time goes, per rank, with throughput and loss scale."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dsmon.analysis import flops, ranks, step_output, step_stats, steps, training
from dsmon.analysis.downsample import downsample
from dsmon.figures import ranks as ranks_fig
from dsmon.figures import steps as fig
from dsmon.figures import training as training_fig
from dsmon.figures.common import BARS_MAX, fmt_ms, rounded
from dsmon.health import thresholds as th
from dsmon.view import ranks as rank_views
from dsmon.view import step_views
from ui.charts import chart
from ui.page import live_body, page_header, page_view

view = page_view(__file__)
PARTS = ("fwd_ms", "bwd_ms", "bwd_inner_ms", "bwd_allreduce_ms", "step_ms", "total_ms")
SPEED = ["samples/s", "tokens/s per GPU", "iteration time", "TFLOPS per GPU"]
#: The engine's overflow figures the probe reads, drawn when they moved (fp16 overflows).
OVERFLOW = ["loss scale", "skipped steps"]


def load() -> dict[str, pd.DataFrame]:
    """The frames this page draws, memoised on new records and the replay position."""
    f, cut = view.frames, view.cutoff
    bd = step_views.breakdown(f, cut)
    micro = step_views.micro(f, cut)
    tp = f.memo(
        "steps.tp",
        ["throughput", "iteration"],
        cut,
        lambda: flops.throughput(f.frame("throughput", cut), f.frame("iteration", cut)),
    )
    return {
        "bd": bd,
        "micro": micro,
        "tp": tp,
        "loss": f.frame("loss_scale", cut),
    }


def headline(bd: pd.DataFrame, stats: pd.DataFrame) -> None:
    """Median phase times of the run (all ranks), as metrics."""
    cols = [*st.columns(3), *st.columns(3)]  # two rows: six values truncate on a laptop screen
    labels = ("fwd p50", "bwd p50", "bwd_inner p50", "bwd_allreduce p50", "step p50", "total p90")
    keys = (
        ("fwd_ms", "p50"),
        ("bwd_ms", "p50"),
        ("bwd_inner_ms", "p50"),
        ("bwd_allreduce_ms", "p50"),
        ("step_ms", "p50"),
        ("total_ms", "p90"),
    )
    for col, label, (row, stat) in zip(cols, labels, keys, strict=True):
        col.metric(label, fmt_ms(stats.loc[row, stat]) if row in stats.index else "—")
    steady = int(stats["n"].get("total_ms", 0))
    st.caption(
        f"{steps.timed_steps(bd)} timed steps · ranks {', '.join(map(str, steps.ranks_of(bd)))} · "
        f"p50 / p90 over the {steady} steps after warm-up, the slowest rank per step, as every "
        "page quotes them · engine timers (wall_clock_breakdown); each global value sums the "
        "gradient-accumulation window. total = fwd + bwd + step (bwd already holds bwd_inner "
        "and bwd_allreduce)."
    )


def rank_section(bd: pd.DataFrame, ranks: list[int]) -> int:
    """Rank chooser and, with several ranks, the side-by-side views; returns the rank shown."""
    if len(ranks) <= 1:
        st.caption("Timer lines come from one rank only (DeepSpeed prints them on rank 0).")
        return ranks[0] if ranks else 0
    shown = st.multiselect("Ranks side by side", ranks, default=ranks[:4], max_selections=4)
    chart(
        fig.ranks_figure(downsample(bd, "step", ["total_ms"], BARS_MAX, by="rank"), shown),
        "steps.ranks_figure",
    )
    chart(
        fig.rank_totals_figure(downsample(bd, "step", ["total_ms"], by="rank")),
        "steps.rank_totals_figure",
    )
    return int(st.selectbox("Rank in the step chart", ranks))


def main_chart(data: dict[str, pd.DataFrame], rank: int) -> None:
    """The shared-step-axis chart of one rank: breakdown, throughput/TFLOPS, loss scale."""
    one = steps.of_rank(data["bd"], rank)
    profiles = view.frames.records("flops_profile", view.cutoff)
    tflops = pd.DataFrame()
    if profiles:
        per_step = flops.micro_batches_per_step(data["micro"])
        tflops = flops.step_tflops(one, flops.latest_profile(profiles), per_step)  # type: ignore[arg-type]
    chart(
        fig.steps_figure(
            downsample(one, "step", ["total_ms"], BARS_MAX),
            downsample(data["tp"], "step", ["samples_per_s"]),
            downsample(tflops, "step", ["tflops"]) if not tflops.empty else None,
            data["loss"],
            title=f"Per optimizer step, rank {rank} (ms)",
            total=len(one),
        ),
        "steps.steps_figure",
    )
    if data["tp"].empty and tflops.empty:
        st.caption(
            "No samples/s or TFLOPS in this run: DeepSpeed prints its throughput line every "
            'steps_per_print steps at "log_level": "info", and the flops profiler gives TFLOPS.'
        )
        return
    st.caption(
        "samples/s: DeepSpeed's ThroughputTimer (global batch, printed every steps_per_print). "
        "TFLOPS: the flops profiler's FLOPs per micro-batch (backward estimated as 2 x forward) "
        "divided by each step's fwd + bwd + step time."
    )


def distribution(bd: pd.DataFrame, stats: pd.DataFrame) -> None:
    """Histogram with p50/p90/max, the stats table and the slowest steps."""
    left, right = st.columns([3, 2])
    chart(fig.distribution_figure(bd, stats), "steps.distribution_figure", left)
    right.markdown("**p50 / p90 / max per timer**")
    right.dataframe(rounded(stats), width="stretch")
    right.markdown("**Slowest steps**")
    right.dataframe(
        rounded(steps.slowest_steps(bd, 5)[["step", "rank", *PARTS]]),
        hide_index=True,
        width="stretch",
    )


def zero_timers() -> None:
    """The ZeRO optimizer's own timer lines against the step."""
    f, cut = view.frames, view.cutoff
    zero, names = f.memo(
        "steps.zero_timers",
        ["timer"],
        cut,
        lambda: steps.zero_timers(step_views.zero_rows(f, cut)),
    )
    chart(fig.zero_timers_figure(zero, names), "steps.zero_timers_figure")
    st.caption(
        "ZeRO-1/2: optimizer_allgather / optimizer_gradients / optimizer_step; ZeRO-3: optimizer_step. "
        "Printed only on steps that did not overflow."
    )


def without_timers() -> None:
    """Speed from the lines the run did print (or the probe timed), without engine timers."""
    f, cut = view.frames, view.cutoff
    kinds = ["throughput", "iteration"]
    series = f.memo(
        "steps.speed",
        [*kinds, "rank_step"],
        cut,
        lambda: training.joined(
            [training.kind_series(k, f.frame(k, cut)) for k in kinds]
            + [training.probe_series(rank_views.stats(f, cut))]
        ),
    )
    speed = training.only_metrics(series, SPEED)
    info = f.info()
    if info is not None and step_output.lacks_step_output(info.kinds):
        st.warning("\n\n".join(step_output.NO_STEP_OUTPUT))
        return
    st.info(
        "No engine timer lines in this run, so no fwd/bwd/step breakdown from rank 0: turn on "
        '"wall_clock_breakdown": true in the DeepSpeed config.'
        + (
            " Below: speed from the lines it did print or dsmon run's probe."
            if not speed.empty
            else ""
        )
    )
    if not speed.empty:
        shown = downsample(speed, "step", ["value"], by=["metric", "source"])
        chart(training_fig.training_figure(shown, SPEED), "steps.speed")
    overflow = training.varying(training.only_metrics(series, OVERFLOW))
    if not overflow.empty:
        shown = downsample(overflow, "step", ["value"], by=["metric", "source"])
        chart(training_fig.training_figure(shown, OVERFLOW), "steps.overflow")


def every_rank() -> None:
    """Per-rank busy time, straggler score and where each rank is, from the probe."""
    f, cut = view.frames, view.cutoff
    per_step = rank_views.stats(f, cut)
    if per_step.empty:
        no_step_times(rank_views.beats(f, cut))
        return
    strag = f.memo("steps.stragglers", ["rank_step"], cut, lambda: ranks.stragglers(per_step))
    summary = rank_views.stragglers(f, cut)  # over the steady steps, kept live
    busy = rank_views.busy(f, cut)
    left, mid, right = st.columns(3)
    left.metric("ranks", str(busy["rank"].nunique()))
    mid.metric("straggler score p50", f"{summary.score.median():.2f}" if summary.steps else "—")
    named = summary.named()  # a rank is named only when it is the slowest in most steps
    if named is not None:
        right.metric("slowest rank (share of steps)", f"rank {named[0]} · {named[1]:.0%}")
    elif summary.steps:
        right.metric("slowest rank", "none: they take turns")
    split = summary.split()
    if split is not None:
        st.caption(
            f"Time in collectives: {split.text()} (medians over steps; the Communication "
            "page splits it)."
        )
    phases = rank_views.phases(f, cut)
    if not phases.empty and (phases["input_ms"] > 0).any():
        chart(ranks_fig.phases_figure(phases), "steps.phases_figure")
        st.caption(
            "Each rank's step, from dsmon run's probe, as the mean over the run: input is the "
            "host time outside the engine before its forwards (data loading, the script's "
            "host work), apart from the engine's fwd, bwd and step. A rank with a long input "
            "bar is bound by its input, and the others wait for it in the next collective "
            "(see ranks.input_bound on the Health page)."
        )
    chart(ranks_fig.busy_figure(busy), "steps.busy_figure")
    chart(
        ranks_fig.straggler_figure(downsample(strag, "step", ["score"]), th.STRAGGLER_WARN),
        "steps.straggler_figure",
    )
    st.caption(
        "Busy time = a rank's step time minus the time it was blocked in DeepSpeed's "
        "collectives: every rank's step lasts as long as the slowest one's, so the ranks "
        "that wait are the fast ones. Score 1.0 = balanced."
    )
    where_ranks(rank_views.beats(f, cut))


def no_step_times(beats: pd.DataFrame) -> None:
    """Why there are no per-rank step times: no probe, or one that times no step of this job."""
    if beats.empty:
        st.caption(
            "Per-rank step times and heartbeats come from dsmon's probe: start the job with "
            "`dsmon run -- deepspeed train.py ...` to see every rank here."
        )
        return
    st.caption(
        f"dsmon's probe sends heartbeats from {beats['rank'].nunique()} rank(s) but no step "
        "times yet. It times the engine's forward, backward and step: the pipeline engine's "
        "train_batch, and code that calls the model directly, are not timed (docs/per-rank.md)."
    )
    where_ranks(beats)


def where_ranks(beats: pd.DataFrame) -> None:
    """Each rank's newest heartbeat: its phase, and how far behind the newest heartbeat it is."""
    if beats.empty:
        return
    states = ranks.rank_states(beats, beats["ts"].max())
    st.markdown("**Where each rank is** (newest heartbeat of each)")
    st.dataframe(
        pd.DataFrame(
            {
                "rank": [s.rank for s in states],
                "where": [s.where() for s in states],
                "last heartbeat": [s.last_seen for s in states],
                "behind the newest (s)": [round(s.silent_s, 1) for s in states],
                "in this phase (s)": [round(s.in_phase_s, 1) for s in states],
            }
        ),
        hide_index=True,
        width="stretch",
    )


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    data = load()
    bd = data["bd"]
    if bd.empty:
        without_timers()
        st.subheader("Every rank")
        every_rank()
        return
    f, cut = view.frames, view.cutoff
    stats = step_stats.timer_table(bd, lambda name: step_views.stat(f, cut, name))
    headline(bd, stats)
    ranks = steps.ranks_of(bd)
    rank = rank_section(bd, ranks)
    main_chart(data, rank)
    st.subheader("Micro-steps")
    chart(
        fig.micro_figure(
            downsample(data["micro"], "step", ["total_ms"], BARS_MAX, by="rank"),
            total=len(data["micro"]),
        ),
        "steps.micro_figure",
    )
    st.subheader("Step-time distribution")
    distribution(bd, stats)
    st.subheader("ZeRO optimizer timers")
    zero_timers()
    st.subheader("Every rank")
    every_rank()


page_header("Steps", view)
live_body(view, body, charts=True)
