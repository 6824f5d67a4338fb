"""Step assignment (StepClock + LogParser) on real corpus logs, against their ground truth.

The corpus script prints ``[train.py] step N ... global_steps N`` right after optimizer step N,
so a record read between the ground-truth lines of steps N-1 and N belongs to step N. Every
expected number below was read from the log files in tests/data (see their README.md).
"""

from __future__ import annotations

import bisect
import re
from datetime import datetime

import pytest
from locations import DATA

from collectors.job import run_end_line, run_start_line
from dsmon.load.files import read_found
from dsmon.load.kinds import discover
from dsmon.model.records import (
    EventRecord,
    FlopsProfileRecord,
    LossScaleRecord,
    MemoryRecord,
    Record,
    StepRecord,
    ThroughputRecord,
    TimerRecord,
)
from dsmon.model.schema import MAX_STEP
from dsmon.parse.base import OUT_OF_RANGE, WEAK_START_STEPS, Diagnostics, StepClock
from dsmon.parse.log import LogParser

TRUTH = re.compile(r"\[train\.py\] step (\d+) .*global_steps (\d+)")


def read(run: str) -> list[str]:
    return (DATA / run / "train.log").read_text(encoding="utf-8").splitlines()


def parse(lines: list[str]) -> tuple[list[Record], LogParser]:
    parser = LogParser("r", "train.log")
    return list(parser.feed_lines(lines)), parser


def truth(lines: list[str]) -> list[tuple[int, int]]:
    """(1-based line number, step) of each ground-truth line."""
    return [(i + 1, int(m.group(2))) for i, ln in enumerate(lines) if (m := TRUTH.search(ln))]


def expected(gt: list[tuple[int, int]], line: int) -> int | None:
    k = bisect.bisect_left([n for n, _ in gt], line)
    return gt[k][1] if k < len(gt) else None


def timers(recs: list[Record], group: str) -> list[TimerRecord]:
    return [r for r in recs if isinstance(r, TimerRecord) and r.group == group]


@pytest.mark.parametrize(
    "run",
    [
        "z2", "z3", "grad_accum", "fp16_zero2", "fp16_zero3", "act_ckpt", "memory_breakdown",
        "probe_torchrun",  # default log level, torchrun: its start warning marks the start
    ],
)  # fmt: skip
def test_every_record_is_in_the_step_its_line_was_printed_in(run: str) -> None:
    lines = read(run)
    gt = truth(lines)
    recs, parser = parse(lines)
    checked = 0
    for rec in recs:
        if isinstance(rec, StepRecord) and rec.step == 0:
            continue  # the init-time report, before step 1
        if rec.KIND in ("event", "config"):
            continue
        assert rec.step == expected(gt, rec.src.line or 0), (rec.KIND, rec.src.line)
        checked += 1
    assert checked > 40
    assert [r.step for r in timers(recs, "global")] == [s for _, s in gt]
    assert parser.ctx.clock.rebased == 0


def test_z2_global_line_after_step_10_is_step_10() -> None:
    lines = read("z2")
    recs, _ = parse(lines)
    anchor = lines.index(
        "[2026-11-29 14:11:06,716] [INFO] [logging.py:123:log_dist] [Rank 0] step=10, skipped=0,"
        " lr=[0.0001], mom=[(0.9, 0.999)]"
    )
    after = [r for r in timers(recs, "global") if (r.src.line or 0) > anchor + 1]
    assert after[0].src.line == 274
    assert after[0].step == 10
    assert after[0].values_ms == {
        "fwd": 11.64,
        "bwd": 28.62,
        "bwd_inner": 22.97,
        "bwd_allreduce": 5.63,
        "step": 13.10,
    }
    assert [r.step for r in recs if isinstance(r, StepRecord)] == [0, 5, 10, 15, 20, 25, 30]


