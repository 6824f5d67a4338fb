"""fp16 overflow and loss-scale messages of several generations, glued to tqdm bars, behind a job
runner's prefix, from two engines at once. Expected values are read off the excerpts by hand
(../shared/corpus/field, excerpts 04, 14, 24, 25, 26)."""

from __future__ import annotations

from field_logs import lines, of, parse_field

from dsmon.model.records import LossScaleRecord, StepRecord, ThroughputRecord
from dsmon.parse.log import parse_text


def test_04_deepscale_zero3_overflow_at_the_floor() -> None:
    recs, diag = parse_field(4)  # config-dump tail and HF dicts around it
    assert sum(diag.unparsed.values()) == 0
    (rec,) = of(recs, LossScaleRecord)
    assert rec.src.line == 10 and rec.src.rank == 0
    assert (rec.event, rec.attempted_scale, rec.new_scale) == ("overflow", 256, 256)
    assert rec.ts == "2021-05-26T04:56:04.854"


def test_14_actor_and_critic_report_in_pairs() -> None:
    recs, diag = parse_field(14)
    assert sum(diag.unparsed.values()) == 0
    scale = of(recs, LossScaleRecord)
    assert [r.src.line for r in scale] == [11, 12, 17, 18, 23, 24]
    assert [r.event for r in scale] == ["hysteresis"] * 2 + ["overflow"] * 4
    assert [r.hysteresis for r in scale[:2]] == [1, 1]  # "Reducing hysteresis to 1"
    assert [(r.attempted_scale, r.new_scale) for r in scale[2:]] == [
        (65536, 32768),
        (65536, 32768),
        (32768, 16384),
        (32768, 16384),
    ]
    # "|E2E latency=...|CurSamplesPerSec=8.01" is DeepSpeed-Chat's own line, not the timer's
    assert of(recs, ThroughputRecord) == []


def test_24_unfused_optimizer_behind_a_job_runner_prefix() -> None:
    recs, diag = parse_field(24)
    assert sum(diag.unparsed.values()) == 0
    grad, reducing, skipped = of(recs, LossScaleRecord)
    assert all(r.src.node == "run6231" for r in (grad, reducing, skipped))
    assert (grad.event, grad.iteration, grad.step) == ("overflow", 0, 1)
    assert grad.ts == "2021-05-29T21:06:33.240"  # the logger's time, not the runner's
    assert (reducing.event, reducing.attempted_scale, reducing.new_scale) == (
        "scale_down",
        65536,
        32768.0,
    )
    assert (skipped.event, skipped.attempted_scale, skipped.new_scale) == (
        "overflow",
        65536,
        32768.0,  # "reducing to 32768.0": not run together with the next line's stamp
    )
    steps = of(recs, StepRecord)
    assert [(s.step, s.skipped) for s in steps] == [(100, 1), (200, 1)]
    (tput,) = of(recs, ThroughputRecord)
    assert (tput.micro_step, tput.running_avg_samples_per_s) == (100, 626.1667355513339)


def test_25_overflows_glued_to_tqdm_bars_down_to_scale_2() -> None:
    recs, diag = parse_field(25)
    assert sum(diag.unparsed.values()) == 0
    scale = of(recs, LossScaleRecord)
    assert [(r.attempted_scale, r.new_scale) for r in scale] == [
        (64, 32),
        (32, 16),
        (16, 8),
        (8, 4),
        (4, 2),
    ]
    assert scale[0].ts == "2023-06-07T22:16:00.018"
    assert scale[-1].ts == "2023-06-07T22:24:46.260"


def test_26_scale_from_two_to_the_32() -> None:
    recs, diag = parse_field(26)
    assert sum(diag.unparsed.values()) == 0
    scale = of(recs, LossScaleRecord)
    assert [r.attempted_scale for r in scale] == [2.0**k for k in range(32, 26, -1)]
    assert [r.new_scale for r in scale] == [2.0**k for k in range(31, 25, -1)]
    assert scale[0].attempted_scale == 4294967296 and scale[-1].new_scale == 67108864
    assert all(r.event == "overflow" and r.src.rank == 0 for r in scale)


def test_24_a_following_line_that_starts_with_digits_is_no_continuation() -> None:
    """Without the runner's prefix on line 5 and with line 6 cut after its date, the message
    still ends at its own line: the next line's ``2021`` is not glued onto ``32768.0``."""
    overflow = lines(24)[4].partition("run6231: ")[2]
    recs, _ = parse_text(overflow + "\n" + lines(24)[5][:10])
    (rec,) = of(recs, LossScaleRecord)
    assert (rec.attempted_scale, rec.new_scale) == (65536, 32768.0)


def test_13_terminal_rewrapped_scale_message_reads_the_same() -> None:
    """Excerpt 13's ``Attempted loss scale: 8192, reducing to 4096`` as a terminal copy leaves it
    when the line wrapped inside ``scale``: split over two lines, or with the row's padding
    spaces in the word (``scal<spaces>e: 8192``)."""
    line = lines(13)[9]
    head, sep, tail = line.rpartition("scal")
    assert sep and tail.startswith("e: 8192, reducing to 4096")
    for text in (head + sep + "\n" + tail, head + sep + " " * 23 + tail):
        recs, diag = parse_text(text)
        (rec,) = of(recs, LossScaleRecord)
        assert (rec.event, rec.attempted_scale, rec.new_scale) == ("overflow", 8192, 4096)
        assert rec.ts == "2023-04-18T01:46:55.387"
        assert sum(diag.unparsed.values()) == 0
