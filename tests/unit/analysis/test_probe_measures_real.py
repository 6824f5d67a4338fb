"""What the probe measured in real DeepSpeed jobs, against what the job itself printed.

Two real 2-rank jobs of ``tests/e2e/train_tiny.py`` (DeepSpeed 0.19.8, CPU, gloo), recorded
with ``tests/scenarios.py`` (each folder's README says how):

- ``probe_monitored``: the comms logger on (verbose) and csv_monitor, at log_level info. The
  comms logger prints every collective on rank 0 (its size, and a time that is the running
  sum of every call of that op so far: DeepSpeed's timer is never reset), and the script
  prints ``[train_tiny] step N loss L``: the probe's sizes, times, bandwidths and losses are
  checked against them;
- ``probe_slow_data``: rank 1's data loader takes 150 ms per batch: ``ranks.input_bound``
  names rank 1 (and only rank 1), and ``ranks.straggler`` names it too, as the symptom shown
  under it: the cause comes first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from locations import DATA

from dsmon.analysis import collectives, ranks, training, waiting
from dsmon.health import evaluate
from dsmon.health.gather import inputs_from_records, inputs_from_store
from dsmon.health.model import CheckResult, Status
from dsmon.health.registry import all_rules
from dsmon.health.triage import triage
from dsmon.load.files import import_paths, read_found
from dsmon.load.kinds import discover
from dsmon.model.frames import records_frame
from dsmon.model.records import MonitorPointRecord, RankStepRecord, Record
from dsmon.parse.base import Diagnostics
from dsmon.store.store import Store

MONITORED = DATA / "probe_monitored"
SLOW_DATA = DATA / "probe_slow_data"
#: ``comm op: all_reduce | time (ms): 27.30 | msg size: 129.25 KB | algbw (Gbps): ...``
COMM_OP = re.compile(
    r"comm op: (?P<op>\S+) \| time \(ms\): (?P<ms>[\d.]+) \| msg size: (?P<size>[\d.]+) "
    r"(?P<unit>[KMG]?B) \| algbw \(Gbps\): (?P<alg>[\d.]+) \| busbw \(Gbps\): (?P<bus>[\d.]+)"
)
UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}


def records(folder: Path) -> list[Record]:
    out: list[Record] = []
    for found in discover(folder):
        out.extend(read_found(found, "r", Diagnostics()))
    return out


def step_frame(folder: Path) -> pd.DataFrame:
    return records_frame("rank_step", [r for r in records(folder) if r.KIND == "rank_step"])


def logged_calls() -> pd.DataFrame:
    """The comms logger's lines of the training steps, each call's own time recovered.

    DeepSpeed's comms logger times every call of an op with one timer it never resets, so
    the time it prints is the running sum: a call's own is the difference from the last.
    """
    rows, last = [], {}
    for line in (MONITORED / "train.log").read_text().splitlines():
        m = COMM_OP.search(line)
        if m is None:
            continue
        op, cumulative = m["op"], float(m["ms"])
        own = cumulative - last.get(op, 0.0)
        last[op] = cumulative
        size = round(float(m["size"]) * UNITS[m["unit"]])
        rows.append((op, size, own, float(m["bus"])))
    calls = pd.DataFrame(rows, columns=["op", "logged_bytes", "logged_ms", "logged_busbw"])
    training_ops = calls[calls["op"].isin(["all_reduce", "all_gather_into_tensor"])]
    return training_ops.reset_index(drop=True)


def probe_calls() -> pd.DataFrame:
    """Rank 0's collectives, one row per step and op, in the order of their first call."""
    table = ranks.rank_step_table(step_frame(MONITORED), keep_collectives=True)
    rows = collectives.collective_rows(table)
    return rows[rows["rank"] == 0].sort_values("step", kind="stable")  # in call order


