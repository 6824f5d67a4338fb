"""The run summary of a big import reads the store in a streaming pass (issue: 500 MB logs).

The big log is the real z2 run's training section (tests/data/z2/train.log, DeepSpeed
0.19.8) repeated with its step numbers moved on each time, as a long run prints it. Memory is
the peak RSS of a child process (``resource.getrusage``), measured before and after the
summary of the big run, so the interpreter, pandas and the import itself are not counted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from shared_fixtures import DATA, Z2

from dsmon.analysis.comm import exposed_comm_share
from dsmon.analysis.steps import (
    OPTIMIZER_COLUMNS,
    PHASE_COLUMNS,
    group_breakdown,
    slowest_steps,
    step_breakdown,
    step_stats,
)
from dsmon.analysis.summary import run_summary
from dsmon.analysis.summary_scan import breakdown_of, median_of, step_breakdown_of
from dsmon.load.files import import_paths
from dsmon.model import wire
from dsmon.model.frames import records_frame
from dsmon.model.records import Record
from dsmon.parse.log import LogParser
from dsmon.store.store import Store, open_store

_STEP = re.compile(r"(step=|global_step=|micro_step=|global_steps )(\d+)")
#: Log size and the growth allowed. Loading every timer record cost ~15 MB per MB of log.
LOG_BYTES = 6_000_000
MAX_GROWTH_MIB = 40

_CHILD = """
import json, resource, sys
from dsmon.store.store import open_store
from dsmon.analysis.summary import summary_text
def peak(): return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
with open_store(sys.argv[1]) as store:
    small = summary_text(store, "z2")  # every import and cache warm
    before = peak()
    big = summary_text(store, "big")
print(json.dumps({"before": before, "after": peak(), "small": small, "big": big}))
"""


def long_log(path: Path, size: int) -> int:
    """The z2 log's start-up, then its training lines repeated until ``size`` bytes; steps run."""
    lines = (Z2 / "train.log").read_text(encoding="utf-8").splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if "time (ms) |" in ln)
    last = max(i for i, ln in enumerate(lines) if "| step:" in ln or "step=" in ln)
    head, body = lines[:first], lines[first : last + 1]
    span = max(int(m.group(2)) for ln in body for m in _STEP.finditer(ln))
    with path.open("w", encoding="utf-8") as out:
        out.writelines(head)
        k = written = 0
        while written < size:
            shift = k * span
            again = [_STEP.sub(lambda m, d=shift: f"{m[1]}{int(m[2]) + d}", ln) for ln in body]
            out.writelines(again)
            written += sum(len(ln) for ln in again)
            k += 1
    return k * span


@pytest.mark.slow
def test_summary_of_a_big_import_keeps_memory_bounded(tmp_path: Path) -> None:
    """Slow (a 6 MB import and a child process): the fast lane keeps the streaming pass's
    results on a smaller long log (test_streamed_inputs_match_the_stores_frames[big])."""
    log = tmp_path / "train.log"
    steps = long_log(log, LOG_BYTES)
    db = tmp_path / "s.sqlite"
    with open_store(db) as store:
        import_paths(store, [Z2])
        import_paths(store, [log], run="big")
    res = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db)], capture_output=True, text=True, check=True
    )
    out = json.loads(res.stdout)
    assert f"Steps       {steps} (with timer breakdown: {steps})" in out["big"].splitlines()
    assert "Throughput  142.3 samples/s (median)" in out["big"].splitlines()
    assert out["after"] - out["before"] < MAX_GROWTH_MIB, out


@pytest.mark.parametrize("run", ["z2", "z3", "grad_accum", "fp16_zero2", "big"])
def test_streamed_inputs_match_the_stores_frames(store: Store, tmp_path: Path, run: str) -> None:
    path = DATA / run if run != "big" else tmp_path / "train.log"
    if run == "big":
        long_log(path, 200_000)
    import_paths(store, [path], run=run)
    expected = step_breakdown(store.frames.frame(run, "timer"))
    streamed = step_breakdown_of(store, run)
    assert not expected.empty and expected["total_ms"].notna().all()
    pd.testing.assert_frame_equal(streamed, expected)
    assert store.timers.placed(run)
    pd.testing.assert_frame_equal(breakdown_of(store, run), expected)  # from the timer tables
    throughput = store.frames.frame(run, "throughput")["samples_per_s"].median()
    assert median_of(store, run, "throughput", "samples_per_s") == pytest.approx(throughput)
    flops = store.frames.frame(run, "flops_profile")["flops_per_s_per_gpu"].median()
    got = median_of(store, run, "flops_profile", "flops_per_s_per_gpu")
    assert got == (None if pd.isna(flops) else pytest.approx(flops))
    assert [r.step for r in store.scan(run, "step", chunk=7)] == [
        r.step for r in store.records(run, "step")
    ]


def test_bodies_scan_gives_each_stored_record_once_in_order(store: Store) -> None:
    """The summary's timer pass reads the stored JSON: every timer, in id order, no other kind."""
    import_paths(store, [DATA / "grad_accum"], run="ga")
    bodies = list(store.scan_bodies("ga", "timer", chunk=7))  # many queries: pages joined
    assert len(bodies) > 20
    assert [wire.decode(b.decode("utf-8")) for b in bodies] == store.records("ga", "timer")
    assert sum(b'"group":"micro"' in b for b in bodies) > len(bodies) // 2
    with pytest.raises(ValueError, match="gpu"):
        next(store.scan_bodies("ga", "gpu"))


