"""The Steps page's per-rank view on a real probed DeepSpeed job (tests/data/probe_straggler).

Rank 1 of that job sleeps 0.2 s in every forward (see its README.md): the view must name it
as the slowest rank, draw one busy-time line per rank, and show where each rank ended.
A run without the probe says how to get the view.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dashboard_support import DATA, app_at, figures, shared_store, texts, trace_names, values

from dsmon.load.files import import_paths
from dsmon.store.store import open_store


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = Path(tmp_path_factory.mktemp("ranks")) / "store.sqlite"
    with open_store(path) as store:
        import_paths(store, [DATA / "probe_straggler"], run="strag")
    return str(path)


def test_the_slow_rank_is_named(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "strag", "steps")
    assert not at.exception
    shown = {m.label: m.value for m in at.metric}
    assert shown["ranks"] == "2"
    assert shown["slowest rank (share of steps)"] == "rank 1 · 100%"
    assert float(shown["straggler score p50"]) > 1.3
    figs = figures(at)
    busy = figs["Busy time per rank (step time minus waiting in collectives, ms)"]
    assert trace_names(busy) == ["rank 0", "rank 1"]
    assert values(busy["data"][0]["x"]) == list(range(1, 21))
    score = figs["Straggler score per step (slowest rank's busy time / the median rank's)"]
    assert set(values(score["data"][0]["customdata"])) == {1}
    where = at.dataframe[-1].value
    assert list(where["rank"]) == [0, 1]
    assert set(where["where"]) == {"exited after step 20"}


def test_a_run_without_the_probe_says_how_to_get_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    url = shared_store()
    monkeypatch.setenv("DSMON_STORE", url)
    at = app_at(url, "z2", "steps")
    assert not at.exception
    assert "start the job with dsmon run -- deepspeed train.py ..." in texts(at).replace("`", "")


def test_the_status_line_names_the_last_step_run(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 steps ran: the ranks' last heartbeats name step 21, which never began."""
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "strag", "steps")
    assert " · last step 20 · " in texts(at)
    assert "finished: exit status 0 (the launcher: 2 worker(s) exited successfully)" in texts(at)


def test_the_finished_run_checklist_says_how_the_ranks_ended(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not "only judged live": the ranks' last heartbeats say they exited normally."""
    monkeypatch.setenv("DSMON_STORE", store_url)
    at = app_at(store_url, "strag", "health")
    assert not at.exception
    assert "all 2 ranks exited normally" in texts(at)
    assert not [e.label for e in at.expander if "`ranks.hang`" in e.label]  # among the passes


def test_a_probe_that_timed_no_step_is_not_told_to_start_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real pipeline job under ``dsmon run``: heartbeats from both ranks, no step times."""
    url = str(tmp_path / "pipe.sqlite")
    with open_store(url) as store:
        import_paths(store, [DATA / "probe_pipeline"], run="pipe")
    monkeypatch.setenv("DSMON_STORE", url)
    at = app_at(url, "pipe", "steps")
    assert not at.exception
    text = texts(at)
    assert "dsmon's probe sends heartbeats from 2 rank(s) but no step times yet" in text
    assert "start the job with" not in text
    (where,) = at.dataframe
    assert list(where.value["where"]) == ["exited", "exited"]
