"""What the pages show of the probe's new measurements, on real DeepSpeed jobs.

``probe_slow_data``: rank 1's data loader takes 150 ms a batch; ``probe_monitored``: the comms
logger and csv_monitor on (see each folder's README.md). A log with nothing per step (the
slowed job's log read alone, without its probe files: DeepSpeed's default log level) makes
the Steps page say so and show the two ways to get steps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from dashboard_support import DATA, app_at, figures, texts, trace_names, values

from dsmon.load.files import import_paths
from dsmon.store.store import open_store


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("probe_measures")) / "store.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / "probe_slow_data"], run="slow")
        import_paths(store, [DATA / "probe_monitored"], run="monitored")
        import_paths(store, [DATA / "probe_slow_data" / "train.log"], run="log_only")
    return str(path)


def test_the_training_page_draws_the_loss_the_script_printed(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "monitored", "training")
    assert not at.exception
    (fig,) = figures(at).values()
    names = trace_names(fig)
    assert "loss · dsmon run's probe" in names and "grad norm · dsmon run's probe" in names
    assert "learning rate · monitor Train/Samples/lr" in names  # csv_monitor's series
    loss = fig["data"][names.index("loss · dsmon run's probe")]
    printed = re.findall(
        r"\[train_tiny\] step (\d+) loss ([\d.]+)",
        (DATA / "probe_monitored" / "train.log").read_text(),
    )
    assert values(loss["x"]) == [int(s) for s, _ in printed]
    assert values(loss["y"]) == pytest.approx([float(v) for _, v in printed], abs=5e-5)


def test_the_steps_page_shows_input_beside_the_phases(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "slow", "steps")
    assert not at.exception
    phases = figures(at)["Where each rank's step goes (mean ms)"]
    assert trace_names(phases)[:4] == ["input (before the forwards)", "fwd", "bwd", "step"]
    data_wait = phases["data"][0]
    assert values(data_wait["y"]) == ["rank 0", "rank 1"]
    rank0, rank1 = values(data_wait["x"])
    assert rank1 > 140 > 10 > rank0  # rank 1 waits for its loader, rank 0 does not


def test_the_health_page_names_the_input_bound_rank(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "slow", "health")
    assert not at.exception
    assert re.search(
        r"rank 1 spends \d+ ms per step outside DeepSpeed before its forward: \d+% of its step",
        texts(at),
    )


def test_the_communication_page_shows_every_collectives_bandwidth(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "monitored", "communication")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert shown["Steps with every collective measured"] == "30"
    assert shown["Wire time, p50 share of step"].endswith("%")  # the split, from them
    fig = figures(at)["Bus bandwidth of every rank's collectives, by op and message size (Gbit/s)"]
    assert trace_names(fig) == [  # not the norm's 4-byte all-reduce: in the table only
        "all_gather_into_tensor 128 KiB-256 KiB",
        "all_reduce 128 KiB-256 KiB",
    ]
    table = next(df.value for df in at.dataframe if "busbw_gbps" in df.value.columns)
    assert set(table["op"]) == {"all_reduce", "all_gather_into_tensor"} and len(table) == 3
    assert (table["calls_per_step"] == 1).all()


def test_a_log_with_nothing_per_step_says_how_to_get_steps(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "log_only", "steps")
    assert not at.exception
    text = texts(at).replace("`", "")
    assert "has nothing per step" in text
    assert "dsmon run -- deepspeed train.py ..." in text
    assert '"wall_clock_breakdown": true' in text and '"steps_per_print": 10' in text
