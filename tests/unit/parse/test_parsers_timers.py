"""TimerParser on real ``time (ms) | ...`` output: DeepSpeed 0.19.8 corpus runs and old releases.

Expected values were read by hand from the files in tests/data (each folder's README.md says
where its lines come from).
"""

from __future__ import annotations

import random

import pytest
from locations import DATA

from dsmon.model.records import CoordinatorEventRecord, Record, TimerRecord
from dsmon.parse.base import NEED_MORE, ParseContext
from dsmon.parse.families.timers import TimerParser, classify
from dsmon.parse.lines import LineCleaner
from dsmon.parse.log import LogParser

OLD = DATA / "timers_old_versions"


def lines_of(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").splitlines()


def parse(lines: list[str]) -> tuple[list[Record], LogParser]:
    parser = LogParser("r", "train.log")
    return list(parser.feed_lines(lines)), parser


def timers(recs: list[Record], group: str | None = None) -> list[TimerRecord]:
    return [r for r in recs if isinstance(r, TimerRecord) and (group is None or r.group == group)]


def test_z2_groups_and_values() -> None:
    recs, parser = parse(lines_of("z2/train.log"))
    assert sum(parser.diag.unparsed.values()) == 0
    assert [len(timers(recs, g)) for g in ("zero_optimizer", "micro", "global")] == [30, 30, 30]
    first = timers(recs)[0]
    assert first == TimerRecord(
        src=first.src,
        ts="2026-11-29T14:11:04.882",  # no time of its own: the logger line 152 before it
        step=1,
        group="zero_optimizer",
        values_ms={
            "optimizer_allgather": 11.76,
            "optimizer_gradients": 51.28,
            "optimizer_step": 77.51,
        },
    )
    assert (first.src.line, first.src.rank) == (182, 0)
    third = timers(recs, "global")[2]  # line 192
    assert third.src.line == 192 and third.step == 3
    assert third.values_ms == {
        "fwd": 10.28,
        "bwd": 26.15,
        "bwd_inner": 19.74,
        "bwd_allreduce": 6.37,
        "step": 10.35,
    }
    micro = timers(recs, "micro")[0]
    assert micro.values_ms["bwd_allreduce_microstep"] == 78.63 and micro.micro_step == 0
    assert not micro.legacy


def test_z3_optimizer_timers() -> None:
    recs, _ = parse(lines_of("z3/train.log"))
    z3 = timers(recs, "zero3_optimizer")
    assert (z3[0].src.line, z3[0].values_ms) == (41, {"init_optimizer_state": 0.07})
    assert (z3[1].src.line, z3[1].values_ms) == (189, {"optimizer_step": 8.02})
    assert len(z3) == 31 and len(timers(recs, "global")) == 30


def test_activation_checkpointing_lines_do_not_end_steps() -> None:
    recs, _ = parse(lines_of("act_ckpt/train.log"))
    ckpt = timers(recs, "act_ckpt")
    assert len(ckpt) == 120
    assert [(r.src.line, r.values_ms) for r in ckpt[:5]] == [
        (186, {"fwd": 77.33}),
        (187, {"fwd": 82.86}),
        (188, {"fwd": 79.61}),
        (189, {"fwd": 77.12}),
        (190, {"backward": 230.20}),
    ]
    assert [r.step for r in timers(recs, "global")] == list(range(1, 16))
    assert {r.step for r in ckpt[:8]} == {1}


def test_legacy_names_and_rank_prefix_v05() -> None:
    # DeepSpeed issue #1436, v0.5: log_dist lines with "rank=0 time (ms)" and old names,
    # one of them glued behind a tqdm bar.
    recs, parser = parse(lines_of("timers_old_versions/issue1436_v05.log"))
    assert sum(parser.diag.unparsed.values()) == 0
    got = [(r.src.line, r.group, r.legacy, r.src.rank, r.ts) for r in timers(recs)]
    assert got == [
        (1, "micro", True, 0, "2021-10-08T20:18:46.393"),
        (2, "global", True, 0, "2021-10-08T20:18:46.393"),
        (3, "zero_optimizer", True, 0, "2021-10-08T20:18:48.232"),
        (4, "micro", True, 0, "2021-10-08T20:18:48.232"),
        (5, "global", True, 0, "2021-10-08T20:18:48.232"),
    ]
    assert timers(recs, "global")[0].values_ms == {
        "fwd": 316.00,
        "bwd": 747.31,
        "bwd_inner": 514.96,
        "bwd_allreduce": 232.28,
        "step": 663.59,
    }
    assert timers(recs, "micro")[1].values_ms["bwd_inner_microstep"] == 514.26
    assert timers(recs, "zero_optimizer")[0].values_ms["optimizer_step"] == 574.38
    # the log starts mid-window: the first micro line's index is unknown, the next one is 0
    assert [r.micro_step for r in timers(recs, "micro")] == [None, 0]


def test_bare_old_micro_lines_v02() -> None:
    recs, _ = parse(lines_of("timers_old_versions/issue255_v02.log"))
    micro = timers(recs, "micro")
    assert len(micro) == 8 and all(r.legacy and r.src.rank is None for r in micro)
    assert micro[0].values_ms == {
        "fwd_microstep": 194.12,
        "bwd_microstep": 334.57,
        "bwd_inner_microstep": 334.45,
        "bwd_allreduce_microstep": 0.05,
        "step_microstep": 0.07,
    }


def test_zero_optimizer_names_in_set_order_v03() -> None:
    recs, _ = parse(lines_of("timers_old_versions/porting1_v03.log"))
    (rec,) = timers(recs)
    assert rec.group == "zero_optimizer" and rec.legacy and rec.src.rank == 0
    assert list(rec.values_ms) == ["optimizer_gradients", "optimizer_step", "optimizer_allgather"]
    assert rec.values_ms["optimizer_allgather"] == 64.85


def test_gpt_neox_timer_line_is_not_the_engine_line() -> None:
    # DeepSpeed issue #3742: GPT-NeoX prints its own "time (ms) | forward: ... |
    # backward-backward: ..." line after DeepSpeed's legacy engine lines.
    lines = lines_of("timers_old_versions/issue3742_v09.log")
    ctx = ParseContext("r", "f")
    parser = TimerParser()
    cleaner = LineCleaner()
    got = []
    for n, raw in enumerate(lines, 1):
        for line in cleaner.clean(raw, n):
            before = ctx.clock.rel
            recs = parser.feed(line, ctx)
            if recs:
                assert isinstance(recs[0], TimerRecord)
                got.append((n, recs[0].group, ctx.clock.rel - before))
    assert got == [(2, "micro", 0), (3, "global", 1), (5, "megatron", 0)]
    recs, _ = parse(lines)
    (neox,) = timers(recs, "megatron")
    assert neox.values_ms == {
        "forward": 659.86,
        "backward": 2164.69,
        "backward-backward": 2164.66,
        "backward-allreduce": 0.00,
        "optimizer": 1172.51,
        "batch generator": 0.83,
    }
    assert not neox.legacy


def test_classify_name_sets() -> None:
    assert classify(("fwd",)) == ("act_ckpt", ("fwd",), False)
    assert classify(("backward",)) == ("act_ckpt", ("backward",), False)
    assert classify(("forward", "backward", "backward_inner", "backward_allreduce", "step")) == (
        "global",
        ("fwd", "bwd", "bwd_inner", "bwd_allreduce", "step"),
        True,
    )
    assert classify(("optimizer_step",))[0] == "zero3_optimizer"
    assert classify(("forward", "backward", "backward-backward"))[0] == "megatron"


@pytest.mark.parametrize("number", [182, 183, 184])
def test_terminal_wrapped_line_is_joined_at_every_cut(number: int) -> None:
    full = lines_of("z2/train.log")[number - 1]
    (ref,) = timers(parse([full])[0])
    start = full.index("time (ms)") + len("time (ms)")
    for cut in range(start, len(full)):
        recs, parser = parse([full[:cut], full[cut:]])
        assert [(r.group, r.values_ms, r.src.rank) for r in recs] == [
            (ref.group, ref.values_ms, 0)
        ], cut
        assert sum(parser.diag.unparsed.values()) == 0


def test_wrapped_logger_line_of_v05_is_joined() -> None:
    full = lines_of("timers_old_versions/issue1436_v05.log")[1]
    for cut in range(full.index("rank=0") + 1, len(full)):
        recs, _ = parse([full[:cut], full[cut:]])
        assert [(r.group, r.values_ms["step"], r.ts) for r in timers(recs)] == [
            ("global", 663.59, "2021-10-08T20:18:46.393")
        ], cut


def test_one_field_fwd_line_joins_only_with_a_continuation() -> None:
    lines = lines_of("act_ckpt/train.log")
    ckpt = lines[185:198]  # fwd x4, backward x4, torch warnings, the ZeRO optimizer line
    recs, _ = parse(ckpt)
    assert [r.group for r in timers(recs)] == ["act_ckpt"] * 8 + ["zero_optimizer"]
    # a one-field line followed by a line without header (the torch warning of line 194):
    # the join is tried, fails, and is undone
    recs, parser = parse([lines[185], lines[193], lines[194]])
    assert [(r.group, r.values_ms) for r in timers(recs)] == [("act_ckpt", {"fwd": 77.33})]
    assert sum(parser.diag.unparsed.values()) == 0
    glob = lines_of("z2/train.log")[183]  # "[Rank 0] time (ms) | fwd: 350.75 | bwd: ..."
    cut = glob.index(" | bwd:")  # wrapped right after the first field
    recs, _ = parse([glob[:cut], glob[cut:]])
    assert [(r.group, r.values_ms["fwd"], r.values_ms["step"]) for r in timers(recs)] == [
        ("global", 350.75, 190.22)
    ]


def test_glued_lines_are_split() -> None:
    z2 = lines_of("z2/train.log")
    glued = z2[182] + z2[183]  # micro line and global line of step 1 on one physical line
    recs, _ = parse([glued])
    assert [(r.group, r.src.sub) for r in timers(recs)] == [("micro", 0), ("global", 1000)]
    after_print = z2[184] + z2[185]  # "[train.py] step 1 ..." + next optimizer line
    recs, _ = parse([after_print])
    assert [r.values_ms["optimizer_allgather"] for r in timers(recs)] == [4.27]


def test_damaged_lines_are_counted_not_crashing() -> None:
    z2 = lines_of("z2/train.log")
    broken = z2[183].replace("bwd: 754.18", "bwd: 754,18")  # a value that is not a number
    recs, parser = parse([broken])
    assert timers(recs) == [] and parser.diag.unparsed["timer"] == 1
    assert parser.diag.examples["timer"][0].startswith("train.log:1: time (ms) | fwd: 350.75")
    cut_at_end = z2[183][:-3]  # the input ends inside the last value: "step: 190."
    recs, parser = parse([cut_at_end])
    (rec,) = timers(recs)
    assert rec.group == "global" and "step" not in rec.values_ms
    assert rec.values_ms["bwd_allreduce"] == 78.63 and parser.diag.unparsed["timer"] == 1
    rnd = random.Random(7)
    junk = [
        "".join(chr(rnd.randrange(32, 0x2FF)) for _ in range(rnd.randrange(80))) for _ in range(200)
    ]
    junk += [ln[: rnd.randrange(len(ln) + 1)] for ln in z2[180:260]]
    parse(junk)  # must not raise


def test_need_more_only_before_the_last_chance() -> None:
    z2 = lines_of("z2/train.log")
    ctx = ParseContext("r", "f")
    (line,) = LineCleaner().clean(z2[183][:60], 1)
    assert TimerParser().feed(line, ctx) is NEED_MORE
    ctx.final = True
    recs = TimerParser().feed(line, ctx)
    assert recs is not NEED_MORE and recs is not None


def test_line_wrapped_over_three_lines() -> None:
    full = lines_of("z2/train.log")[182]  # the first micro line, 136 characters of fields
    (ref,) = timers(parse([full])[0])
    for a, b in [(40, 80), (21, 130), (60, 61)]:
        recs, parser = parse([full[:a], full[a:b], full[b:]])
        assert [(r.values_ms, r.micro_step) for r in timers(recs)] == [(ref.values_ms, None)]
        assert sum(parser.diag.unparsed.values()) == 0


def test_zero3_coordinator_timers_of_v0100() -> None:
    """Real DeepSpeed 0.10.0 output: the coordinator's timer line and its event lines."""
    recs, parser = parse(lines_of("zero3_coordinator_v0100/train.log"))
    assert sum(parser.diag.unparsed.values()) == 0
    coord = timers(recs, "zero3_coordinator")
    assert len(coord) == 7 and len(timers(recs, "global")) == 8
    first = coord[0]  # line 226, printed in step 2's backward, before step 2's engine line
    assert (first.src.line, first.step, first.legacy) == (226, 2, True)
    assert first.values_ms == {
        "forward_fetch_wait": 48.82,
        "forward_fetch_submit": 2.90,
        "forward_all_gather": 4.03,
        "backward_fetch_wait": 17.35,
        "backward_fetch_submit": 2.05,
        "backward_all_gather": 1.90,
        "forward_prefetch_submit": 1.35,
    }
    last = coord[-1]
    assert (last.src.line, last.step) == (372, 8)
    assert last.values_ms["forward_all_gather"] == 5.09
    assert last.values_ms["forward_prefetch_submit"] == 5.14
    events = [r for r in recs if isinstance(r, CoordinatorEventRecord)]
    assert len(events) == 49  # seven lines per logged step
    assert [(e.src.line, e.step, e.event, e.count, e.numel) for e in events[:3]] == [
        (219, 2, "forward_fetch_wait", 37, 466304),
        (220, 2, "forward_fetch_submit", 0, 0),
        (221, 2, "forward_all_gather", 1, 932608),
    ]
