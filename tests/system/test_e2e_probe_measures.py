"""A REAL DeepSpeed job through ``dsmon run``: loss, input-bound rank, collectives, csv_monitor.

One 2-rank job of ``tests/e2e/train_tiny.py`` on DeepSpeed's CPU accelerator (gloo), started
with ``dsmon run --no-dashboard`` as a user starts one (``tests/scenarios.py``): rank 1's data
loader takes 150 ms a batch, the comms logger prints every collective (verbose) and
csv_monitor writes its series. From the store, live collection done:

- ``ranks.input_bound`` names rank 1, and only rank 1;
- the loss of each step is the one the script printed (``[train_tiny] step N loss L``);
- every collective's size is the one the comms logger printed, its time the logger's within
  a fraction of a millisecond (the logger's printed time is a running sum: see
  tests/unit/analysis/test_probe_measures_real.py), and the store's per-step wire time is
  the least of the two ranks';
- the csv_monitor series the config writes reached the store (``dsmon run`` followed it).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import scenarios
from deepspeed_support import deepspeed_bin

from dsmon.analysis import collectives
from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_store
from dsmon.health.model import Status
from dsmon.health.registry import all_rules
from dsmon.model.records import MonitorPointRecord, RankStepRecord
from dsmon.store.store import open_store

pytestmark = pytest.mark.slow

SLOW_DATA = ("--steps", "20", "--slow-data-rank", "1", "--slow-data-s", "0.15")


def test_a_probed_job_gives_its_loss_input_and_collectives(tmp_path: Path) -> None:
    ds_bin = deepspeed_bin()
    monitored = scenarios.SCENARIOS["monitored"]
    job = scenarios.Scenario("slow_data_monitored", "both", monitored.config, SLOW_DATA)
    folder, store_path = tmp_path / "job", tmp_path / "store.sqlite"
    proc = scenarios.start(job, folder, store_path, ds_bin, run="job")
    assert scenarios.finish(job, proc, folder, 400.0) == 0
    log = (folder / "train.log").read_text()
    with open_store(store_path) as store:
        verdicts = evaluate(
            inputs_from_store(store, "job"), [r for r in all_rules() if r.id == "ranks.input_bound"]
        ).results
        (found,) = verdicts
        assert found.status in (Status.WARN, Status.FAIL)
        assert found.summary.startswith("rank 1 spends ") and "rank 0" not in found.summary

        printed = {
            int(s): float(v) for s, v in re.findall(r"\[train_tiny\] step (\d+) loss ([\d.]+)", log)
        }
        stats = store.ranks.step_stats("job")
        assert len(printed) == len(stats) == 20
        for step, loss in zip(stats["step"].astype(int), stats["loss"], strict=True):
            assert loss == pytest.approx(printed[step], abs=5e-5)

        steps = [r for r in store.records("job", "rank_step") if isinstance(r, RankStepRecord)]
        rank0 = [
            c
            for r in sorted(steps, key=lambda r: r.step or 0)
            if r.src.rank == 0
            for c in r.collectives
        ]
        logged = re.findall(
            r"comm op: (\S+) \| time \(ms\): ([\d.]+) \| msg size: ([\d.]+) (K?B)", log
        )
        cumulative: dict[str, float] = {}
        pairs = []
        for (op, ms, size, unit), mine in zip(
            [x for x in logged if x[0] in ("all_reduce", "all_gather_into_tensor")],
            rank0,
            strict=True,
        ):
            own = float(ms) - cumulative.get(op, 0.0)
            cumulative[op] = float(ms)
            assert op == mine.op
            factor = 2 if op == "all_gather_into_tensor" else 1  # nccl-tests: the whole output
            logged_bytes = float(size) * (1024 if unit == "KB" else 1) * factor
            assert mine.msg_bytes == pytest.approx(logged_bytes, abs=12)
            pairs.append(own - (mine.time_ms or 0.0))
        gaps = sorted(abs(g) for g in pairs)
        assert gaps[len(gaps) // 2] < 0.2  # the median call agrees within 0.2 ms

        comm = store.ranks.comm("job", 1)
        assert (comm["wire_ms"] <= comm["max_ms"]).all()
        assert collectives.bandwidth(comm)["busbw_gbps"].notna().any()

        lr = [r for r in store.records("job", "monitor") if isinstance(r, MonitorPointRecord)]
        assert {p.tag for p in lr} == {"Train/Samples/lr"} and len(lr) == 20