@pytest.mark.parametrize("run", ["z2", "grad_accum", "big"])
def test_summary_reads_no_frame_and_gives_the_whole_frames_figures(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: str
) -> None:
    """The summary's timer figures come from its own pass, never a frame of a kind, and are
    the figures of the whole timer frame (as the dashboard and the checklist read them)."""
    path = DATA / run if run != "big" else tmp_path / "train.log"
    if run == "big":
        long_log(path, 200_000)
    import_paths(store, [path], run=run)
    whole = step_breakdown(store.frames.frame(run, "timer"))
    stats, share = step_stats(whole), exposed_comm_share(whole)

    def refused(*_: object, **__: object) -> None:
        raise AssertionError("the summary read a whole frame")

    monkeypatch.setattr(store.frames, "frame", refused)
    monkeypatch.setattr(store.frames, "pages", refused)
    s = run_summary(store, run)
    assert s.timed_steps == whole["step"].nunique() > 10
    assert s.median_ms == {c: stats.loc[c, "p50"] for c in stats.index if stats.loc[c, "n"]}
    assert s.p90_total_ms == stats.loc["total_ms", "p90"]
    slow = slowest_steps(whole, 3)
    assert s.slowest == tuple(zip(slow["step"], slow["total_ms"], strict=True))
    assert share is not None and s.comm_share == share.p50


def test_summary_reads_the_timer_tables_when_they_place_every_timer(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose every global timer has a step: the breakdown comes from ``Store.timers``,
    no timer record is read; one the tables cannot place yet (a live collector's timers
    before the log named their step) is read from its records, with the same result."""
    import_paths(store, [DATA / "z2"], run="z2")
    lines = (DATA / "z2" / "train.log").read_text(encoding="utf-8").splitlines()
    start = next(i for i, ln in enumerate(lines) if "[train.py] step 12 " in ln)
    tail = lines[start:]
    anchor = next(i for i, ln in enumerate(tail) if "step=15," in ln)
    parser = LogParser("late", "train.log", live=True)
    store.add([rec for raw in tail[:anchor] for rec in parser.feed(raw)])
    assert store.timers.placed("z2") and not store.timers.placed("late")
    want = {run: step_breakdown(store.frames.frame(run, "timer")) for run in ("z2", "late")}
    scan_bodies = store.scan_bodies

    def bodies(run: str, kind: str, chunk: int = 5000) -> object:
        assert (run, kind) != ("z2", "timer"), "the summary read the timer records"
        return scan_bodies(run, kind, chunk)

    monkeypatch.setattr(store, "scan_bodies", bodies)
    pd.testing.assert_frame_equal(breakdown_of(store, "z2"), want["z2"])
    pd.testing.assert_frame_equal(breakdown_of(store, "late"), want["late"])
    assert run_summary(store, "z2").timed_steps == want["z2"]["step"].nunique() > 10


def _tiled(breakdown: pd.DataFrame, columns: list[str], times: int) -> pd.DataFrame:
    """``breakdown``'s columns repeated ``times`` times, each time with the steps moved on,
    typed as the summary's pass gives a timer group (Int64 keys, float64 timers)."""
    span = int(breakdown["step"].max())
    out: dict[str, object] = {}
    for col in columns:
        values = np.tile(breakdown[col].to_numpy(dtype="float64", na_value=np.nan), times)
        if col == "step":
            values += np.repeat(np.arange(times) * float(span), len(breakdown))
        keys = col in ("step", "rank")
        out[col] = pd.array(values, dtype="float64").astype("Int64") if keys else values
    return pd.DataFrame(out)


def test_breakdown_and_its_figures_hold_little_beside_it(z2_log_records: list[Record]) -> None:
    """What the summary's pass holds beside its breakdown, counted by tracemalloc (numpy's
    arrays are counted): a 500 MB import's summary peaked at 217 MiB over the rest of the
    import, three breakdowns, when each step copied its columns whole.

    The real z2 run's global and optimizer timer rows, repeated to 60,000 steps. Building the
    breakdown shares the rows' columns (before: 1.9 times the breakdown at peak); its
    figures (medians, slowest steps, communication share) take less than half of it more (0.8).
    """
    one = step_breakdown(records_frame("timer", [r for r in z2_log_records if r.KIND == "timer"]))
    global_rows = _tiled(one, ["step", "rank", *PHASE_COLUMNS], 2000)
    opt_rows = _tiled(one, ["step", "rank", *OPTIMIZER_COLUMNS], 2000)
    tracemalloc.start()
    try:
        breakdown = group_breakdown(global_rows, opt_rows)
        size = breakdown.memory_usage(deep=True).sum()
        assert tracemalloc.get_traced_memory()[1] < 0.75 * size
        del global_rows, opt_rows
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        step_stats(breakdown), slowest_steps(breakdown, 3), exposed_comm_share(breakdown)
        assert tracemalloc.get_traced_memory()[1] - before < 0.6 * size
    finally:
        tracemalloc.stop()
    assert len(breakdown) == 60_000 and breakdown["total_ms"].notna().all()