def test_grad_accum_micro_lines_before_the_boundary_belong_to_its_step() -> None:
    recs, _ = parse(read("grad_accum"))
    step3 = [r for r in recs if isinstance(r, TimerRecord) and r.step == 3]
    assert [(r.src.line, r.group, r.micro_step) for r in step3] == [
        (196, "micro", 0),
        (197, "micro", 1),
        (198, "micro", 2),
        (199, "zero_optimizer", None),
        (200, "micro", 3),
        (201, "global", None),
    ]
    assert [r.values_ms["fwd_microstep"] for r in step3 if r.group == "micro"] == [
        8.70,
        6.60,
        5.93,
        6.66,
    ]
    assert step3[-1].values_ms["fwd"] == 27.90
    assert len(timers(recs, "global")) == 15


def test_fp16_skipped_steps_keep_the_count_without_optimizer_lines() -> None:
    recs, _ = parse(read("fp16_zero2"))
    assert [r.step for r in timers(recs, "global")] == list(range(1, 26))
    zero = {r.step for r in timers(recs, "zero_optimizer")}
    assert zero == set(range(1, 26)) - {8, 9, 10, 18}
    scale = [r for r in recs if isinstance(r, LossScaleRecord)]
    assert [(r.step, r.event) for r in scale] == [
        (8, "hysteresis"),
        (9, "overflow"),
        (10, "overflow"),
        (18, "overflow"),
    ]
    assert [(r.step, r.skipped) for r in recs if isinstance(r, StepRecord)] == [
        (0, 0),
        (5, 0),
        (10, 3),
        (15, 3),
        (20, 4),
        (25, 4),
    ]


def test_fp16_zero3_overflow_steps() -> None:
    recs, _ = parse(read("fp16_zero3"))
    assert [(r.step, r.attempted_scale) for r in recs if isinstance(r, LossScaleRecord)] == [
        (7, 65536.0),
        (13, 32768.0),
    ]
    assert {r.step for r in timers(recs, "zero3_optimizer")} == set(range(1, 21)) - {7, 13}


def test_unfused_fp16_messages_of_rank_1_printed_late_keep_their_iteration() -> None:
    # fp16_zero0 lines 259-260: rank 1's "Grad overflow on iteration: 20" comes after rank 0
    # printed the global timer line of step 21; iteration 20 is step 21 all the same.
    recs, _ = parse(read("fp16_zero0"))
    scale = {r.src.line: r for r in recs if isinstance(r, LossScaleRecord)}
    assert [(scale[n].step, scale[n].event) for n in (245, 246, 248, 249)] == [
        (20, "overflow"),
        (20, "scale_down"),
        (20, "overflow"),
        (20, "scale_down"),
    ]
    assert [(scale[n].step, scale[n].iteration) for n in (254, 259)] == [(21, 20), (21, 20)]
    assert scale[260].step == 21
    assert [scale[n].step for n in (188, 190, 209, 211, 230, 232, 279, 281)] == [
        6,
        6,
        11,
        11,
        16,
        16,
        27,
        27,
    ]


def test_flops_profile_blocks_belong_to_the_step_that_prints_them() -> None:
    recs, _ = parse(read("z2"))
    prof = [r for r in recs if isinstance(r, FlopsProfileRecord)]
    assert [(r.step, r.profile_step) for r in prof] == [(6, 6)]
    recs, _ = parse(read("grad_accum"))
    prof = [r for r in recs if isinstance(r, FlopsProfileRecord)]
    assert [(r.step, r.profile_step) for r in prof] == [(6, 5), (6, 5), (6, 5), (6, 6)]


def test_engine_after_step_memory_block_belongs_to_the_step_it_follows() -> None:
    recs, _ = parse(read("memory_breakdown"))
    mem = [r for r in recs if isinstance(r, MemoryRecord)]
    after = [(r.src.line, r.step) for r in mem if r.label == "Engine after step"]
    assert after[:2] == [(201, 1), (223, 2)]
    assert [s for _, s in after] == list(range(1, 9))
    before = [r.step for r in mem if r.label == "Engine before forward"]
    assert before == list(range(1, 9))
    assert [r.step for r in mem[:2]] == [1, 1]  # init blocks: the run starts, step 1 is next


