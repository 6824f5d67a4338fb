"""Communication: how much of a step waits on collectives, and what each collective costs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dsmon.analysis import collectives, comm, coordinator, step_stats, steps
from dsmon.analysis.downsample import downsample
from dsmon.analysis.peaks import LINKS, expected_link, find_link
from dsmon.figures import collectives as collectives_fig
from dsmon.figures import comm as fig
from dsmon.figures.common import fmt_ms, fmt_pct, rounded
from dsmon.health.gather import config_from_records
from dsmon.view import ranks as rank_views
from dsmon.view import step_views
from ui.charts import chart
from ui.page import live_body, page_header, page_view

view = page_view(__file__)

OVERLAP_ON = (
    "**overlap_comm is on** ({origin}): gradient reduction runs in backward hooks, overlapped with "
    "compute, so `bwd_allreduce` is only the *exposed tail* left after backward, not the time spent "
    "reducing. The share below is a lower bound on communication."
)
OVERLAP_OFF = (
    "**overlap_comm is off** ({origin}): gradients are reduced after backward, so `bwd_allreduce` "
    "is the reduction's full time and the share below is its real cost."
)
ZERO3 = (
    "**ZeRO-3**: parameter all-gathers run inside `fwd` and `bwd` (prefetched by the coordinator) "
    "and have no engine timer of their own; they hide in the compute bars. Only DeepSpeed 0.10.0 "
    "printed the coordinator's own timers (shown below when the run has them)."
)
COORDINATOR = (
    "`*_fetch_wait` is time spent waiting for parameters already requested (transfers not hidden "
    "behind compute); `*_all_gather` is the all-gather launch, timed inside the `*_submit` timers; "
    "submission bookkeeping is the rest of `*_fetch_submit` + `*_prefetch_submit`. DeepSpeed "
    "prints the line on rank 0 during each step's backward; the first line also holds the step "
    "that recorded the module trace."
)
COMMS_LOGGER = (
    "The comms logger **synchronises the device after every collective it times**, so it removes "
    "the overlap it measures: its latencies are collectives run in isolation, and a run with it "
    "on is slower than one without."
)


def caveats() -> None:
    """What the timers can and cannot show for this run's config, next to the numbers."""
    conf = config_from_records(view.frames.records("config"), None)
    if conf is None:
        st.warning(
            "No DeepSpeed config in this run's output: cannot tell whether overlap_comm is on. "
            "With overlap_comm on, `bwd_allreduce` is only the exposed tail."
        )
        return
    overlap = conf.get("zero_optimization.overlap_comm")
    origin = "set in the config" if overlap.explicit else f"default for ZeRO stage {conf.stage}"
    on = conf.flag(overlap.path)  # read as DeepSpeed does: "false" is off, "yes" is on
    st.info((OVERLAP_ON if on else OVERLAP_OFF).format(origin=origin))
    if conf.stage == 3:
        st.info(ZERO3)


WAITING = (
    "Rank 0's timers time a collective from its call to its end: when another rank arrives "
    "late, rank 0 waits for it inside the collective, and the share above holds that wait. "
    "{how}"
)
SPLIT_HOW = (
    "dsmon run's probe on every rank tells the two apart: the wire time is, for each kind of "
    "collective call, the least time any rank spent in it (the last rank to arrive waits for "
    "no one), the waiting is what the rank that waited most spent beyond it; medians over the "
    "steps after warm-up, as the checklist judges them."
)
NO_SPLIT_HOW = (
    "Start the job with `dsmon run` to tell the wire time from the waiting (on a GPU, NCCL "
    "waits on the device, where the probe cannot see it)."
)


def split_section() -> bool:
    """Wire time apart from waiting for the slowest rank, where the probe tells them; shown?"""
    split = rank_views.stragglers(view.frames, view.cutoff).split()
    if split is None:
        return False
    cols = st.columns(2)
    cols[0].metric("Wire time, p50 share of step", fmt_pct(split.wire_share))
    cols[1].metric("Waiting for the slowest rank, p50 share of step", fmt_pct(split.wait_share))
    return True


