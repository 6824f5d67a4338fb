"""The run summary of the real z2 run (tests/data/z2), with figures worked out by hand.

From the 30 global timer lines of tests/data/z2/train.log, over steps 3-30 (the two warm-up
steps left out, as every page quotes a timer): median fwd (10.95 + 10.99) / 2 = 10.97 ms, bwd
(29.69 + 30.49) / 2 = 30.09 ms, step (13.36 + 13.44) / 2 = 13.40 ms, total (fwd + bwd + step)
median 53.895 ms and p90 81.867 ms; the slowest steps are 1 (350.75 + 754.18 + 190.22 = 1295.15), 21 (84.99) and 27 (84.36). The six
throughput lines give CurrSamplesPerSec 127.55, 152.31, 141.32, 141.52, 161.05, 143.03
(median 142.28). The flops profile says ``FLOPS per GPU = ...: 28.05 GFLOPS``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from shared_fixtures import DATA, Z2

from dsmon.analysis.summary import config_highlights, render_summary, run_summary
from dsmon.health.run_state import stored_state
from dsmon.load.files import import_paths
from dsmon.model.records import HeartbeatRecord
from dsmon.store.store import Store, open_store


@pytest.fixture
def z2_store(store: Store) -> Store:
    import_paths(store, [Z2])
    return store


def test_summary_figures(z2_store: Store) -> None:
    s = run_summary(z2_store, "z2")
    assert s.info.last_step == 30
    assert s.timed_steps == 30
    assert s.median_ms["fwd_ms"] == pytest.approx(10.97)
    assert s.median_ms["bwd_ms"] == pytest.approx(30.09)
    assert s.median_ms["step_ms"] == pytest.approx(13.40)
    assert s.median_ms["total_ms"] == pytest.approx(53.895)
    assert s.p90_total_ms == pytest.approx(81.867)
    assert [step for step, _ in s.slowest] == [1, 21, 27]
    assert s.slowest[0][1] == pytest.approx(1295.15)
    assert s.samples_per_s == pytest.approx((141.52064961038087 + 143.03119933700992) / 2)
    assert s.comm_share == pytest.approx(0.2425538, abs=1e-6)  # steps 3-30: warm-up left out
    assert s.flops_per_s_per_gpu == pytest.approx(28.05e9)
    assert dict(s.config) == {
        "zero_stage": "2",
        "precision": "fp32",
        "train_batch_size": "8",
        "micro_batch_per_gpu": "4",
        "grad_accum": "1",
        "optimizer": "AdamW",
    }


def test_rendered_summary(z2_store: Store) -> None:
    text = render_summary(run_summary(z2_store, "z2", stored_state(z2_store, "z2").line()))
    lines = text.splitlines()
    assert lines[:5] == [
        "Run         z2",
        # first: the launcher's WORLD INFO DICT line; last: "Process 24468 exits successfully."
        "Time        2026-11-29T14:11:01.103 -> 2026-11-29T14:11:09.116 (8.0 s)",
        "Sources     ranks 0",
        # "DeepSpeed info: version=0.19.8, ...", "dist_world_size=2"
        "DeepSpeed   0.19.8, world size 2",
        # the run's state, as dsmon check says it
        "Outcome     finished: exit status 0 (the launcher: 2 worker(s) exited successfully)",
    ]
    assert lines[5].startswith("Records     ")
    for part in ("flops_profile 1", "throughput 6", "timer 90"):
        assert part in lines[5]
    assert "Steps       30 (with timer breakdown: 30)" in lines
    assert (
        "Step time   median fwd 11.0 ms | bwd 30.1 ms | step 13.4 ms | total 53.9 ms "
        "(p90 total 81.9 ms, steps after warm-up)"
    ) in lines
    # 350.75 + 754.18 + 190.22 is 1295.1499999999999 in binary floating point: "1295.1"
    assert "Slowest     step 1 1295.1 ms, step 21 85.0 ms, step 27 84.4 ms" in lines
    assert (
        "Comm        exposed communication 24.3% of step time on rank 0's timers (median over "
        "steps, warm-up left out; any wait for a slower rank included)" in lines
    )
    assert "Throughput  142.3 samples/s (median)" in lines
    assert "FLOPS       28.05 GFLOPS per GPU (flops profiler)" in lines
    assert (
        "Config      zero_stage=2 precision=fp32 train_batch_size=8 micro_batch_per_gpu=4 "
        "grad_accum=1 optimizer=AdamW"
    ) in lines
    assert len(lines) <= 24  # one screen


def test_unknown_run(store: Store) -> None:
    with pytest.raises(KeyError):
        run_summary(store, "nope")


def test_config_highlights_of_other_setups() -> None:
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "bf16": {"enabled": True},
        "zero_optimization": {
            "stage": 3,
            "overlap_comm": True,
            "offload_optimizer": {"device": "cpu"},
        },
    }
    assert config_highlights(cfg) == {
        "zero_stage": "3",
        "precision": "bf16",
        "micro_batch_per_gpu": "2",
        "offload_optimizer": "cpu",
        "overlap_comm": "True",
    }
    assert config_highlights({"fp16": {"enabled": True}}) == {"precision": "fp16"}


def test_outcome_of_a_crash(store: Store) -> None:
    """tests/data/events_crash_step17: both ranks raise at step 17, the launcher reports code 1."""
    (res,) = import_paths(store, [DATA / "events_crash_step17"])
    text = render_summary(run_summary(store, res.run, stored_state(store, res.run).line()))
    assert (
        "Outcome     crashed: rank 0 died first: RuntimeError: [train.py] deliberate crash at "
        "step 17 (rank 0); then rank 1 failed (RuntimeError: [train.py] deliberate crash at step "
        "17 (rank 1)); exit status 1"
    ) in text.splitlines()
    # the last global timer line is step 16's; step 17 died before engine.step()
    assert "Steps       16 (with timer breakdown: 16)" in text.splitlines()


def test_outcome_of_a_killed_job(store: Store) -> None:
    """tests/data/events_sigkill_all: the whole job was SIGKILLed; the log just stops."""
    assert outcome(store, "events_sigkill_all") == (
        "Outcome     ended: the record ends without an exit status, though DeepSpeed's launcher "
        "prints each worker's exit: the job was killed (SIGKILL, time limit, node loss) or the "
        "record is incomplete; last step 13"
    )


def test_a_summary_without_an_outcome_leaves_the_line_out(z2_store: Store) -> None:
    lines = render_summary(run_summary(z2_store, "z2")).splitlines()
    assert not [x for x in lines if x.startswith("Outcome")]


def outcome(store: Store, folder: str) -> str:
    """The Outcome line of the summary of a run folder of tests/data, imported."""
    (res,) = import_paths(store, [DATA / folder])
    return outcome_of(store, res.run)


def test_outcome_of_a_job_launched_again(store: Store) -> None:
    """Two real launches in one log: the outcome is the latest launch's."""
    assert outcome(store, "events_relaunch_after_crash") == (
        "Outcome     finished: exit status 0 (the launcher: 2 worker(s) exited successfully)"
    )
    assert outcome(store, "events_crash_after_relaunch") == (
        "Outcome     crashed: rank 0 died first: RuntimeError: [train.py] deliberate crash at "
        "step 4 (rank 0); then rank 1 failed because a peer was gone (RuntimeError: "
        "Connection closed by peer [127.0.0.1]:17811. This is typically caused by a remote "
        "worker crashing. Chec...); exit status 1"
    )