def test_default_log_level_counts_from_the_launcher_lines() -> None:
    lines = read("z0_default_loglevel")
    recs, _ = parse(lines)
    assert not [r for r in recs if isinstance(r, StepRecord)]
    assert [r.step for r in timers(recs, "global")] == list(range(1, 21))
    third = timers(recs, "global")[2]
    assert third.values_ms["fwd"] == 30.47 and third.step == 3
    assert [r.step for r in recs if isinstance(r, FlopsProfileRecord)] == [6]


def test_second_launch_into_one_log_counts_from_1_again() -> None:
    """A job started again with ``>>`` into its log, at the default log level: no ``step=``
    line says the count restarted; the launcher's start-up lines do."""
    lines = read("relaunch_default_loglevel")
    second = [i + 1 for i, ln in enumerate(lines) if "[runner.py:618:main] cmd = " in ln][1]
    recs, parser = parse(lines)
    assert [r.step for r in timers(recs, "global")] == [*range(1, 7), *range(1, 13)]
    gt = truth(lines)
    for lo, launch in (
        (1, [t for t in gt if t[0] < second]),
        (second, [t for t in gt if t[0] > second]),
    ):
        checked = [
            r for r in recs
            if lo <= (r.src.line or 0) <= launch[-1][0] and r.KIND not in ("event", "config")
        ]  # fmt: skip
        for rec in checked:
            assert rec.step == expected(launch, rec.src.line or 0), (rec.KIND, rec.src.line)
        assert len(checked) > 10
    assert [r.step for r in recs if isinstance(r, FlopsProfileRecord)] == [6, 6]
    assert parser.ctx.clock.rebased == 0 and not parser.diag.unparsed


def test_launcher_killing_a_failed_job_starts_no_new_count() -> None:
    """The launcher's ``sigkill_handler`` lines (one names the failed command) come as a job
    dies, maybe before another node's last timer line: they must not restart the count."""
    lines = read("relaunch_default_loglevel")
    second = [i + 1 for i, ln in enumerate(lines) if "[runner.py:618:main] cmd = " in ln][1]
    killed = [i + 1 for i, ln in enumerate(lines) if "sigkill_handler" in ln]
    assert killed and max(killed) < second
    parser = LogParser("r", "train.log")
    list(parser.feed_lines(lines[: second - 1]))
    assert parser.ctx.clock.current() == 7  # step 7 was in progress when rank 1 failed
    list(parser.feed_lines(lines[second - 1 : second]))
    assert parser.ctx.clock.current() == 1


def test_dsmon_run_start_line_marks_the_start() -> None:
    """torchrun at the default log level, its start warning gone (OMP_NUM_THREADS set): only
    the line ``dsmon run`` writes first says where the output begins."""
    lines = [ln for ln in read("probe_torchrun") if "torch/distributed/run.py" not in ln]
    recs, _ = parse(lines)
    assert {r.step for r in recs if isinstance(r, TimerRecord)} == {None}  # blind
    head = run_start_line(["torchrun", "train.py"], datetime(2026, 12, 4, 19, 54, 53, 5000))
    assert head == (
        "[2026-12-04 19:54:53,005] [INFO] [dsmon:0:run] dsmon run starts the job: torchrun train.py"
    )
    recs, parser = parse([head, *lines])
    assert [r.step for r in timers(recs, "global")] == list(range(1, 81))
    gt = truth(lines)
    for rec in recs:
        assert rec.step == expected(gt, (rec.src.line or 0) - 1)  # one line more in front
    assert not parser.diag.unparsed