def timers_section(bd: pd.DataFrame) -> None:
    """Exposed communication from the engine timers."""
    f, cut = view.frames, view.cutoff
    share = comm.comm_share(bd)
    stats = step_stats.share_stats(step_views.stat(f, cut, step_stats.COMM_SHARE))
    allreduce = step_views.stat(f, cut, "ms.bwd_allreduce_ms").median()
    cols = st.columns(3)
    cols[0].metric("Exposed comm, p50 share of step", fmt_pct(stats.p50 if stats else None))
    cols[1].metric("bwd_allreduce p50", fmt_ms(allreduce))
    cols[2].metric("Steps timed", f"{steps.timed_steps(bd)}")
    lines = step_stats.phase_lines(bd, lambda name: step_views.stat(f, cut, name))
    st.markdown("\n".join(f"- {line}" for line in lines))
    split = split_section()
    st.caption(
        "Exposed comm = bwd_allreduce (+ ZeRO-1/2 optimizer_allgather), as a share of "
        "fwd + bwd + step; per step the slowest rank, then the median over the steps after "
        "warm-up. " + WAITING.format(how=SPLIT_HOW if split else NO_SPLIT_HOW)
    )
    chart(
        fig.share_figure(
            downsample(share, "step", ["exposed_comm_ms", "comm_share"], by="rank"),
            total=len(share),
        ),
        "communication.share_figure",
    )
    ratios = comm.timer_ratios(bd)
    chart(
        fig.ratio_figure(downsample(ratios, "step", ["allreduce_of_bwd"], by="rank")),
        "communication.ratio_figure",
    )


def coordinator_section(bd: pd.DataFrame) -> None:
    """ZeRO-3 parameter fetch time from the coordinator timers (DeepSpeed 0.10.0 only).

    On this page because these timers are the only measurement of ZeRO-3's parameter
    all-gathers, which the engine timers above cannot separate from compute.
    """
    f, cut = view.frames, view.cutoff
    per = step_views.coordinator_steps(f, cut)
    if per.empty:
        return
    st.subheader("ZeRO-3 parameter fetches (coordinator timers)")
    summary = coordinator.summarize(per, bd, f.frame("coordinator_event", cut))
    cols = st.columns(4)
    for col, part in zip(cols, coordinator.PARTS, strict=False):
        col.metric(f"{part.capitalize()} share", fmt_pct(summary.share(part) if summary else None))
    cols[3].metric(
        "Fetch time, share of fwd + bwd", fmt_pct(summary.fetch_share if summary else None)
    )
    st.caption(COORDINATOR + " Shares are of the summed fetch time over the steps after warm-up.")
    ys = ["wait_ms", "gather_ms", "submission_ms", "wait_share"]
    chart(fig.coordinator_figure(downsample(per, "step", ys)), "communication.coordinator_figure")
    st.dataframe(rounded(per, 3), hide_index=True, width="stretch")


def logger_section(bd: pd.DataFrame) -> None:
    """Per-collective figures from the comms logger, against the link's nominal bandwidth."""
    summary = view.frames.frame("comm_summary", view.cutoff)
    op_rows = view.frames.frame("comm_op", view.cutoff)
    ops = comm.comm_ops(summary if not summary.empty else op_rows)
    if ops.empty:
        st.info(
            'No comms-logger output in this run. Add `"comms_logger": {"enabled": true}` to the config '
            "and call `deepspeed.comm.log_summary()`; mind that it synchronises every collective."
        )
        return
    st.warning(COMMS_LOGGER)
    source = "log_summary() table" if not summary.empty else "verbose per-op lines"
    st.dataframe(rounded(ops, 3), hide_index=True, width="stretch")
    st.caption(
        f"From the {source}. Bandwidths in Gbps as DeepSpeed prints them (algbw = size/time; "
        "busbw corrects for the collective's traffic pattern)."
    )
    names = [link.name for link in LINKS]
    link = find_link(st.selectbox("Expected link", names, index=names.index(LINKS[3].name)))
    left, right = st.columns(2)
    chart(
        fig.bandwidth_figure(ops, link.gbps if link else None, link.name if link else ""),
        "communication.bandwidth_figure",
        left,
    )
    chart(fig.latency_figure(ops), "communication.latency_figure", right)
    sizes_section(summary if not summary.empty else op_rows, ops, bd, link.gbps if link else None)
    overlap_section(bd, op_rows)


