"""Every rank on a REAL DeepSpeed job: ``dsmon run`` finds a slow rank and a stopped one.

DeepSpeed from PyPI trains a small model on its CPU accelerator with two ranks (gloo), started
through ``dsmon run -- deepspeed ...`` exactly as a user would, with the store as the only
destination (``--no-dashboard``). Two cases:

- rank 1 sleeps in every forward (``--slow-rank 1``): the per-rank view and the straggler
  rule name rank 1, although every rank's step takes the same wall time;
- rank 1 is stopped with SIGSTOP mid-training: the hang rule, evaluated live on the store,
  names rank 1 and the phase it stopped in, and rank 0 waiting, within 30 s of rank 1's last
  heartbeat.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from dashboard_support import app_at
from deepspeed_support import DEADLINE_S, deepspeed_bin, end, job_env, start, wait_for
from locations import TESTS
from process_support import free_port

from dsmon.analysis import ranks
from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_store
from dsmon.health.model import CheckResult
from dsmon.health.registry import all_rules
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

TRAIN = TESTS / "e2e" / "train_tiny.py"
CONFIG = {
    "train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 4,
    "steps_per_print": 10,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": 1},
}


@pytest.fixture
def job(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Starts ``dsmon run --no-dashboard -- deepspeed train_tiny.py ...`` on demand."""
    ds_bin = deepspeed_bin()
    folder = tmp_path / "job1"
    folder.mkdir()
    (folder / "ds_config.json").write_text(json.dumps(CONFIG))
    env = job_env(ds_bin, tmp_path)
    store = tmp_path / "store.sqlite"
    started: list[subprocess.Popen[bytes]] = []

    def run(*train_args: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "cli.main", "run", "--dir", str(folder), "--no-dashboard",
               "--store", str(store), "--nvml-interval", "0", "--poll-interval", "0.2", "--",
               "deepspeed", "--num_gpus", "2", "--master_port", str(free_port()), str(TRAIN),
               "--deepspeed_config", "ds_config.json", *train_args]  # fmt: skip
        started.append(start(cmd, folder, env, tmp_path / "run.out"))
        return started[-1]

    try:
        yield {"run": run, "store": store, "folder": folder, "out": tmp_path / "run.out"}
    finally:
        for proc in started:
            end(proc)


def hang_verdict(store_path: Path) -> CheckResult:
    store = open_store(store_path)
    try:
        inputs = inputs_from_store(store, "job1", now=datetime.now())
    finally:
        store.close()
    (res,) = evaluate(inputs, [r for r in all_rules() if r.id == "ranks.hang"]).results
    return res


def frame(store_path: Path, kind: str) -> pd.DataFrame:
    store = open_store(store_path)
    try:
        return store.frames.frame("job1", kind) if store.runs() else pd.DataFrame()
    finally:
        store.close()


def test_a_slow_rank_is_named(job: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    proc = job["run"]("--steps", "12", "--slow-rank", "1", "--slow-s", "0.3")
    assert proc.wait(timeout=DEADLINE_S) == 0, job["out"].read_text()[-3000:]
    table = ranks.rank_step_table(frame(job["store"], "rank_step"))
    assert sorted(set(table["rank"])) == [0, 1]
    assert len(table) == 24
    stored = open_store(job["store"])
    try:  # the store's per-step figures, kept as the records arrived, agree with the records
        per_step = stored.ranks.step_stats("job1")
    finally:
        stored.close()
    assert per_step is not None
    from_records = ranks.step_stats(frame(job["store"], "rank_step"))
    pd.testing.assert_frame_equal(
        per_step[list(from_records.columns)], from_records, check_dtype=False
    )
    strag = ranks.stragglers(per_step)
    counts = ranks.slowest_counts(strag)
    assert counts.iloc[0]["rank"] == 1 and counts.iloc[0]["share"] >= 0.9
    # The ranks' wall times are alike (rank 0 waits for rank 1); their busy times are not.
    slow = table[table["rank"] == 1]
    assert (slow["fwd_ms"] >= 300).all()
    store = open_store(job["store"])
    try:
        inputs = inputs_from_store(store, "job1")
    finally:
        store.close()
    (res,) = evaluate(inputs, [r for r in all_rules() if r.id == "ranks.straggler"]).results
    assert res.status.value == "fail" and res.summary.startswith("rank 1 is the slowest")
    # The log is at DeepSpeed's default level (no config dump, no version line): rank 0's
    # probe read the config and the version from the engine itself.
    assert inputs.config is not None and inputs.config.origin == "engine"
    assert dict(inputs.config.raw) == CONFIG
    assert inputs.facts.ds_version is not None and inputs.facts.world_size == 2
    monkeypatch.setenv("DSMON_STORE", str(job["store"]))  # the Steps page's view names it
    at = app_at(str(job["store"]), "job1", "steps")
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["slowest rank (share of steps)"].startswith(
        "rank 1 · "
    )


def test_a_stopped_rank_is_named_with_its_phase(job: dict[str, Any]) -> None:
    proc = job["run"]("--steps", "5000", "--sleep", "0.05")
    wait_for("steps on both ranks", lambda: _steps_per_rank(job["store"]) >= 5, [proc])
    beats = frame(job["store"], "heartbeat")
    pid = int(beats[beats["rank"] == 1]["pid"].dropna().iloc[-1])
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        wait_for(
            "the hang rule to fire",
            lambda: hang_verdict(job["store"]).status.value == "fail",
            [proc],
        )
        fired_after = time.monotonic() - stopped_at
        res = hang_verdict(job["store"])
        states = ranks.rank_states(frame(job["store"], "heartbeat"), pd.Timestamp.now())
        (last1,) = [s for s in states if s.rank == 1]  # its last heartbeat before the stop
        assert res.summary.startswith("rank 1 sent no heartbeat for"), res.summary
        assert f"last seen in {last1.where()}; waiting: rank 0 in " in res.summary
        assert last1.step is not None and last1.step >= 5  # not a heartbeat from start-up
        # The probe's keepalive is 5 s and the rule's limit 15 s: well within 30 s.
        assert fired_after < 30, fired_after
        assert proc.poll() is None, "the job hangs; nothing has killed it"
    finally:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=DEADLINE_S)


def _steps_per_rank(store_path: Path) -> int:
    table = frame(store_path, "rank_step")
    if table.empty:
        return 0
    return int(table.groupby("rank")["step"].count().min()) if table["rank"].nunique() == 2 else 0
