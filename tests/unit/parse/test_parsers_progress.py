"""ProgressParser on real ``step=``, ThroughputTimer and pipeline ``steps:`` lines of many versions.

Expected values were read by hand from the files in tests/data (each folder's README.md says
where its lines come from).
"""

from __future__ import annotations

import dataclasses

import pytest
from locations import DATA

from dsmon.model.records import IterationRecord, Record, StepRecord, ThroughputRecord
from dsmon.parse.families.progress import is_prefix, parse_mom
from dsmon.parse.log import LogParser

GIB = 1024**3


def lines_of(rel: str) -> list[str]:
    return (DATA / rel).read_text(encoding="utf-8").splitlines()


def parse(lines: list[str]) -> tuple[list[Record], LogParser]:
    parser = LogParser("r", "train.log")
    return list(parser.feed_lines(lines)), parser


def steps(recs: list[Record]) -> list[StepRecord]:
    return [r for r in recs if isinstance(r, StepRecord)]


def tputs(recs: list[Record]) -> list[ThroughputRecord]:
    return [r for r in recs if isinstance(r, ThroughputRecord)]


def test_z2_step_lines() -> None:
    recs, parser = parse(lines_of("z2/train.log"))
    got = steps(recs)
    assert [r.step for r in got] == [0, 5, 10, 15, 20, 25, 30]
    ten = got[2]
    assert ten == StepRecord(
        src=ten.src,
        ts="2026-11-29T14:11:06.716",
        step=10,
        skipped=0,
        lr=(0.0001,),
        mom=((0.9, 0.999),),
    )
    assert (ten.src.line, ten.src.rank) == (271, 0)
    assert sum(parser.diag.unparsed.values()) == 0


def test_z2_throughput_lines() -> None:
    recs, _ = parse(lines_of("z2/train.log"))
    got = tputs(recs)
    assert [(r.step, r.global_step, r.micro_step) for r in got] == [
        (5, 5, 5),
        (10, 10, 10),
        (15, 15, 15),
        (20, 20, 20),
        (25, 25, 25),
        (30, 30, 30),
    ]
    ten = got[1]
    assert ten == ThroughputRecord(
        src=ten.src,
        ts="2026-11-29T14:11:06.718",
        step=10,
        epoch=0,
        micro_step=10,
        global_step=10,
        samples_per_s=152.31438650869256,
        running_avg_samples_per_s=138.12109932754612,
        mem_allocated_bytes=round(0.43 * GIB),
        max_mem_allocated_bytes=round(0.43 * GIB),
    )
    assert ten.mem_allocated_bytes == 461708984 and ten.src.rank == 0


def test_grad_accum_throughput_counts_micro_steps() -> None:
    recs, _ = parse(lines_of("grad_accum/train.log"))
    first = tputs(recs)[0]
    assert (first.src.line, first.step, first.micro_step, first.global_step) == (215, 5, 20, 5)
    assert first.running_avg_samples_per_s == 116.29254947990073


def test_skipped_and_scheduler_lr() -> None:
    recs, _ = parse(lines_of("fp16_zero2/train.log"))
    assert [r.skipped for r in steps(recs)] == [0, 0, 3, 3, 4, 4]
    recs, _ = parse(lines_of("warmup_lr/train.log"))
    got = steps(recs)
    assert [(r.step, r.lr) for r in got[:6]] == [
        (0, (0.0,)),  # printed "lr=[0]": an int at step 0 under warmup
        (2, (0.0001,)),
        (4, (0.0003,)),
        (6, (0.0005,)),
        (8, (0.0007,)),
        (10, (0.0009000000000000001,)),
    ]
    assert {r.mom for r in got} == {((0.9, 0.95),)}


def test_old_throughput_forms_and_momentum_lists() -> None:
    # v0.5/0.6 (DeepSpeed #1825): "0/40, SamplesPerSec=X, MemAllocated=..GB, ..." and
    # betas printed as lists; the step= number just before the line is its step.
    recs, parser = parse(lines_of("progress_old_versions/issue1825_v06.log"))
    assert [(r.step, r.skipped, r.mom) for r in steps(recs)] == [
        (40, 2, ((0.9, 0.999),)),
        (50, 2, ((0.9, 0.999),)),
        (60, 2, ((0.9, 0.999),)),
    ]
    first = tputs(recs)[0]
    assert (first.step, first.epoch, first.micro_step, first.global_step) == (40, 0, 40, None)
    assert first.samples_per_s is None  # before v0.7 SamplesPerSec was the running average
    assert first.running_avg_samples_per_s == 83.48609168106144
    assert first.mem_allocated_bytes == round(0.26 * GIB)
    assert first.max_mem_allocated_bytes == round(9.02 * GIB)
    assert sum(parser.diag.unparsed.values()) == 0


def test_v07_throughput_form() -> None:
    # v0.7.7 (DeepSpeed #2629): "0/17, RunningAvgSamplesPerSec=..., CurrSamplesPerSec=..."
    recs, _ = parse(lines_of("progress_old_versions/issue2629_v077.log"))
    got = tputs(recs)
    assert [r.micro_step for r in got] == [17, 18, 19, 20, 21, 22]
    assert (got[0].running_avg_samples_per_s, got[0].samples_per_s) == (
        158.31157878546472,
        159.628891629629,
    )
    assert got[4].max_mem_allocated_bytes == round(2.62 * GIB)
    assert {r.step for r in got} == {None}  # no anchor, no timer lines: unknown


