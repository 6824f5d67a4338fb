"""The Communication page on real DeepSpeed output.

Read by hand from tests/data/z2/train.log (ZeRO-2, overlap_comm not set, so off), over steps
3-30 (the first two are warm-up, left out of every headline figure): median
optimizer_allgather 4.585 ms; per step optimizer_allgather / fwd has median 34.9 % (the ratio of
the two medians, 4.585 / 11.01 = 42 %, is not what dsmon reports: one definition, the median
over steps, is used by the page, the health checklist and the summary alike); median
bwd_allreduce 8.54 ms, per step bwd_allreduce / bwd_inner median 36.3 %; per step
(bwd_allreduce + optimizer_allgather) / (fwd + bwd + step) has median 24.3 %. From tests/data/comms_logger/train.log's log_summary()
table: all_reduce 20 + 20 calls, 1559.64 + 1536.33 = 3095.97 ms; broadcast 53 calls, 436.26 ms;
all_gather_into_tensor 20 calls, 918.40 ms.
"""

from __future__ import annotations

import pytest
from dashboard_support import app_at, figures, shared_store, texts, trace_names, values


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def test_exposed_share_and_the_phase_share_lines(store_url: str) -> None:
    at = app_at(store_url, "z2", "communication")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert shown == {
        "Exposed comm, p50 share of step": "24.3 %",
        "bwd_allreduce p50": "8.54 ms",
        "Steps timed": "30",
    }
    page = texts(at)
    # each share named for what it divides: ZeRO-2's all-gather follows the optimizer step,
    # so it is read against the step, never against fwd (that read 35 %)
    assert "optimizer_allgather = 4.58 ms (8 % of the step, median over steps)" in page
    assert "bwd_allreduce = 8.54 ms (27 % of bwd, median over steps)" in page


def test_overlap_caveat_follows_the_config(store_url: str) -> None:
    at = app_at(store_url, "z2", "communication")
    caveat = at.info[0].value
    assert caveat.startswith("**overlap_comm is off** (default for ZeRO stage 2)")
    assert "No collectives measured by dsmon's probe" in at.info[1].value
    assert "No comms-logger output in this run" in at.info[2].value


def test_timer_charts(store_url: str) -> None:
    figs = figures(app_at(store_url, "z2", "communication"))
    share = figs["Exposed communication per step"]
    assert trace_names(share) == ["exposed comm ms rank 0", "% of step rank 0"]
    ratios = figs["Communication timers against the timer that holds them (%)"]
    assert trace_names(ratios) == [
        "bwd_allreduce / bwd (rank 0)",
        "optimizer_allgather / the step (rank 0)",
    ]


def test_comms_logger_table_with_its_caveat(store_url: str) -> None:
    at = app_at(store_url, "comms_logger", "communication")
    assert not at.exception
    ops = at.dataframe[0].value.set_index("op")
    assert ops.loc["all_reduce", "count"] == 40
    assert ops.loc["all_reduce", "total_latency_ms"] == 3095.97
    assert ops.loc["broadcast", "count"] == 53
    assert ops.loc["all_gather_into_tensor", "total_latency_ms"] == 918.40
    assert "synchronises the device after every collective" in at.warning[0].value
    assert "From the log_summary() table" in texts(at)
    bw = figures(at)["Bandwidth per collective (Gbps)"]
    assert trace_names(bw) == ["algbw", "busbw"]
    assert bw["layout"]["shapes"][0]["y0"] == 256.0  # PCIe 4.0 x16 by default


def test_no_timers_no_share(store_url: str) -> None:
    at = app_at(store_url, "comms_logger", "communication")
    assert any("No engine timer lines" in i.value for i in at.info)
    assert not at.metric


def test_one_figure_for_one_idea_on_every_page(store_url: str) -> None:
    """The communication page, the health checklist and the run summary agree to the digit."""
    from dsmon.analysis.summary import run_summary
    from dsmon.store.store import open_store

    comm_page = app_at(store_url, "z2", "communication")
    shown = {m.label: m.value for m in comm_page.metric}["Exposed comm, p50 share of step"]
    health = texts(app_at(store_url, "z2", "health"))
    with open_store(store_url) as store:
        summary = run_summary(store, "z2")
    assert summary.comm_share is not None
    assert shown == f"{100 * summary.comm_share:.1f} %" == "24.3 %"
    assert "communication is 24.3% of a step" in health


def test_bandwidth_by_message_size_and_a_total_that_is_not_credible(store_url: str) -> None:
    """comms_logger's table (module docstring): all_reduce of 4.0 B and of 3.56 MB, 20 calls each,
    77.98 and 77.09 ms average; the logged collectives add up to 4450.63 ms while its training
    lines (line 45, ``step=0`` as the engine starts, 14:12:02,163; line 201, the ThroughputTimer
    line of step 20, 14:12:04,408) span 2.245 s: more than the run trained."""
    at = app_at(store_url, "comms_logger", "communication")
    assert not at.exception
    table = next(df.value for df in at.dataframe if "msg_size_bytes" in df.value.columns)
    reduce = table[table["op"] == "all_reduce"].set_index("msg_size_bytes")
    assert reduce.loc[4, "count"] == 20 and reduce.loc[4, "avg_latency_ms"] == 77.98
    assert reduce.loc[3732931, "avg_latency_ms"] == 77.09
    (warning,) = [w.value for w in at.warning if "Not credible" in w.value]
    assert "4.45 s" in warning and "2.25 s" in warning
    spec = figures(at)["Bus bandwidth by message size (Gbps)"]
    assert {t["name"] for t in spec["data"]} >= {"all_reduce", "broadcast"}
    ok = app_at(store_url, "comms_logger_verbose", "communication")
    assert not [w for w in ok.warning if "Not credible" in w.value]


def test_zero3_coordinator_section(store_url: str) -> None:
    """DeepSpeed 0.10.0's coordinator timers (tests/data/zero3_coordinator_v0100/train.log).

    Steps 3-8 by hand (see tests/unit/analysis/test_analysis_coordinator.py): wait 50.78, all-gather launch
    10.90, submission 2.94 of 64.62 ms; fetch time / (fwd + bwd) median 10.1 %.
    """
    at = app_at(store_url, "zero3_coordinator", "communication")
    assert not at.exception
    assert "ZeRO-3 parameter fetches (coordinator timers)" in [h.value for h in at.subheader]
    shown = {m.label: m.value for m in at.metric}
    assert shown["Wait share"] == "78.6 %"
    assert shown["Gather share"] == "16.9 %"
    assert shown["Submission share"] == "4.5 %"
    assert shown["Fetch time, share of fwd + bwd"] == "10.1 %"
    fig = figures(at)["ZeRO-3 parameter fetch time per step"]
    assert trace_names(fig) == [
        "wait for in-flight parameters",
        "all-gather launch",
        "submission bookkeeping",
        "wait, % of fetch time",
    ]
    assert values(fig["data"][0]["x"]) == [2, 3, 4, 5, 6, 7, 8]


def test_no_coordinator_section_without_its_timers(store_url: str) -> None:
    at = app_at(store_url, "z2", "communication")
    assert "ZeRO-3 parameter fetches (coordinator timers)" not in [h.value for h in at.subheader]
