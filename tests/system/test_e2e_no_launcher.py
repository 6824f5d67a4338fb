"""A REAL DeepSpeed job started without DeepSpeed's launcher is numbered, live and after import.

Issue 41, case 6: a job run as ``python train.py`` (or ``srun python ...``) with
``wall_clock_breakdown`` at DeepSpeed's default log level prints no launcher line and no
``step=`` line: every timer was stored without a step number, and the Steps page said
"0 timed steps" and drew nothing, live and after ``dsmon import``. Here DeepSpeed (its CPU
accelerator, one rank, the rendezvous from the environment) trains ``tests/e2e/train_tiny.py``
into ``train.log`` while ``dsmon collect`` follows it into ``dsmon serve``, as real processes.
Live, the steps are numbered once more than ``WEAK_START_STEPS`` went by; after the job and
the collector's stop, the store holds every step, 1 to the last, as ``dsmon import`` does.

DeepSpeed lives in its own virtualenv (``$DSMON_DEEPSPEED_BIN``, see ``deepspeed_support``).
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from collect_support import Cluster
from deepspeed_support import deepspeed_bin, end, start, wait_for
from locations import TESTS

from dsmon.analysis.steps import step_breakdown, timed_steps
from dsmon.load.files import import_paths
from dsmon.parse.base import WEAK_START_STEPS
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

TRAIN = TESTS / "e2e" / "train_tiny.py"
STEPS = 24
CONFIG = {
    "train_batch_size": 4,
    "train_micro_batch_size_per_gpu": 4,
    "steps_per_print": 10,
    "wall_clock_breakdown": True,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001}},
    "zero_optimization": {"stage": 1},
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    yield c
    c.stop_all()


def timed(store_path: Path, run: str) -> int:
    """What the Steps page counts as "timed steps" for the run."""
    with open_store(store_path) as store:
        if not store.runs():
            return 0
        return timed_steps(step_breakdown(store.frames.frame(run, "timer")))


def test_python_train_py_without_launcher_gets_its_steps(cluster: Cluster) -> None:
    ds_bin = deepspeed_bin()
    run = cluster.tmp / "job"
    run.mkdir()
    (run / "ds_config.json").write_text(json.dumps(CONFIG))
    log = run / "train.log"
    log.write_bytes(b"")
    cluster.start_server()
    collector = cluster.collector(log, "n1")
    env = {
        **os.environ, "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(cluster.port + 1),
    }  # fmt: skip
    args = [
        str(ds_bin / "python"), "-u", str(TRAIN), "--deepspeed_config", "ds_config.json",
        "--steps", str(STEPS), "--sleep", "0.5",
    ]  # fmt: skip
    job = start(args, run, env, log)  # python train.py > train.log 2>&1
    try:
        # Live: numbered once more than WEAK_START_STEPS steps went by naming none.
        wait_for(
            "live step numbers",
            lambda: timed(cluster.store, "z2") > WEAK_START_STEPS,
            [collector, job],
        )
        assert job.poll() is None, "the job ended before the live look"
        wait_for("the job's end", lambda: job.poll() is not None, [collector])
    finally:
        end(job)
    assert job.returncode == 0, log.read_text()[-2000:]
    wait_for("every step", lambda: timed(cluster.store, "z2") == STEPS, [collector])
    collector.send_signal(signal.SIGTERM)
    assert collector.wait(timeout=60) == 0
    with open_store(cluster.tmp / "imported.sqlite") as store:
        import_paths(store, [log], run="z2")
    assert timed(cluster.tmp / "imported.sqlite", "z2") == STEPS
    with open_store(cluster.store) as live, open_store(cluster.tmp / "imported.sqlite") as imp:
        steps = [
            sorted((r.src.line, r.step) for r in s.records("z2") if r.KIND == "timer")
            for s in (live, imp)
        ]
    assert steps[0] == steps[1]
    assert {s for _, s in steps[0]} == set(range(1, STEPS + 1))