def test_sizes_and_times_agree_with_the_comms_logger() -> None:
    logged = logged_calls()
    mine = probe_calls()
    assert len(logged) == len(mine) == 3 * 30  # three collectives in each of 30 steps
    # The logger prints per step: the gradients' all-reduce, the norm's, the all-gather.
    by_step = logged.assign(step=[i // 3 + 1 for i in range(len(logged))])
    merged = by_step.merge(
        mine.assign(key=mine.groupby("step").cumcount()),
        left_on=["step", by_step.groupby("step").cumcount()],
        right_on=["step", "key"],
    )
    assert (merged["op_x"] == merged["op_y"]).all()
    # all-reduce: the buffer; all-gather: the logger prints one rank's input, nccl-tests
    # counts the whole gathered output (2 ranks); its KB are rounded to two decimals
    factor = merged["op_x"].map({"all_reduce": 1, "all_gather_into_tensor": 2})
    assert (merged["msg_bytes"] - merged["logged_bytes"] * factor).abs().max() <= 2 * 6
    gap = merged["logged_ms"] - merged["time_ms"]  # the logger also synchronises: a bit more
    assert gap.median() == pytest.approx(0.03, abs=0.05)
    assert gap.abs().quantile(0.9) < 0.5


def test_bus_bandwidth_is_nccl_tests_and_the_comms_loggers() -> None:
    """Where both read the same call: the logger's busbw from its own time equals ours."""
    mine = probe_calls()
    grads = mine[(mine["op"] == "all_reduce") & (mine["bucket_bytes"] == 131072)]
    per_step = grads.assign(wire_ms=grads["time_ms"], max_ms=grads["time_ms"])
    bw = collectives.bandwidth(per_step)
    # nccl-tests: algbw = bytes / time, busbw = algbw x 2 (n - 1) / n for an all-reduce
    expected_alg = 132352 * 8 / (grads["time_ms"].to_numpy() * 1e6)
    assert bw["algbw_gbps"].to_numpy() == pytest.approx(expected_alg)
    assert bw["busbw_gbps"].to_numpy() == pytest.approx(expected_alg * 2 * (2 - 1) / 2)
    assert collectives.bus_factor("all_gather_into_tensor", 8) == pytest.approx(7 / 8)
    assert collectives.bus_factor("broadcast", 8) == 1.0


def test_the_loss_is_the_one_the_script_prints() -> None:
    printed = {
        int(m[1]): float(m[2])
        for m in re.finditer(
            r"\[train_tiny\] step (\d+) loss ([\d.]+)", (MONITORED / "train.log").read_text()
        )
    }
    stats = ranks.step_stats(step_frame(MONITORED))
    assert len(printed) == len(stats) == 30
    mine = dict(zip(stats["step"].astype(int), stats["loss"], strict=True))
    assert all(mine[s] == pytest.approx(v, abs=5e-5) for s, v in printed.items())  # 4 decimals
    assert stats["grad_norm"].notna().all() and (stats["grad_norm"] > 0).all()
    curve = training.probe_series(stats, ["loss", "grad norm"])
    assert set(curve["metric"].astype(str)) == {"loss", "grad norm"}


def test_each_step_splits_into_wire_time_and_waiting() -> None:
    table = ranks.rank_step_table(step_frame(SLOW_DATA), keep_collectives=True)
    per_step = collectives.comm_steps(collectives.collective_rows(table))
    assert set(per_step["op"]) == {"all_reduce", "all_gather_into_tensor"}
    assert (per_step["wire_ms"] <= per_step["max_ms"]).all()
    stats = ranks.step_stats(step_frame(SLOW_DATA))
    # Rank 0 waits for rank 1's data in the gradients' all-reduce: far more than the wire
    waited = (stats["coll_max_ms"] - stats["coll_wire_ms"]).median()
    assert waited > 3 * stats["coll_wire_ms"].median()


def verdict(recs: list[Record], rule_id: str) -> CheckResult:
    (res,) = evaluate(
        inputs_from_records(recs, run="r"), [r for r in all_rules() if r.id == rule_id]
    ).results
    return res


def test_a_rank_slowed_in_its_data_loader_is_named_input_bound() -> None:
    recs = records(SLOW_DATA)
    found = verdict(recs, "ranks.input_bound")
    assert found.status is Status.FAIL  # 150 ms of a step of about 350 ms on this machine
    assert found.summary.startswith("rank 1 spends ") and "before its forward" in found.summary
    assert "rank 0" not in found.summary
    shares = ranks.input_shares(
        ranks.phase_buckets(ranks.rank_step_table(step_frame(SLOW_DATA)), ranks.WHOLE_RUN)
    )
    assert shares.iloc[0]["rank"] == 1 and shares.iloc[0]["input_ms"] > 140
    assert shares.iloc[1]["input_ms"] < 10  # rank 0 loads at once
    assert verdict(recs, "ranks.straggler").status in (Status.WARN, Status.FAIL)
    assert "rank 1" in verdict(recs, "ranks.straggler").summary


def test_the_slow_loader_heads_the_checklist_and_the_straggler_is_its_symptom() -> None:
    """The straggler is what rank 1's loading looks like to the others: cause first."""
    laid_out = triage(evaluate(inputs_from_records(records(SLOW_DATA), run="r"), all_rules()))
    assert laid_out.top is not None and laid_out.top.rule_id == "ranks.input_bound"
    under = [r.rule_id for r in laid_out.symptoms.get("ranks.input_bound", ())]
    assert "ranks.straggler" in under
    assert "ranks.straggler" not in [r.rule_id for r in laid_out.problems]


def test_a_balanced_run_has_no_input_bound_rank() -> None:
    assert verdict(records(MONITORED), "ranks.input_bound").status is Status.PASS


def test_the_store_gives_the_same_verdict(store: Store) -> None:
    import_paths(store, [SLOW_DATA], run="r")
    found = evaluate(
        inputs_from_store(store, "r"), [r for r in all_rules() if r.id == "ranks.input_bound"]
    ).results[0]
    assert found.summary == verdict(records(SLOW_DATA), "ranks.input_bound").summary


def test_the_csv_monitor_series_reads_as_the_learning_rate() -> None:
    points = [r for r in records(MONITORED) if isinstance(r, MonitorPointRecord)]
    # DeepSpeed 0.18.3 and later write no train_loss from the engine: only lr (and loss_scale
    # with fp16) reach csv_monitor, so the loss comes from the probe
    assert {p.tag for p in points} == {"Train/Samples/lr"} and len(points) == 30
    assert all(isinstance(r, RankStepRecord) for r in records(MONITORED) if r.KIND == "rank_step")


def test_the_wire_and_waiting_split_reads_the_collectives() -> None:
    """Where each collective was measured, the split is read from them, not from busy times."""
    stats = ranks.step_stats(step_frame(SLOW_DATA))
    per_step = waiting.comm_split(stats)
    kept = stats.set_index("step").loc[per_step["step"]]
    assert per_step["wire_ms"].to_numpy() == pytest.approx(kept["coll_wire_ms"].to_numpy())
    waited = (kept["coll_max_ms"] - kept["coll_wire_ms"]).to_numpy()
    assert per_step["wait_ms"].to_numpy() == pytest.approx(waited)
    busy_wire, _ = waiting.split_ms(
        kept["wall_ms"].to_numpy(), kept["slowest_ms"].to_numpy(), kept["fastest_ms"].to_numpy()
    )
    # the busy-time reading counts every other difference between the ranks' steps as wire
    assert float(pd.Series(busy_wire).median()) > per_step["wire_ms"].median()
