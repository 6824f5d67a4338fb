"""Compare: two or more runs' step time, throughput, exposed communication and loss, and configs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dsmon.analysis import compare, ranks, training
from dsmon.analysis.downsample import downsample
from dsmon.ds_config.read import preferred_config
from dsmon.figures import compare as fig
from dsmon.view import ranks as rank_views
from dsmon.view.cache import RunFrames
from dsmon.view.cutoff import OPEN
from dsmon.view.hub import FrameHub
from ui.charts import chart
from ui.page import page_header, page_view, runs_body
from ui.text import md_escape

view = page_view(__file__)
#: The URL parameter holding the compared runs, comma-separated (``?runs=a,b``).
RUNS_PARAM = "runs"
KINDS = ("timer", "step", "iteration", "monitor", "throughput", "rec:config")


def pick(names: list[str]) -> list[str]:
    """The runs to compare, from ``?runs=`` (else the sidebar's run); the choice goes back."""
    asked = [n for n in (st.query_params.get(RUNS_PARAM) or "").split(",") if n]
    missing = [n for n in asked if n not in names]
    if missing:
        st.warning(md_escape(f"No run named {', '.join(missing)} in this store."))
    default = [n for n in asked if n in names] or [view.run]
    chosen: list[str] = st.multiselect("Runs to compare", names, default=default)
    if chosen:
        st.query_params[RUNS_PARAM] = ",".join(chosen)
    else:
        st.query_params.pop(RUNS_PARAM, None)
    return chosen


def series_and_config(frames: RunFrames) -> tuple[pd.DataFrame, dict[str, object] | None]:
    """One run's compared curves and its preferred config, memoised on its new records."""

    def build() -> tuple[pd.DataFrame, dict[str, object] | None]:
        cfg = preferred_config(frames.records("config"))
        config = dict(cfg.config) if cfg else None
        tbs = training.train_batch_size(config)
        kinds = [k for k in KINDS if not k.startswith("rec:")]
        data = {k: frames.frame(k) for k in kinds}
        if data["timer"].empty:  # no timer lines: the probe's step times, if it ran
            data[ranks.STATS_KEY] = rank_views.stats(frames)
        return compare.run_series(data, tbs), config

    # the whole run (OPEN): runs are compared as they are, whatever the replay step
    return frames.memo("compare.run", [*KINDS, "rank_step"], OPEN, build)


def body(hub: FrameHub, chosen: list[str]) -> None:
    """The overlay and the config differences of the chosen runs."""
    per_run = {name: series_and_config(hub.run(name)) for name in chosen}
    series = compare.overlay({n: s for n, (s, _) in per_run.items()})
    shown = (
        downsample(series, "step", ["value"], by=["run", "metric"]) if not series.empty else series
    )
    chart(fig.compare_figure(shown, chosen), "compare.overlay")
    st.caption(
        "Step time: fwd + bwd + step of the slowest rank (engine timers, wall_clock_breakdown); "
        "without timer lines, the wall time between steps that dsmon run's probe measured. "
        "Exposed comm: bwd_allreduce (+ optimizer_allgather) as a share of that step. "
        "samples/s: ThroughputTimer or iteration lines. Whole runs, whatever the replay step."
    )
    st.subheader("Config differences")
    configs = {n: c for n, (_, c) in per_run.items()}
    without = [n for n, c in configs.items() if c is None]
    if without:
        st.caption(md_escape(f"No config recorded for: {', '.join(without)}."))
    diff = compare.config_diff(configs)
    if diff.empty:
        st.caption("The configs of these runs set the same values.")
    else:
        st.dataframe(diff, hide_index=True, width="stretch")


def main(hub: FrameHub) -> None:
    """The run picker, then the comparison once two runs are picked."""
    chosen = pick(sorted(r.name for r in hub.store.runs()))
    if len(chosen) < 2:
        st.info("Pick two or more runs to compare; the address (?runs=a,b) keeps the choice.")
        return
    runs_body(view, chosen, lambda: body(hub, chosen))


page_header("Compare", None)  # the runs compared are named in the picker and status lines
assert view.hub is not None, "app.py hands every page the store's runs"
main(view.hub)