def sizes_section(
    rows: pd.DataFrame, ops: pd.DataFrame, bd: pd.DataFrame, link_gbps: float | None
) -> None:
    """Bandwidth per collective and message size, and whether the logged time is credible."""
    st.markdown("**By message size**")
    f, cut = view.frames, view.cutoff
    ran = comm.run_ms(bd, [f.frame(k, cut) for k in ("step", "throughput", "comm_op")])
    if comm.logged_time_exceeds(ops, ran):
        st.warning(
            f"Not credible as time spent: the logged collectives add up to "
            f"{ops['total_latency_ms'].sum() / 1000:.2f} s, more than the "
            f"{(ran or 0) / 1000:.2f} s the run trained. Read the sizes and counts; take the "
            "latencies as relative only."
        )
    by_size = comm.comm_by_size(rows)
    chart(fig.size_figure(by_size, link_gbps), "communication.size_figure")
    st.dataframe(rounded(by_size, 3), hide_index=True, width="stretch")


def overlap_section(bd: pd.DataFrame, op_rows: pd.DataFrame) -> None:
    """The overlap estimate per step, where verbose per-op lines carry the step."""
    est = comm.step_overlap(bd, op_rows)
    st.markdown("**Overlap estimate** = (T_compute + T_comm − T_step) / min(T_compute, T_comm)")
    if est.empty:
        st.caption(
            "Needs verbose comms-logger lines (one per collective, with its step) and engine timers."
        )
        return
    st.metric("Overlap, p50 over steps", fmt_pct(est["overlap"].median()))
    st.caption(
        "T_compute = fwd + bwd_inner + step, T_comm = the step's summed collective latencies, "
        "T_step = fwd + bwd + step. With the comms logger on, collectives are synchronised, so "
        "expect this near 0: it cannot see the overlap a run without the logger would have."
    )
    st.dataframe(rounded(est, 3), hide_index=True, width="stretch")


NO_LINK = "none"


def probe_section() -> None:
    """Every collective every rank made, from dsmon run's probe: bandwidth over the run."""
    f, cut = view.frames, view.cutoff
    buckets = rank_views.comm(f, cut)
    if buckets.empty:
        st.info(
            "No collectives measured by dsmon's probe: start the job with `dsmon run -- "
            "deepspeed train.py ...` to see every collective of every rank, with no comms "
            "logger."
        )
        return
    measured = rank_views.stats(f, cut)["coll_wire_ms"].notna().sum()
    st.metric("Steps with every collective measured", f"{measured}")
    summary = f.gpu_summary(cut)
    names = [str(n) for n in summary["name"].dropna()] if "name" in summary.columns else []
    info = f.info()
    guess = expected_link(names, len(info.nodes) if info is not None and info.nodes else None)
    options = [NO_LINK, *(link.name for link in LINKS)]
    chosen = st.selectbox(
        "Expected link (bus bandwidth)",
        options,
        index=options.index(guess.name) if guess else 0,
        key="communication.probe_link",
        help="Guessed from the GPUs' model on a one-node run; between nodes, pick the network.",
    )
    link = find_link(chosen)
    chart(
        collectives_fig.bandwidth_over_time(
            collectives.bandwidth(buckets), link.gbps if link else None, link.name if link else ""
        ),
        "communication.probe_bandwidth",
    )
    st.caption(
        "Bus bandwidth as nccl-tests defines it: message bytes (an all-gather's whole output) "
        "over the wire time, times 2(n-1)/n for an all-reduce and (n-1)/n for an all-gather "
        "or reduce-scatter; messages under 1 KiB measure latency, not bandwidth, and are in the "
        "table only. Wire time is the least time any rank spent in the calls (the last "
        "rank to arrive waits for no one); the skew is how long the first rank waited for the "
        "last, per call. DeepSpeed's comms logger prints the same bus bandwidth; its algbw of "
        "an all-reduce is twice nccl-tests'."
    )
    st.dataframe(rounded(collectives.run_table(buckets), 3), hide_index=True, width="stretch")


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    f, cut = view.frames, view.cutoff
    bd = step_views.breakdown(f, cut)
    caveats()
    st.subheader("Share of step time in communication (engine timers)")
    if bd.empty:
        st.info(
            'No engine timer lines: turn on "wall_clock_breakdown": true to see the comm share.'
        )
        if split_section():
            st.caption(SPLIT_HOW)
    else:
        timers_section(bd)
    coordinator_section(bd)
    st.subheader("Collectives of every rank (dsmon run's probe)")
    probe_section()
    st.subheader("Collectives (comms logger)")
    logger_section(bd)


page_header("Communication", view)
live_body(view, body, charts=True)
