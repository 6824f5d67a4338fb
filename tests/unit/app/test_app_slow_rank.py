"""The dashboard on a real run with one slowed rank (tests/data/verdict_slow_rank, its README).

Rank 1 sleeps 200 ms in every forward; the engine timers are on, at DeepSpeed's default log
level (no throughput line). The Health page must lead with the straggler, the Communication
page must split rank 0's communication into wire time and waiting, and the Steps page must
not draw an empty samples/s panel.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_support import DATA, app_at, figures, texts

from dsmon.load.files import import_paths
from dsmon.store.store import open_store


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("slow")) / "store.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / "verdict_slow_rank"], run="slow")
        import_paths(store, [DATA / "z2"], run="z2")  # timers, no probe
        import_paths(store, [DATA / "probe_accelerate"], run="balanced")  # probe, no straggler
    return str(path)


@pytest.fixture
def store_url(stored: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("DSMON_STORE", stored)
    return stored


def test_health_leads_with_the_straggler(store_url: str) -> None:
    at = app_at(store_url, "slow", "health")
    assert not at.exception
    head = at.error[0].value  # rank 1 holds rank 0 up for over half of each step: a failure
    assert head.startswith(
        "**What is wrong with this run:** :red-badge[FAIL] `ranks.straggler` rank 1 is the "
        "slowest in 100% of steps"
    )
    assert [s.value for s in at.subheader][0] == "Run"
    first = at.expander[0].label
    assert first == ":red-badge[FAIL] **No rank holds the others up** `ranks.straggler`"


def test_communication_splits_wire_time_from_waiting(store_url: str) -> None:
    at = app_at(store_url, "slow", "communication")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    timers = float(shown["Exposed comm, p50 share of step"].rstrip(" %"))
    wire = float(shown["Wire time, p50 share of step"].rstrip(" %"))
    waiting = float(shown["Waiting for the slowest rank, p50 share of step"].rstrip(" %"))
    assert wire < 15 < 40 < min(timers, waiting)
    assert "rank 0 waits for it inside the collective" in texts(at)
    assert "dsmon run's probe on every rank tells the two apart" in texts(at)


def test_a_run_without_the_probe_says_its_share_includes_waiting(store_url: str) -> None:
    at = app_at(store_url, "z2", "communication")
    assert "Wire time, p50 share of step" not in {m.label for m in at.metric}
    assert "Start the job with `dsmon run` to tell the wire time from the waiting" in texts(at)


def test_steps_draws_no_empty_throughput_panel(store_url: str) -> None:
    at = app_at(store_url, "slow", "steps")
    assert not at.exception
    main = figures(at)["Per optimizer step, rank 0 (ms)"]
    axes = [k for k in main["layout"] if k.startswith("yaxis")]
    assert len(axes) == 2  # the breakdown and the loss-scale row: no samples/s row
    assert "No samples/s or TFLOPS in this run" in texts(at)
    shown = {m.label: m.value for m in at.metric}
    assert shown["slowest rank (share of steps)"] == "rank 1 · 100%"
    assert "Time in collectives: wire time " in texts(at)


def test_a_balanced_run_names_no_slowest_rank(store_url: str) -> None:
    """probe_accelerate: rank 0 was the slowest in 12 of 18 steps, rank 1 in the other 6."""
    at = app_at(store_url, "balanced", "steps")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert "slowest rank (share of steps)" not in shown  # it read "rank 0 · 67%"
    assert shown["slowest rank"] == "none: they take turns"
