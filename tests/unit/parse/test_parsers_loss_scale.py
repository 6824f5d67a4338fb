"""LossScaleParser on real fp16 / bf16 overflow and loss-scale messages of many versions.

Expected values were read by hand from the files in tests/data (each folder's README.md says
where its lines come from).
"""

from __future__ import annotations

from locations import DATA

from dsmon.model.records import LossScaleRecord, Record
from dsmon.parse.log import LogParser


def lines_of(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").splitlines()


def parse(lines: list[str]) -> tuple[list[LossScaleRecord], LogParser]:
    parser = LogParser("r", "train.log")
    recs: list[Record] = list(parser.feed_lines(lines))
    return [r for r in recs if isinstance(r, LossScaleRecord)], parser


def test_zero_dynamic_loss_scaler_v0198() -> None:
    got, parser = parse(lines_of("fp16_zero2/train.log"))
    assert [
        (r.src.line, r.event, r.src.rank, r.attempted_scale, r.new_scale, r.hysteresis) for r in got
    ] == [
        (212, "hysteresis", 0, 65536.0, None, 1),
        (216, "overflow", 0, 65536.0, 32768.0, None),
        (220, "overflow", 0, 32768.0, 16384.0, None),
        (256, "overflow", 0, 16384.0, 8192.0, None),
    ]
    assert got[0].ts == "2026-11-29T14:14:32.028"
    assert got[1].message == (
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert sum(parser.diag.unparsed.values()) == 0


def test_unfused_optimizer_messages_of_both_ranks() -> None:
    got, _ = parse(lines_of("fp16_zero0/train.log"))
    assert len(got) == 16  # "No Grad overflow for 5 iterations" lines carry nothing new
    assert [(r.src.line, r.event, r.attempted_scale, r.new_scale) for r in got[:2]] == [
        (188, "scale_up", 4294967296.0, 8589934592.0),
        (190, "scale_up", 4294967296.0, 8589934592.0),
    ]
    assert [(r.src.line, r.event, r.iteration, r.src.rank) for r in got[6:8]] == [
        (245, "overflow", 19, None),
        (246, "scale_down", None, None),
    ]
    assert got[7].attempted_scale == 34359738368.0 and got[7].new_scale == 17179869184.0
    # printed once per rank: distinct iterations tell the skipped steps
    assert sorted({r.iteration for r in got if r.event == "overflow"}) == [19, 20]


def test_zero3_v04_float_scales_behind_tqdm() -> None:
    got, _ = parse(lines_of("loss_scale_old_versions/gptneo7_v04.log"))
    assert [(r.event, r.attempted_scale, r.new_scale, r.src.rank) for r in got] == [
        ("overflow", 16777216.0, 8388608.0, 0),
        ("overflow", 8388608.0, 4194304.0, 0),
        ("overflow", 4194304.0, 2097152.0, 0),
        ("overflow", 2097152.0, 1048576.0, 0),
        ("overflow", 1048576.0, 524288.0, 0),
    ]
    assert got[0].message.startswith("[deepscale] OVERFLOW! Rank 0")
    assert got[0].ts == "2021-06-08T12:02:45.001"


def test_dynamic_loss_scaler_v09_hysteresis() -> None:
    got, _ = parse(lines_of("loss_scale_old_versions/issue931_v09.log"))
    assert [(r.event, r.attempted_scale, r.new_scale, r.hysteresis) for r in got] == [
        ("hysteresis", 65536.0, None, 1),
        ("overflow", 65536.0, 32768.0, None),
        ("overflow", 32768.0, 16384.0, None),
        ("overflow", 16384.0, 8192.0, None),
    ]


def test_fused_optimizer_v06_newline_message_and_iteration_steps() -> None:
    # DeepSpeed #2069: the fused optimizer logs "\nGrad overflow on iteration 9" from 4 ranks:
    # the logger header stands alone and the message follows on a bare line.
    got, parser = parse(lines_of("loss_scale_old_versions/issue2069_v06.log"))
    assert [(r.src.line, r.event, r.iteration, r.step) for r in got[:4]] == [
        (2, "overflow", 9, 10),
        (4, "overflow", 9, 10),
        (6, "overflow", 9, 10),
        (8, "overflow", 9, 10),
    ]
    assert got[1].ts == "2022-07-05T16:30:10.796"  # from the header line before it
    assert [(r.event, r.step, r.attempted_scale, r.new_scale) for r in got[4:]] == [
        ("scale_down", 10, 8388608.0, 4194304.0),
        ("scale_down", 10, 8388608.0, 4194304.0),
        ("scale_down", 10, 8388608.0, 4194304.0),
        ("scale_down", 10, 8388608.0, 4194304.0),
        ("overflow", 10, 8388608.0, 4194304.0),  # rank 0's "Overflow detected. ..."
    ]
    assert got[-1].src.rank == 0
    assert sum(parser.diag.unparsed.values()) == 0


def test_fused_optimizer_v03_scale_stuck_at_one() -> None:
    got, _ = parse(lines_of("loss_scale_old_versions/issue697_v03.log"))
    assert [(r.event, r.iteration, r.attempted_scale) for r in got] == [
        ("scale_down", None, 1.0),
        ("overflow", 8, None),
        ("overflow", 8, None),
        ("scale_down", None, 1.0),
        ("scale_down", None, 1.0),
        ("overflow", 8, None),
        ("overflow", None, 1.0),
        ("scale_down", None, 1.0),
    ]


def test_bf16_min_scale_and_look_alikes() -> None:
    got, parser = parse(lines_of("loss_scale_old_versions/other_lines.log"))
    assert [(r.src.line, r.event) for r in got] == [(1, "min_scale"), (2, "bf16_overflow")]
    assert got[1].src.rank == 0 and got[1].ts == "2026-11-29T14:13:43.789"
    # tacotron2's and apex's own overflow lines (3, 4) are not DeepSpeed's: not read, not counted
    assert sum(parser.diag.unparsed.values()) == 0


def test_wrapped_overflow_line_is_joined_at_every_cut() -> None:
    full = lines_of("loss_scale_old_versions/issue931_v09.log")[1]
    (ref,) = parse([full])[0]
    start = full.index("] [deepspeed]") + 2
    for cut in range(start + 1, len(full)):
        got, parser = parse([full[:cut], full[cut:]])
        assert [(r.event, r.attempted_scale, r.hysteresis, r.message) for r in got] == [
            (ref.event, ref.attempted_scale, ref.hysteresis, ref.message)
        ], cut
        assert sum(parser.diag.unparsed.values()) == 0


def test_a_message_is_not_glued_to_the_lines_after_it() -> None:
    # megatron_ds095_llama/train.log lines 237-239: a loss-scale line, then two bare lines
    lines = lines_of("megatron_ds095_llama/train.log")
    got, parser = parse(lines[236:240])
    assert [(r.event, r.attempted_scale, r.new_scale) for r in got] == [
        ("scale_down", 65536.0, 32768.0)
    ]
    recs = list(LogParser("r", "f").feed_lines(lines[236:240]))
    assert [r.KIND for r in recs] == ["loss_scale", "iteration", "iteration", "step"]
    assert sum(parser.diag.unparsed.values()) == 0


def test_line_cut_inside_its_last_number_is_counted_not_stored() -> None:
    lines = lines_of("fp16_zero0/train.log")
    up = lines[187]  # "... Increasing dynamic loss scale from 4294967296 to 8589934592.0"
    # "... to 85899345", then file lines 189-190 (rank 1's "No Grad overflow", "Increasing")
    got, parser = parse([up[:-4], lines[188], lines[189]])
    assert [(r.src.line, r.event, r.new_scale) for r in got] == [(3, "scale_up", 8589934592.0)]
    assert parser.diag.unparsed["loss_scale"] == 1
    down = lines[245]  # "... Reducing dynamic loss scale from 34359738368.0 to 17179869184.0"
    got, parser = parse([down[:-5]])
    assert got == [] and parser.diag.unparsed["loss_scale"] == 1


def test_a_number_printed_after_a_hysteresis_message_is_not_joined_to_it() -> None:
    """The message waits for the next line (a wrapped one goes on there); a script's bare
    number after it (``32768``) is no continuation: ``Reducing hysteresis to 1`` + ``32768``
    would read a hysteresis of 132768. DeepSpeed prints h, then h - 1."""
    line = next(ln for ln in lines_of("loss_scale_old_versions/issue931_v09.log")
                if "Reducing hysteresis" in ln)  # fmt: skip
    got, _ = parse([line, "32768"])
    assert [(r.event, r.attempted_scale, r.hysteresis) for r in got] == [("hysteresis", 65536.0, 1)]