def test_outcome_of_a_torchrun_job_from_the_probe(store: Store) -> None:
    """tests/data/probe_torchrun: torchrun prints no exit lines; both probe files end on an
    ``exited`` heartbeat (it said "no exit seen" where ``dsmon check`` said the run finished)."""
    assert outcome(store, "probe_torchrun") == (
        "Outcome     finished: exit status 0 (every rank's last heartbeat (2 ranks))"
    )


def test_outcome_while_a_rank_has_not_exited(store: Store, tmp_path: Path) -> None:
    """The same run without rank 1's last heartbeat: rank 1 is still at step 80."""
    (res,) = import_paths(store, [DATA / "probe_torchrun"])
    beats = list(store.scan(res.run, "heartbeat"))
    last_of_1 = max((b for b in beats if b.src.rank == 1), key=lambda b: (b.ts, b.src.line))
    assert isinstance(last_of_1, HeartbeatRecord) and last_of_1.phase == "exited"
    with open_store(tmp_path / "cut.sqlite") as cut:
        for kind in res_kinds(store, res.run):
            cut.add([r for r in store.scan(res.run, kind) if r != last_of_1])
        assert outcome_of(cut, res.run) == (
            "Outcome     ended: the record ends without an exit status, though dsmon's probe "
            "records each rank's end: the job was killed (SIGKILL, time limit, node loss) or the "
            "record is incomplete; last step 80"
        )


def res_kinds(store: Store, run: str) -> list[str]:
    """The kinds of records a run holds."""
    return sorted(next(r for r in store.runs() if r.name == run).kinds)


def outcome_of(store: Store, run: str) -> str:
    """The Outcome line of a stored run's summary: its state, as ``dsmon import`` prints it."""
    text = render_summary(run_summary(store, run, stored_state(store, run).line()))
    return next(line for line in text.splitlines() if line.startswith("Outcome     "))