def test_dsmon_run_end_line_is_an_event_and_starts_nothing() -> None:
    """The status ``dsmon run`` writes after the job's output ends the run (``job_end``); it
    is neither a start nor a relaunch, so the steps before it keep their numbers."""
    lines = read("probe_torchrun")
    at = datetime(2026, 12, 4, 19, 58, 1, 250000)
    tail = run_end_line(-9, at)
    assert tail == (
        "[2026-12-04 19:58:01,250] [INFO] [dsmon:0:run] dsmon run: the job ended with status -9"
    )
    before, _ = parse(lines)
    recs, parser = parse([*lines, tail])
    assert [r.step for r in timers(recs, "global")] == [r.step for r in timers(before, "global")]
    (end,) = [r for r in recs if isinstance(r, EventRecord) and r.name == "job_end"]
    assert end.detail == {"return_code": -9} and end.ts == "2026-12-04T19:58:01.250"
    assert not parser.diag.unparsed


def test_torchrun_log_dir_files_start_with_their_worker() -> None:
    """A worker's stdout.log from ``torchrun --log-dir``, at the default log level: nothing in
    it marks the start; its path does, and its timer lines get their steps."""
    (path,) = (DATA / "torchrun_log_dir").glob("*/attempt_0/0/stdout.log")
    lines = path.read_text(encoding="utf-8").splitlines()
    recs, _ = parse(lines)  # the same lines, from a file of no known layout
    assert {r.step for r in recs if isinstance(r, TimerRecord)} == {None}
    found = [f for f in discover(DATA / "torchrun_log_dir") if f.path == path]
    assert [f.label for f in found] == [path.relative_to(DATA / "torchrun_log_dir").as_posix()]
    recs = list(read_found(found[0], "tr", Diagnostics()))
    assert [r.step for r in timers(recs, "global")] == list(range(1, 31))
    gt = truth(lines)
    for rec in recs:
        assert rec.step == expected(gt, rec.src.line or 0)


def test_log_cut_mid_run_is_held_until_the_first_anchor() -> None:
    lines = read("z2")
    start = lines.index(
        "[train.py] step 12 loss 6.4282 lr 1.000e-04 step_time 0.054s global_steps 12 "
        "skipped_steps 0"
    )
    tail = lines[start:]
    anchor = tail.index(lines[292])  # line 293: step=15, the first anchor of the tail
    parser = LogParser("r", "train.log")
    early: list[Record] = []
    for raw in tail[:anchor]:
        early.extend(parser.feed(raw))
    assert not [r for r in early if isinstance(r, TimerRecord)]  # held: no number yet
    recs = early + list(parser.feed_lines(tail[anchor:]))
    gt = truth(tail)
    globals_ = timers(recs, "global")
    assert [r.step for r in globals_] == list(range(13, 31))
    for rec in recs:
        if rec.KIND in ("timer", "throughput", "step"):
            assert rec.step == expected(gt, rec.src.line or 0)
    # the first micro line comes before any boundary of the tail: its index is unknown
    assert [r.micro_step for r in timers(recs, "micro")[:3]] == [None, 0, 0]


def test_grad_accum_cut_mid_window() -> None:
    lines = read("grad_accum")
    tail = lines[440:]  # from line 441: the 2nd micro line of step 9
    recs, _ = parse(tail)
    micro = timers(recs, "micro")
    assert [(r.step, r.micro_step) for r in micro[:4]] == [(9, None), (9, None), (9, None), (10, 0)]
    assert [r.step for r in timers(recs, "global")] == list(range(9, 16))


def test_cut_log_without_any_anchor_leaves_steps_unknown() -> None:
    lines = read("z0_default_loglevel")
    tail = lines[60:]  # from line 61, after the launcher lines: no start, no anchor
    recs, parser = parse(tail)
    assert timers(recs, "global")
    assert {r.step for r in recs if isinstance(r, TimerRecord)} == {None}
    assert parser.ctx.clock.counting and parser.ctx.clock.base is None


