"""wall_clock_breakdown timer lines as users pasted them: no prefix, a leading space, old and new
names, pipeline and custom timers, user prints in between. Expected values are read off the
excerpts by hand (../shared/corpus/field, excerpts 16, 18, 19, 20, 46)."""

from __future__ import annotations

from field_logs import lines, of, parse_field

from dsmon.model.records import StepRecord, ThroughputRecord, TimerRecord
from dsmon.parse.log import parse_text


def test_16_zenflow_new_names_without_any_prefix() -> None:
    recs, diag = parse_field(16)
    assert sum(diag.unparsed.values()) == 0
    timers = of(recs, TimerRecord)
    assert len(timers) == 14  # every "time (ms)" line; "Step 0 time: 178.66ms" is the script's
    assert [t.group for t in timers[:4]] == ["other", "micro", "zero_optimizer", "other"]
    assert timers[0].values_ms == {
        "selective_optimizer_update": 19.20,
        "selective_optimizer_process": 28.80,
        "selective_optimizer_sync": 0.05,
    }
    (first_global, second_global) = [t for t in timers if t.group == "global"]
    assert first_global.src.line == 7
    assert first_global.values_ms == {
        "fwd": 55.15,
        "bwd": 180.82,
        "bwd_inner": 13.28,
        "bwd_allreduce": 160.15,
        "step": 183.61,
    }
    assert second_global.values_ms["step"] == 128.77
    assert [t.micro_step for t in timers if t.group == "micro"][2:] == [0, 1, 0]
    assert not any(t.legacy for t in timers)


def test_18_neox_pipeline_line_with_a_damaged_last_value() -> None:
    recs, diag = parse_field(18)
    assert diag.unparsed == {"timer": 1}  # "_step_check_overflow: 0.80M" is not a value
    (rec,) = of(recs, TimerRecord)
    assert rec.group == "pipeline" and rec.legacy and rec.src.rank == 0  # "rank=0 time (ms)"
    assert rec.values_ms["train_batch"] == 87510.72
    assert rec.values_ms["fwd"] == 2844.74  # printed as "forward"
    assert rec.values_ms["bwd"] == 8724.91  # printed as "backward"
    assert rec.values_ms["comms"] == 74766.41
    assert rec.values_ms["_step_zero_grad"] == 2.97
    assert len(rec.values_ms) == 13 and "_step_check_overflow" not in rec.values_ms


def test_19_old_optimizer_timers_step_and_samples_per_sec() -> None:
    recs, diag = parse_field(19)
    assert sum(diag.unparsed.values()) == 0
    (timer,) = of(recs, TimerRecord)
    assert timer.group == "zero_optimizer" and timer.legacy
    assert timer.values_ms == {
        "optimizer_gradients": 51.24,
        "optimizer_step": 937.01,
        "optimizer_allgather": 64.85,
    }
    (step,) = of(recs, StepRecord)
    assert (step.step, step.skipped) == (710, 19)
    assert step.lr == (2.359596026758678e-05,) and step.mom == ((0.9, 0.999),)
    (tput,) = of(recs, ThroughputRecord)
    assert (tput.epoch, tput.micro_step, tput.step) == (0, 710, 710)
    assert tput.running_avg_samples_per_s == 174.80488942519466  # "SamplesPerSec=" (v0.3)
    assert tput.samples_per_s is None


def test_20_micro_lines_between_user_prints() -> None:
    recs, diag = parse_field(20)
    assert sum(diag.unparsed.values()) == 0
    timers = of(recs, TimerRecord)
    assert [t.group for t in timers] == ["micro"] * 5 + ["zero_optimizer"]
    assert [t.src.line for t in timers] == [1, 3, 5, 7, 9, 11]  # "5441" etc. are not read
    assert [t.values_ms["fwd_microstep"] for t in timers[:5]] == [
        499.07,
        501.52,
        502.79,
        488.47,
        488.21,
    ]
    assert timers[0].ts == "2024-05-22T10:14:25.064" and timers[0].src.rank == 0
    assert timers[-1].values_ms == {
        "optimizer_allgather": 0.00,
        "optimizer_gradients": 3.28,
        "optimizer_step": 5.63,
    }


def test_46_leading_space_and_custom_timers() -> None:
    recs, diag = parse_field(46)
    assert sum(diag.unparsed.values()) == 0
    custom, micro, glob = of(recs, TimerRecord)
    assert custom.group == "other"
    assert custom.values_ms == {
        "update_optims": 21766.25,
        "unscale_grads": 506.45,
        "optimizer_step": 22850.66,
    }
    assert micro.group == "micro" and micro.legacy
    assert micro.values_ms["bwd_inner_microstep"] == 806.86  # "backward_inner_microstep"
    assert glob.group == "global" and glob.legacy
    assert glob.values_ms == {
        "fwd": 376.60,
        "bwd": 864.56,
        "bwd_inner": 806.87,
        "bwd_allreduce": 57.62,
        "step": 22880.87,
    }


def test_17_engine_lines_re_spaced_by_a_terminal_read_the_same() -> None:
    """Excerpt 17's engine lines with a terminal's padding inside a name (the line wrapped
    there): still the micro and global lines, with DeepSpeed's names."""
    micro, glob = lines(17)[0], lines(17)[1]
    assert "bwd_inner_microstep: 1223.71" in micro and "bwd_allreduce: 1178.40" in glob
    text = "\n".join(
        [
            micro.replace("bwd_inner_microstep", "bwd_inner_micro" + " " * 17 + "step"),
            glob.replace("bwd_allreduce", "bwd_all" + " " * 9 + "reduce"),
        ]
    )
    recs, diag = parse_text(text)
    assert sum(diag.unparsed.values()) == 0
    got_micro, got_glob = of(recs, TimerRecord)
    assert got_micro.group == "micro" and got_micro.values_ms["bwd_inner_microstep"] == 1223.71
    assert got_glob.group == "global" and got_glob.values_ms["bwd_allreduce"] == 1178.40
