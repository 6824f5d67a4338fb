"""FLOPS: the flops-profiler block, top modules, the module tree, achieved TFLOPS and MFU."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dsmon.analysis import flops, gpus
from dsmon.analysis.downsample import downsample
from dsmon.analysis.peaks import (
    A100_REFERENCE,
    DTYPES,
    PEAKS,
    GpuPeak,
    find_peak,
    peak_by_model,
    training_dtype,
)
from dsmon.ds_config.read import preferred_config
from dsmon.figures import flops as fig
from dsmon.model.records import FlopsProfileRecord
from dsmon.view import step_views
from ui.charts import chart
from ui.page import live_body, page_header, page_view
from ui.text import md_escape

view = page_view(__file__)
UNKNOWN = "(unknown: pick a model)"
PROFILER_NOTE = (
    "DeepSpeed's flops profiler counts one forward of one micro-batch on rank 0 at `profile_step`; "
    "backward FLOPs are estimated as 2 x forward (plus recompute), and its latencies are that one "
    "step's. Fused kernels it cannot see (SDPA, flash-attn) are not counted, so TFLOPS and MFU "
    "can read low."
)


def pick_profile(profiles: list[FlopsProfileRecord]) -> FlopsProfileRecord:
    """The profile to show; a chooser when the run printed several (one per micro-step)."""
    if len(profiles) == 1:
        return profiles[0]
    labels = [
        f"#{i + 1}: step {p.profile_step}, line {p.src.line}"
        + (" (cut short)" if p.partial else "")
        for i, p in enumerate(profiles)
    ]
    default = profiles.index(flops.latest_profile(profiles) or profiles[-1])
    index = st.selectbox(
        "Profile", range(len(profiles)), index=default, format_func=labels.__getitem__
    )
    return profiles[int(index)]


def gpu_model() -> GpuPeak | None:
    """The GPU model for MFU: from the NVML samples, else the user's pick."""
    seen = gpus.models(view.frames.gpu_summary(view.cutoff))
    detected = [p for p in (find_peak(name) for name in seen) if p is not None]
    models = [UNKNOWN, *[p.model for p in PEAKS]]
    default = models.index(detected[0].model) if detected else 0
    choice = st.selectbox(
        "GPU model (for the peak)",
        models,
        index=default,
        help="Detected from NVML samples when the run has them.",
    )
    if seen and not detected:
        st.caption(md_escape(f"NVML names not in the peaks table: {', '.join(seen)}"))
    return peak_by_model(choice)


def mfu_section(profile: FlopsProfileRecord, per_step: pd.DataFrame) -> None:
    """Achieved TFLOPS per GPU against the dense peak of the model and dtype."""
    cfg = preferred_config(view.frames.records("config"))
    dtype_default = training_dtype(cfg.config if cfg else None)
    left, right = st.columns(2)
    with left:
        peak = gpu_model()
    dtype = right.selectbox(
        "Matmul dtype",
        DTYPES,
        index=DTYPES.index(dtype_default),
        help="From the config's bf16/fp16 sections; fp32 assumes TF32 off (PyTorch default).",
    )
    run_tflops = per_step["tflops"].median() if not per_step.empty else None
    achieved = float(run_tflops) if run_tflops is not None and not pd.isna(run_tflops) else None
    if achieved is None and profile.flops_per_s_per_gpu is not None:
        achieved = profile.flops_per_s_per_gpu / flops.TERA
    st.dataframe(flops.mfu_rows(achieved, peak, dtype), hide_index=True, width="stretch")
    missing = flops.mfu_missing(achieved, peak, dtype)
    if missing:
        st.caption(missing)
    if profile.flops_per_s_per_gpu is not None:
        st.caption(
            f"At the profiled step the profiler itself reports {profile.flops_per_s_per_gpu / flops.TERA:.4g} "
            "TFLOPS per GPU; the table uses the median over all timed steps."
        )
    peak_value = peak.tflops.get(dtype) if peak else None
    is_a100 = peak is not None and peak.model == A100_REFERENCE.gpu
    per_gpu = downsample(per_step, "step", ["tflops"], by="rank")
    label = f"({peak.model}, {dtype})" if peak else ""
    # The band is half-precision training; it is drawn only where it compares like with like.
    is_a100 = is_a100 and dtype in ("bf16", "fp16")
    band = A100_REFERENCE if is_a100 else None
    chart(fig.tflops_figure(per_gpu, peak_value, label, band), "flops.tflops_figure")
    ref = A100_REFERENCE
    st.caption(
        f"A100 reference: {ref.low_tflops:g}-{ref.high_tflops:g} TFLOPS per GPU, {ref.label} "
        f"({ref.source}){'; drawn as the green band' if is_a100 else ''}. Real figures vary "
        "with model architecture, batch size and sequence length."
    )


def modules_section(profile: FlopsProfileRecord) -> None:
    """Top modules by a metric, the aggregated table and the module tree."""
    labels = {"params": "params", "macs": "fwd MACs", "fwd_latency": "fwd latency"}
    metric = st.radio(
        "Rank modules by", list(labels), format_func=labels.__getitem__, horizontal=True
    )
    left, right = st.columns(2)
    chart(
        fig.top_modules_figure(flops.top_modules(profile, metric, 10), metric),
        "flops.top_modules_figure",
        left,
    )
    right.markdown("**Aggregated profile per GPU** (top classes per depth, as printed)")
    agg = flops.aggregated(profile)
    right.dataframe(agg[agg["metric"] == metric], hide_index=True, width="stretch")
    tree = flops.module_tree(profile)
    if not fig.tree_has_data(tree, metric):
        st.caption(
            'No module tree: the flops profiler prints one with "detailed": true (per-module '
            "params, MACs and latency)."
        )
        return
    chart(fig.tree_figure(tree, metric), "flops.tree_figure")
    with st.expander("Module tree as a table"):
        st.dataframe(tree, hide_index=True, width="stretch")


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    f, cut = view.frames, view.cutoff
    profiles = [p for p in f.records("flops_profile", cut) if isinstance(p, FlopsProfileRecord)]
    if not profiles:
        st.info(
            'No flops-profiler output in this run. Add `"flops_profiler": {"enabled": true, '
            '"profile_step": 5}` to the DeepSpeed config.'
        )
        return
    profile = pick_profile(profiles)
    st.info(PROFILER_NOTE)
    if profile.partial:
        st.warning(
            "This profile was cut short in the log (the run stopped, or the output was pasted "
            "in part): only the figures DeepSpeed printed before the cut are shown."
        )
    st.subheader("Profile summary")
    st.dataframe(flops.summary(profile), hide_index=True, width="stretch", height="content")
    bd = step_views.breakdown(f, cut)
    micro = step_views.micro(f, cut)
    per_step = flops.step_tflops(bd, profile, flops.micro_batches_per_step(micro))
    st.subheader("Achieved TFLOPS and MFU")
    mfu_section(profile, per_step)
    st.subheader("Modules")
    modules_section(profile)


page_header("FLOPS", view)
live_body(view, body, charts=True)