def test_log_without_timer_lines_is_blind_between_anchors() -> None:
    recs, parser = parse(read("warmup_lr"))
    assert parser.ctx.clock.blind
    tput = [(r.step, r.global_step) for r in recs if isinstance(r, ThroughputRecord)]
    assert tput[:3] == [(4, 4), (6, 6), (8, 8)]
    recs, parser = parse(read("comms_logger_verbose"))
    ops = [r for r in recs if r.KIND == "comm_op"]
    assert len(ops) == 80 and {r.step for r in ops} == {None}


def test_old_log_anchored_by_throughput_global_step() -> None:
    # DeepSpeed 0.9 (issue #3742 excerpt): the throughput line names global_step=34 before
    # the legacy timer lines of the same step.
    text = (DATA / "timers_old_versions" / "issue3742_v09.log").read_text(encoding="utf-8")
    recs, _ = parse(text.splitlines())
    assert [(r.src.line, r.step) for r in recs if isinstance(r, TimerRecord)][:2] == [
        (2, 34),
        (3, 34),
    ]
    assert [r.step for r in recs if isinstance(r, StepRecord)] == [35]


def test_clock_weak_anchor_yields_to_step_lines() -> None:
    # A resumed run: step=N counts from the checkpoint, the ThroughputTimer from 0.
    clock = StepClock()
    clock.anchor(1005)
    clock.anchor(5, weak=True)
    assert clock.base == 1005
    clock.end_step()
    assert clock.current() == 1006
    clock.anchor(1010)
    assert clock.rebased == 1 and clock.current() == 1010


# --- issue 41: a log read from its start, and counts that would give no DeepSpeed step ---------

TINY_TRUTH = re.compile(r"^\[train_tiny\] step (\d+) loss")


def tiny_truth(lines: list[str]) -> list[tuple[int, int]]:
    """(1-based line number, step) of each ``[train_tiny] step N`` line (printed after step N)."""
    return [(i + 1, int(m.group(1))) for i, ln in enumerate(lines) if (m := TINY_TRUTH.match(ln))]


def test_python_without_launcher_at_default_level_counts_from_the_file_start() -> None:
    """``python train.py`` at the default log level: no launcher line, no ``step=`` line. Read
    as a file from its first byte (``dsmon import``), its steps count from 1; every record
    read between the truth lines of steps N-1 and N is step N."""
    folder = DATA / "python_default_loglevel"
    lines = (folder / "train.log").read_text(encoding="utf-8").splitlines()
    (found,) = [f for f in discover(folder) if f.kind == "log"]
    recs = list(read_found(found, "py", Diagnostics()))
    assert [r.step for r in timers(recs, "global")] == list(range(1, 15))
    gt = tiny_truth(lines)
    stepped = [r for r in recs if isinstance(r, TimerRecord)]
    assert len(stepped) == 3 * 14
    for rec in stepped:
        assert rec.step == expected(gt, rec.src.line or 0), rec.src.line
    # The same lines without their position in a file (a pasted excerpt): nothing says where
    # the job started, so nothing is numbered.
    assert {r.step for r in parse(lines)[0] if isinstance(r, TimerRecord)} == {None}


def feed_file(parser: LogParser, lines: list[str]) -> list[Record]:
    """Feed lines with their byte offsets, as the collector and ``dsmon import`` do."""
    out: list[Record] = []
    offset = 0
    for n, ln in enumerate(lines, start=1):
        out += parser.feed(ln, offset=offset, line=n)
        offset += len(ln.encode()) + 1
    return out