def test_glued_tqdm_two_param_groups_and_sgd_momentum() -> None:
    # transformers #14531: a tqdm bar glued before the step line; mom=[0.0, 0.0].
    recs, _ = parse(lines_of("progress_old_versions/transformers14531_v05.log"))
    (step,) = steps(recs)
    assert (step.step, step.skipped, step.lr, step.mom) == (
        2000,
        1995,
        (0.001, 0.001),
        ((0.0,), (0.0,)),
    )
    assert step.ts == "2021-11-26T03:07:16.494"
    (tput,) = tputs(recs)
    assert (tput.step, tput.micro_step, tput.running_avg_samples_per_s) == (
        2000,
        2000,
        9.526738918021234,
    )


def test_v09_epoch_form_and_two_groups() -> None:
    recs, _ = parse(lines_of("timers_old_versions/issue3742_v09.log"))
    (tput,) = tputs(recs)
    assert (tput.step, tput.global_step, tput.samples_per_s) == (34, 34, 8.00912418308922)
    assert tput.mem_allocated_bytes == round(59.65 * GIB)
    (step,) = steps(recs)
    assert step.lr == (2.1731931451279077e-06, 2.1731931451279077e-06)
    assert step.mom == ((0.9, 0.95), (0.9, 0.95))


def test_user_lines_with_step_equals_are_not_progress_lines() -> None:
    recs, parser = parse(lines_of("progress_old_versions/mlprof_v077.log"))
    assert [(r.step, r.mom) for r in steps(recs)] == [(0, ((0.8, 0.999),))]
    assert sum(parser.diag.unparsed.values()) == 0


def test_pipeline_lines() -> None:
    recs, parser = parse(lines_of("progress_old_versions/pipeline_lines.log"))
    got = [r for r in recs if isinstance(r, IterationRecord)]
    assert got[0] == IterationRecord(
        src=got[0].src,
        step=5,
        fmt="pipeline",
        iteration=5,
        loss=6.36,
        losses={"loss": 6.36},
        elapsed_ms=311.0,
        samples_per_s=25.706,
    )
    assert got[0].src.rank == 0
    assert got[2].losses == {"loss": 5.5508, "lm loss": 5.5103, "moe loss": 0.0405}
    assert (got[2].step, got[2].elapsed_ms) == (200, 936.0)
    # "steps: N" is printed after step N: step 6 is next, then 11 at the same count
    assert parser.ctx.clock.blind


@pytest.mark.parametrize("needle", ["step=10,", "global_step=10,"])
def test_wrapped_progress_lines_are_joined_at_every_cut(needle: str) -> None:
    full = next(ln for ln in lines_of("z2/train.log") if needle in ln)
    (ref,) = [r for r in parse([full])[0] if r.KIND in ("step", "throughput")]
    start = max(full.find("] step="), full.find("] epoch=")) + 2  # after the headers
    for cut in range(start + 1, len(full)):
        recs, parser = parse([full[:cut], full[cut:]])
        got = [r for r in recs if r.KIND in ("step", "throughput")]
        assert [dataclasses.replace(r, src=ref.src) for r in got] == [ref], cut
        assert sum(parser.diag.unparsed.values()) == 0, cut


def test_cut_progress_line_at_end_of_input_is_counted() -> None:
    full = next(ln for ln in lines_of("z2/train.log") if "global_step=10," in ln)
    recs, parser = parse([full[: full.index("CurrSamplesPerSec") + 22]])
    (tput,) = tputs(recs)
    assert tput.running_avg_samples_per_s == 138.12109932754612
    assert tput.samples_per_s is None  # cut inside its value: not stored
    assert parser.diag.unparsed["throughput"] == 1


def test_prefix_helpers() -> None:
    start = ("step=", "#", ", skipped=", "#", ", lr=[")
    assert is_prefix("step=1", start)  # z2 "step=10, ..." cut after one digit
    assert is_prefix("step=10, ski", start)
    assert not is_prefix("step=1.0000 dt=0.3665", start)  # mlprof_v077.log line 3
    # megatron_ds095_llama/train.log line 10: two param groups of Adam betas
    assert parse_mom("[(0.9, 0.95), (0.9, 0.95)]") == ((0.9, 0.95), (0.9, 0.95))


def test_a_step_line_cut_in_its_momentum_never_reads_the_next_header_as_numbers() -> None:
    """Found by the property test: field excerpt 13's ``step=60`` line cut after ``mom=``, a
    lone ``[``, then the next line's header, joined as a wrapped line, read ``-04`` of the
    date as a momentum of -4.0."""
    from field_logs import lines

    src = lines(13)
    step60 = next(ln for ln in src if "step=60," in ln)
    header = next(ln for ln in src if ln.startswith("[2023-04-18 01:47:43,854]"))[:32]
    cut = step60[: step60.index("mom=") + 4]
    recs = list(LogParser("r", "x.log").feed_lines([cut, "[", header]))
    for rec in recs:
        if isinstance(rec, StepRecord):
            assert all(v >= 0 for group in rec.mom for v in group), rec.mom
