"""Step and ThroughputTimer lines of every generation, behind launcher prefixes and in pastes.
Expected values are read off the excerpts by hand (../shared/corpus/field, excerpts 09, 13,
21, 22, 23)."""

from __future__ import annotations

from field_logs import lines, of, parse_field

from dsmon.model.records import IterationRecord, LossScaleRecord, StepRecord, ThroughputRecord
from dsmon.parse.log import parse_text

GIB = 1 << 30


def test_09_2020_samplespersec_behind_pdsh_and_the_2020_logger() -> None:
    recs, diag = parse_field(9)
    assert sum(diag.unparsed.values()) == 0
    tput = of(recs, ThroughputRecord)
    assert len(tput) == 13  # 3 before the "......" gap, 10 after it
    assert [t.micro_step for t in tput[:3]] == [50, 100, 150]
    assert [t.micro_step for t in tput[3:]] == list(range(24550, 25001, 50))
    first = tput[0]
    assert first.src.node == "worker-0" and first.epoch == 0
    assert first.ts == "2020-02-06T19:53:56.000"  # "[INFO 2020-02-06 19:53:56]"
    assert first.running_avg_samples_per_s == 1292.6411179579866
    assert tput[-1].running_avg_samples_per_s == 1284.5698818883018
    assert tput[-1].ts == "2020-02-06T20:35:24.000"
    assert of(recs, StepRecord) == []  # "[2, 12000] loss: 1.247" is the example's own print


def test_13_dschat_step_and_runningavg_after_overflows() -> None:
    recs, diag = parse_field(13)
    assert sum(diag.unparsed.values()) == 0
    steps = of(recs, StepRecord)
    assert [s.step for s in steps] == list(range(10, 101, 10))
    assert all(s.skipped == 6 for s in steps)
    assert steps[0].lr == (9.649992967150629e-06, 9.649992967150629e-06)
    assert steps[0].mom == ((0.9, 0.95), (0.9, 0.95))
    tput = of(recs, ThroughputRecord)
    assert [t.global_step for t in tput] == list(range(10, 91, 10))
    first = tput[0]
    assert (first.epoch, first.micro_step, first.step) == (0, 10, 10)
    assert first.running_avg_samples_per_s == 173.4455644119137
    assert first.samples_per_s == 171.97903593624417
    assert first.mem_allocated_bytes == round(3.96 * GIB)
    assert first.max_mem_allocated_bytes == round(22.95 * GIB)
    scale = of(recs, LossScaleRecord)
    assert [r.event for r in scale] == ["hysteresis"] + ["overflow"] * 5
    assert [r.new_scale for r in scale[1:]] == [32768, 16384, 8192, 4096, 2048]


def test_21_ds077_form_behind_stdout_prefix() -> None:
    recs, diag = parse_field(21)
    assert sum(diag.unparsed.values()) == 0
    tput = of(recs, ThroughputRecord)
    assert [t.micro_step for t in tput] == [17, 18, 19, 20, 21, 22]
    first = tput[0]
    assert first.src.node is None  # "stdout: " is a stream, not a host
    assert first.ts == "2022-12-20T08:26:26.101"
    assert first.running_avg_samples_per_s == 158.31157878546472
    assert first.samples_per_s == 159.628891629629
    assert first.mem_allocated_bytes == round(1.75 * GIB)
    assert first.max_mem_allocated_bytes == round(2.6 * GIB)
    assert tput[-1].max_mem_allocated_bytes == round(2.62 * GIB)


def test_22_two_runs_pasted_as_inline_code() -> None:
    recs, diag = parse_field(22)
    assert sum(diag.unparsed.values()) == 0  # the cut "[2023-04-" last line is nobody's
    steps = of(recs, StepRecord)
    assert [(s.step, s.skipped) for s in steps] == [(13120, 223), (19180, 346)]
    assert steps[1].lr == (1.6947090538430577e-08,)
    tput = of(recs, ThroughputRecord)
    assert [(t.epoch, t.micro_step, t.global_step) for t in tput] == [
        (0, 52480, 13120),
        (1, 38352, 19180),
    ]
    assert tput[0].samples_per_s == 4.584817867742811
    assert tput[1].mem_allocated_bytes == round(61.66 * GIB)
    assert tput[1].max_mem_allocated_bytes == round(67.26 * GIB)


def test_23_npu_pipeline_steps_line_indented() -> None:
    recs, diag = parse_field(23)
    assert sum(diag.unparsed.values()) == 0
    steps = of(recs, StepRecord)
    assert [s.step for s in steps] == [110, 120, 130, 140, 150, 160]
    assert steps[0].mom == ((0.9, 0.999),) and steps[0].lr == (0.001,)  # "mom=[[0.9, 0.999]]"
    assert steps[0].ts == "2025-07-03T08:57:56.267"  # the indentation is taken off
    its = of(recs, IterationRecord)
    assert [i.fmt for i in its] == ["pipeline"] * 6
    assert [i.iteration for i in its] == [110, 120, 130, 140, 150, 160]
    assert [i.loss for i in its] == [1.9161, 1.7843, 1.7831, 1.6887, 1.7994, 1.7061]
    assert its[0].elapsed_ms == 580.0  # "iter time (s): 0.580"
    assert its[0].samples_per_s == 441.545


def test_22_as_the_issue_shows_it_inside_inline_code_spans() -> None:
    """The excerpt keeps only the spans' content; in the issue each span opens with a backtick
    before its first line and closes with one after its last."""
    first, second = lines(22)[0:2], lines(22)[2:4]
    text = "\n".join(["`" + first[0], first[1] + "`", "`" + second[0], second[1] + "`"])
    recs, diag = parse_text(text)
    assert sum(diag.unparsed.values()) == 0
    assert [s.step for s in of(recs, StepRecord)] == [13120, 19180]
    tput = of(recs, ThroughputRecord)
    assert [t.max_mem_allocated_bytes for t in tput] == [round(36.97 * GIB), round(67.26 * GIB)]