def test_python_without_launcher_is_numbered_live_as_after_import() -> None:
    """Live, records are sent at once without a step, then again with it (the store fills
    the step in) once more than ``WEAK_START_STEPS`` steps went by naming none: in the end the
    store holds the numbers ``dsmon import`` gives, and the collector's stop settles the rest."""
    lines = (DATA / "python_default_loglevel" / "train.log").read_text().splitlines()
    cut = [i for i, ln in enumerate(lines) if "| fwd: " in ln][WEAK_START_STEPS] + 1
    live = LogParser("py", "train.log", live=True)
    sent = feed_file(live, lines[:cut])
    last = {(r.src.line, r.src.sub, r.KIND): r.step for r in sent}
    assert sorted(s for s in last.values() if s is not None) == [
        s for s in range(1, WEAK_START_STEPS + 2) for _ in range(3)
    ]
    offline = LogParser("py", "train.log")
    imported = feed_file(offline, lines) + offline.finish()
    sent += feed_file_from(live, lines, cut) + live.finish()
    stored = {(r.src.line, r.src.sub, r.KIND): r.step for r in sent}
    assert stored == {(r.src.line, r.src.sub, r.KIND): r.step for r in imported}
    assert [r.step for r in timers(imported, "global")] == list(range(1, 15))


def feed_file_from(parser: LogParser, lines: list[str], start: int) -> list[Record]:
    """:func:`feed_file` of ``lines[start:]``, after the first ``start`` lines were fed."""
    offset = sum(len(ln.encode()) + 1 for ln in lines[:start])
    out: list[Record] = []
    for n, ln in enumerate(lines[start:], start=start + 1):
        out += parser.feed(ln, offset=offset, line=n)
        offset += len(ln.encode()) + 1
    return out


def test_a_short_log_read_from_its_start_is_numbered_at_its_end() -> None:
    """Fewer steps than ``WEAK_START_STEPS``: numbered when the log ends (the import's end, a
    collector's stop), not before, so an anchor coming later would still be heard."""
    lines = (DATA / "python_default_loglevel" / "train.log").read_text().splitlines()[:30]
    parser = LogParser("py", "train.log")
    early = feed_file(parser, lines)
    assert not [r for r in early if isinstance(r, TimerRecord)]  # held: no number yet
    assert [r.step for r in timers(parser.finish(), "global")] == list(range(1, 8))


def test_frames_before_the_first_anchor_never_get_a_step_below_1() -> None:
    """Eight steps' timer lines, then ``step=3``: the count says the first six came before
    step 1, which no DeepSpeed step is. They get no step, never -5 ... 0."""
    z0 = read("z0_default_loglevel")
    frames = [ln for ln in z0 if "| fwd: " in ln][:8]
    anchor = next(ln for ln in read("z2") if "] step=10, skipped=" in ln).replace(
        "step=10,", "step=3,"
    )
    recs, parser = parse([*frames, anchor, *frames[:2]])
    assert [r.step for r in timers(recs, "global")] == [None] * 6 + [1, 2, 3, 4]
    assert all(r.step is None or r.step >= 1 for r in recs)


@pytest.mark.parametrize("named", [2**53, 9007199254740993, 2**64])
def test_a_step_past_2_53_is_no_anchor_and_no_record_step(named: int) -> None:
    """``step=9007199254740993`` names no step a browser can show (issue 41, case 3): the line's
    step record keeps no step, the count goes on from the launcher lines, and it is counted."""
    z0 = read("z0_default_loglevel")
    anchor = next(ln for ln in read("z2") if "] step=10, skipped=" in ln).replace(
        "step=10,", f"step={named},"
    )
    first = next(i for i, ln in enumerate(z0) if "| fwd: " in ln)
    lines = [*z0[: first + 1], anchor, *z0[first + 1 :]]
    recs, parser = parse(lines)
    assert [r.step for r in timers(recs, "global")] == list(range(1, 21))
    (step,) = [r for r in recs if isinstance(r, StepRecord)]
    assert step.step is None
    assert parser.diag.unparsed[OUT_OF_RANGE] == 1


def test_the_clock_gives_no_step_outside_1_to_2_53() -> None:
    clock = StepClock()
    clock.anchor(MAX_STEP + 1)
    assert clock.base is None  # ignored
    clock.anchor(MAX_STEP)
    clock.end_step()
    assert clock.stamp(0) == MAX_STEP and clock.stamp(1) is None and clock.current() is None
    clock.anchor(1)
    assert clock.stamp(clock.rel - 1) is None and clock.stamp(clock.rel) == 1
