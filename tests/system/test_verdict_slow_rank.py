"""A REAL job with one slowed rank, live through ``dsmon run``: what is wrong, said first.

``tests/scenarios.py``'s ``slow_rank`` (2 ranks on DeepSpeed's CPU accelerator, rank 1 sleeps
200 ms in every forward, engine timers on) is started exactly as a user starts a job. While it
trains, the dashboard's Health page (AppTest, live) must lead with the straggler, and the
communication rule must judge the wire time, not rank 0's waiting; once it ended, ``dsmon check
--store`` must say the same (post-mortem equals live). The recorded copy of such a run is
tests/data/verdict_slow_rank (tests/unit/health/test_verdicts.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import scenarios
from dashboard_support import app_at
from deepspeed_support import DEADLINE_S, deepspeed_bin, end, wait_for

from cli.main import main
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow
RUN = "slow"


@pytest.fixture
def job(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    ds_bin = deepspeed_bin()
    store = tmp_path / "store.sqlite"
    scenario = scenarios.SCENARIOS["slow_rank"]
    proc = scenarios.start(scenario, tmp_path / RUN, store, ds_bin, run=RUN, home=tmp_path)
    try:
        yield proc, store
    finally:
        end(proc)


def _steps_on_both_ranks(store: Path) -> int:
    if not store.exists():
        return 0
    with open_store(store) as s:
        if not any(r.name == RUN for r in s.runs()):
            return 0
        stats = s.ranks.step_stats(RUN)
    return 0 if stats.empty else int((stats["ranks"] >= 2).sum())


def test_live_and_post_mortem_lead_with_the_straggler(
    job: tuple[subprocess.Popen[bytes], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    proc, store = job
    wait_for("15 steps on both ranks", lambda: _steps_on_both_ranks(store) >= 15, [proc])
    monkeypatch.setenv("DSMON_STORE", str(store))
    at = app_at(str(store), RUN, "health")
    assert not at.exception
    assert proc.poll() is None, "the job still trains: the page was read live"
    head = at.warning[0].value if at.warning else at.error[0].value
    live = (head.splitlines()[0], [e.label for e in at.expander[:3]])
    assert "`ranks.straggler` rank 1 is the slowest in" in head.splitlines()[0]
    assert "communication is" not in head.splitlines()[0]
    assert proc.wait(timeout=DEADLINE_S) == 0
    capsys.readouterr()
    code = main(["check", "--store", str(store), "--run", RUN, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code in (1, 2)
    assert doc["headline"]["id"] == "ranks.straggler"
    assert doc["headline"]["summary"].startswith("rank 1 is the slowest in")
    by_id = {r["id"]: r for r in doc["results"]}
    share = by_id["comm.share"]
    assert share["summary"].startswith("the wire time of collectives is "), share["summary"]
    assert share["status"] == "pass"
    problems = [r["id"] for r in doc["results"] if r["status"] in ("warn", "fail")]
    with capsys.disabled():  # what the report quotes: live, then post-mortem
        print("\nlive headline:", live[0], "\nlive top findings:", live[1])
        print("post-mortem headline:", doc["headline"]["id"], doc["headline"]["summary"])
        print("post-mortem problems:", problems)
