"""Autotuner: the results of ``deepspeed --autotuning``, its experiments and the best setup."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from dsmon.analysis import autotune
from dsmon.figures import autotune as fig
from dsmon.figures.common import rounded
from dsmon.model.records import Record
from ui.charts import chart
from ui.page import live_body, page_header, page_view
from ui.text import md_escape

view = page_view(__file__)
KINDS = ("rec:autotune_summary", "rec:autotune_exp", "rec:config")
BEST_FROM = {
    "optimal": "the autotuner's ds_config_optimal.json",
    "experiment": "the ds_config saved with that experiment",
    "name": (
        "the settings its name spells (the autotuner names each experiment after them); "
        "every other key is your config template's"
    ),
}


def records() -> list[Record]:
    """The run's autotuner records and configs, as they stood at the replay position."""
    f, cut = view.frames, view.cutoff
    return [r for kind in KINDS for r in f.records(kind[4:], cut)]


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    f, cut = view.frames, view.cutoff
    recs = f.memo("autotune.records", KINDS, cut, records)
    summary = autotune.summary_table(recs)
    experiments = autotune.experiments_table(recs)
    if summary.empty and experiments.empty:
        st.info(
            "No autotuner results in this run. `deepspeed --autotuning run` writes them to "
            "autotuning_results/ (summary.txt) and autotuning_exps/ (one metrics.json per "
            "experiment); import that folder with `dsmon import`."
        )
        return
    best_section(recs, summary, experiments)
    points = autotune.throughput_points(experiments, summary)
    chart(fig.throughput_figure(points), "autotuner.throughput")
    st.caption(
        "Dots: measured experiments; stars: the best of each tuning space in summary.txt, "
        "whose value is the metric the autotuner ranked by (throughput unless its "
        '"metric" was set to latency or flops). A best of 0 means no experiment of that '
        "space ran and is not drawn."
    )
    st.subheader("Summary")
    st.dataframe(summary, hide_index=True, width="stretch")
    st.subheader("Experiments")
    if experiments.empty:
        st.caption("No experiment metrics.json in this run.")
    else:
        st.dataframe(rounded(experiments, 4), hide_index=True, width="stretch")


def best_section(recs: list[Record], summary: pd.DataFrame, exps: pd.DataFrame) -> None:
    """The best setup found, as JSON to copy into the run's ds_config."""
    best = autotune.best_config(recs, summary, exps)
    st.subheader("Best configuration")
    if best is None:
        st.caption("The results name no best experiment.")
        return
    label = f"Best experiment: {best.name}. " if best.name else ""
    st.caption(md_escape(f"{label}From {BEST_FROM[best.origin]}."))
    st.code(json.dumps(best.config, indent=2, sort_keys=True), language="json")


page_header("Autotuner", view)
live_body(view, body)
