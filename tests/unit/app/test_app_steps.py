"""The Steps page on real DeepSpeed output (tests/data/z2: ZeRO-2, 30 steps, rank-0 timers).

Expected numbers were read from tests/data/z2/train.log: the 30 ``[Rank 0] time (ms) | fwd:``
lines of steps 3-30 (after the two warm-up steps, the figures every page quotes) have median
fwd 10.97, bwd 30.09, bwd_inner 21.46, bwd_allreduce 8.54, step 13.40 ms; step 1 (350.75 +
754.18 + 190.22 = 1295.15 ms) is the slowest; steps 3-10 have median fwd 11.94 ms.
"""

from __future__ import annotations

import pytest
from dashboard_support import app_at, figures, shared_store, texts, trace_names, values


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_medians_of_the_zero2_run(store_url: str) -> None:
    at = app_at(store_url, "z2", "steps")
    assert not at.exception
    assert at.header[0].value == "Steps · z2"
    shown = {m.label: m.value for m in at.metric}
    assert shown == {
        "fwd p50": "10.97 ms",
        "bwd p50": "30.09 ms",
        "bwd_inner p50": "21.46 ms",
        "bwd_allreduce p50": "8.54 ms",  # as on the Communication page, to the last digit
        "step p50": "13.40 ms",
        "total p90": "81.87 ms",
    }
    assert "30 timed steps · ranks 0" in texts(at)
    assert "p50 / p90 over the 28 steps after warm-up" in texts(at)
    assert "Timer lines come from one rank only" in texts(at)


def test_slowest_steps_and_stats_tables(store_url: str) -> None:
    at = app_at(store_url, "z2", "steps")
    stats, slowest = at.dataframe[0].value, at.dataframe[1].value
    assert stats.loc["fwd_ms", "max"] == 19.78  # step 1's 350.75 is warm-up: not a figure

    assert stats.loc["optimizer_allgather_ms", "max"] == 8.37  # 11.76 is step 1's
    first = slowest.iloc[0]
    assert (first["step"], first["total_ms"]) == (1, 1295.15)


def test_one_step_axis_for_breakdown_throughput_and_tflops(store_url: str) -> None:
    figs = figures(app_at(store_url, "z2", "steps"))
    main = figs["Per optimizer step, rank 0 (ms)"]
    names = trace_names(main)
    assert names[:4] == ["fwd", "bwd_inner", "bwd_allreduce", "step"]
    assert "samples/s" in names and "TFLOPS per GPU" in names
    fwd = main["data"][0]
    assert values(fwd["x"]) == list(range(1, 31))
    assert values(fwd["y"])[0] == 350.75
    # step 1 is ~24x the p90 step: the axis is capped and the step named.
    texts_on_chart = [a["text"] for a in main["layout"]["annotations"]]
    assert "off scale: step 1: 1295 ms" in texts_on_chart
    assert "no loss-scale events" in texts_on_chart
    zero = figs["ZeRO optimizer timers (ms)"]
    assert trace_names(zero) == ["optimizer_allgather", "optimizer_gradients", "optimizer_step"]


def test_loss_scale_events_share_the_axis(store_url: str) -> None:
    figs = figures(app_at(store_url, "fp16_zero2", "steps"))
    main = next(v for k, v in figs.items() if k.startswith("Per optimizer step"))
    events = [t for t in main["data"] if t.get("name") == "loss-scale event"]
    assert len(events) == 1
    assert values(events[0]["x"]) == [8, 9, 10, 18]


def test_micro_steps_of_gradient_accumulation(store_url: str) -> None:
    figs = figures(app_at(store_url, "grad_accum", "steps"))
    micro = figs["Micro-steps (ms per micro-batch)"]
    x = values(micro["data"][0]["x"])
    steps = {int(v) for v in x}
    assert len(x) == 4 * len(steps)  # gradient_accumulation_steps 4: four bars per step


def test_replay_shows_the_run_as_of_a_step(store_url: str) -> None:
    front = app_at(store_url, "z2", step="10")  # AppTest keeps the sidebar on the first page
    assert front.sidebar.slider[0].value == 10
    at = app_at(store_url, "z2", "steps", step="10")
    shown = {m.label: m.value for m in at.metric}
    assert shown["fwd p50"] == "11.94 ms"
    assert "10 timed steps" in texts(at)


def test_empty_state_without_timer_lines(store_url: str) -> None:
    at = app_at(store_url, "comms_logger", "steps")
    assert not at.exception
    assert "No engine timer lines in this run" in at.info[0].value
    assert not at.metric
