"""The Compare page on two real runs of the dashboard store: z2 (ZeRO-2, fp32) and fp16_zero2.

Values read by hand from each tests/data/<run>/train.log, step 10:

- z2 line 274 ``fwd: 11.64 | bwd: 28.62 | bwd_inner: 22.97 | bwd_allreduce: 5.63 | step: 13.10``
  and line 270 ``optimizer_allgather: 4.37``: step 53.36 ms, exposed comm (5.63 + 4.37) / 53.36.
- fp16_zero2 line 224 ``fwd: 9.12 | bwd: 36.61 | ... | bwd_allreduce: 8.49 | step: 2.58``:
  step 48.31 ms, exposed comm 8.49 / 48.31; line 222 ``CurrSamplesPerSec=164.78688547585``.
"""

from __future__ import annotations

import json

import pytest
from dashboard_support import app_at, figures, shared_store, texts, trace_names, values
from locations import DATA

from dsmon.load.files import import_paths
from dsmon.store.store import open_store

TITLE = "Runs compared, per optimizer step"


@pytest.fixture(autouse=True)
def store_url(monkeypatch: pytest.MonkeyPatch) -> str:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    return url


def at_step(spec: dict, axis: str, run: str, step: float) -> float:
    """The y value of ``run``'s trace on one subplot (``y``, ``y2``, ...) at ``step``."""
    (trace,) = [t for t in spec["data"] if t["name"] == run and t.get("yaxis", "y") == axis]
    xs, ys = values(trace["x"]), values(trace["y"])
    return float(ys[xs.index(step)])


def test_overlay_of_two_runs_from_the_url(store_url: str) -> None:
    at = app_at(store_url, "z2", "compare", runs="z2,fp16_zero2")
    assert not at.exception
    assert at.multiselect[0].value == ["z2", "fp16_zero2"]
    # the page is about the runs picked, not the sidebar's: each says where it stands
    assert at.header[0].value == "Compare"
    status = [c.value for c in at.caption if ": finished: exit status 0 " in c.value]
    assert [s.split(":")[0] for s in status] == ["z2", "fp16_zero2"]
    spec = figures(at)[TITLE]
    titles = [a["text"] for a in spec["layout"]["annotations"]]
    # no loss lines, no probe (no wire time)
    assert titles == ["step time (ms)", "samples/s", "exposed comm, rank 0's timers (% of step)"]
    assert trace_names(spec) == ["z2", "fp16_zero2"] * 3
    assert at_step(spec, "y", "z2", 10) == pytest.approx(53.36)
    assert at_step(spec, "y", "fp16_zero2", 10) == pytest.approx(48.31)
    assert at_step(spec, "y2", "fp16_zero2", 10) == pytest.approx(164.78688547585)
    assert at_step(spec, "y3", "z2", 10) == pytest.approx(100 * 10.0 / 53.36)
    assert at_step(spec, "y3", "fp16_zero2", 10) == pytest.approx(100 * 8.49 / 48.31)
    at.multiselect[0].select("grad_accum").run()  # the pick goes into the address
    assert at.query_params["runs"] == "z2,fp16_zero2,grad_accum"
    assert sum(c.value.startswith("grad_accum: finished: ") for c in at.caption) == 1
    assert trace_names(figures(at)[TITLE])[:3] == ["z2", "fp16_zero2", "grad_accum"]


def test_config_differences_side_by_side(store_url: str) -> None:
    at = app_at(store_url, "z2", "compare", runs="z2,fp16_zero2")
    diff = at.dataframe[0].value.set_index("key")
    assert list(diff.columns) == ["z2", "fp16_zero2"]
    # z2/ds_config.json sets "gradient_accumulation_steps": 1 and a flops_profiler section;
    # fp16_zero2's sets "fp16": {"enabled": true, "initial_scale_power": 16, ...}
    assert diff.loc["gradient_accumulation_steps"].tolist() == ["1", "(not set)"]
    assert diff.loc["fp16.initial_scale_power"].tolist() == ["(not set)", "16"]
    assert diff.loc["flops_profiler.profile_step"].tolist() == ["5", "(not set)"]
    assert "zero_optimization.stage" not in diff.index  # both ZeRO 2
    assert "train_batch_size" not in diff.index  # both 8


def test_one_run_asks_for_another_and_unknown_names_are_said(store_url: str) -> None:
    at = app_at(store_url, "z2", "compare", runs="z2,nope")
    assert not at.exception
    assert at.warning[0].value == "No run named nope in this store."
    assert at.info[0].value.startswith("Pick two or more runs to compare")
    assert not at.get("plotly_chart")
    at = app_at(store_url, "grad_accum", "compare")
    assert at.multiselect[0].value == ["grad_accum"]
    assert "Pick two or more runs" in texts(at)


def test_runs_without_timer_lines_compare_the_probes_step_times(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Two real dsmon run jobs at DeepSpeed's default log level (tests/data/probe_*): no timer
    line, so each run's step time is the probe's wall time per step (slowest rank)."""
    data = DATA
    url = str(tmp_path / "s.sqlite")
    with open_store(url) as store:
        import_paths(store, [data / "probe_fp16_default"], run="fp16")
        import_paths(store, [data / "probe_accelerate" / "default"], run="acc")
    monkeypatch.setenv("DSMON_STORE", url)
    at = app_at(url, "fp16", "compare", runs="fp16,acc")
    assert not at.exception
    spec = figures(at)[TITLE]
    # and the wire time of collectives, which the probe on every rank tells from waiting
    assert [a["text"] for a in spec["layout"]["annotations"]] == [
        "step time (ms)",
        "wire time, every rank (% of step)",
    ]
    for run, folder in (
        ("fp16", data / "probe_fp16_default"),
        ("acc", data / "probe_accelerate" / "default"),
    ):
        slowest: dict[int, float] = {}  # the slower rank's total_ms of each step, off the files
        for path in (folder / "probe").glob("rank-*.jsonl"):
            for obj in map(json.loads, path.read_text().splitlines()):
                if obj["kind"] == "rank_step":
                    slowest[obj["step"]] = max(slowest.get(obj["step"], 0.0), obj["total_ms"])
        assert at_step(spec, "y", run, 10) == pytest.approx(slowest[10])
