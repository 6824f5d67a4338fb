"""Training: loss, learning rate, loss scale, memory and speed against the step, from every source."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from dsmon.analysis import training
from dsmon.ds_config.read import preferred_config
from dsmon.figures import training as fig
from dsmon.figures.common import rounded
from dsmon.view import ranks as rank_views
from dsmon.view import step_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import Cutoff
from ui.charts import chart
from ui.page import live_body, page_header, page_view

view = page_view(__file__)


def load() -> tuple[list[pd.DataFrame], list[list[np.ndarray] | None], np.ndarray]:
    """Every training quantity of the run: each kind's points, grown by new steps only.

    With where each trace's points are, kept live so that a refresh does not regroup them,
    and the steps the engine skipped for overflow (from the probe).
    """
    f, cut = view.frames, view.cutoff
    config = preferred_config(f.records("config", cut))
    tbs = training.train_batch_size(config.config if config else None)
    probe = f.memo("training.probe", ["rank_step"], cut, lambda: _probe_points(f, cut))
    skipped = f.memo(
        "training.skipped",
        ["rank_step"],
        cut,
        lambda: training.skipped_steps(rank_views.stats(f, cut)),
    )
    parts = [*step_views.training_parts(f, cut, tbs), probe]
    return parts, [*step_views.training_groups(f, cut, tbs), None], skipped


def _probe_points(f: RunFrames, cut: Cutoff) -> pd.DataFrame:
    """What dsmon run's probe read from the engine.

    The loss and gradient norm of every step; the loss scale and skipped steps when they
    moved. DeepSpeed prints no loss (and, from 0.18.3, its engine writes none to csv_monitor); at
    its default log level no loss-scale line reaches the log: an fp16 run's overflows show
    only here.
    """
    stats = rank_views.stats(f, cut)
    always = training.probe_series(stats, ["loss", "grad norm"])
    moved = training.varying(training.probe_series(stats, ["loss scale", "skipped steps"]))
    return training.in_metric_order([always, moved])


def body() -> None:
    """The page; re-run alone every ``refresh_s`` seconds when live (``ui.page.live_body``)."""
    parts, grouped, skipped = load()
    if all(part.empty for part in parts):
        st.info(
            "No loss, learning rate, loss scale, memory or throughput lines in this run yet. "
            "DeepSpeed prints no loss: start the job with `dsmon run -- deepspeed train.py "
            "...` and its probe reads the loss given to engine.backward and the gradient norm "
            'every step. DeepSpeed prints the rest at "log_level": "info" every '
            '"steps_per_print" steps; "csv_monitor" writes the learning rate (and, before '
            '0.18.3, the loss); "memory_breakdown": true prints memory; the Hugging Face '
            "Trainer prints its loss every logging_steps."
        )
        return
    shown, newest = training.traces_and_latest(parts, grouped)
    chart(fig.training_figure(shown, skipped=skipped.tolist()), "training.curves")
    st.caption(
        "Each source is its own line: DeepSpeed's step= and ThroughputTimer lines, its "
        "loss-scale messages and see_memory_usage blocks, csv_monitor files (samples turned "
        "into steps by train_batch_size), Megatron-DeepSpeed or pipeline iteration lines, "
        "the Hugging Face Trainer's log dicts (its evaluation loss apart), and what dsmon "
        "run's probe read from the engine: the loss given to engine.backward (rank 0's, the "
        "mean of its micro-batches), the gradient norm, and the loss scale and skipped steps "
        "when they moved. Red crosses mark the steps skipped for overflow."
    )
    st.subheader("Latest values")
    st.dataframe(rounded(newest, 6), hide_index=True, width="stretch")


page_header("Training", view)
live_body(view, body, charts=True)
