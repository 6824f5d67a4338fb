"""Autotuner output pasted by users (field corpus 11, 12, 31, 32, 37).

Each excerpt goes through ``dsmon parse``; the expected values are read off the excerpt by hand.
"""

from __future__ import annotations

from field_corpus import dsmon_parse

from dsmon.model.records import AutotuneExperimentRecord, AutotuneSummaryRecord, EventRecord


def rows(
    records: list[AutotuneSummaryRecord],
) -> list[tuple[str, int | None, float | None, str | None]]:
    return [
        (r.tuning_space, r.num_experiments, r.best_metric_val, r.best_exp_name) for r in records
    ]


def stages(events: list[EventRecord]) -> list[str]:
    return [e.detail["stage"] for e in events if e.name == "autotuning"]


def test_11_readme_table_with_num_exps_and_bare_completion_line() -> None:
    parsed = dsmon_parse(11)
    table = parsed.of(AutotuneSummaryRecord)
    assert rows(table) == [
        ("z0", 2, 90.1269, "z0_tmbspg2_gas1"),
        ("z1", 2, 187.298, "z1_tmbspg3_gas1"),
        ("z2", 2, 148.154, "z2_tmbspg3_gas1"),
        ("global", 6, 187.298, "z1_tmbspg3_gas1"),
    ]
    assert [r.src.line for r in table] == [3, 4, 5, 6]
    # "Tuning completed in 0:00:03.602291": no experiment count in this version
    assert {(r.tuning_duration_s, r.total_experiments) for r in table} == {(3.602291, None)}
    (done,) = parsed.of(EventRecord)
    assert done.detail == {"stage": "completed", "duration_s": 3.602291, "total_experiments": None}
    assert done.src.line == 8


def test_12_all_stages_and_the_experiment_count() -> None:
    parsed = dsmon_parse(12)
    table = parsed.of(AutotuneSummaryRecord)
    assert rows(table) == [
        ("z0", 9, 2930.18, "z0_gas1_tmbspg235"),
        ("z1", 7, 2930.17, "z1_gas1_tmbspg235"),
        ("z2", 8, 2744.16, "z2_gas1_tmbspg235"),
        ("z3", 10, 2479.47, "z3_gas1_tmbspg238"),
        ("global", 34, 2930.18, "z0_gas1_tmbspg235"),
    ]
    # "Tuning completed in 0:34:41.842250. Total number of experiments: 34."
    assert {(r.tuning_duration_s, r.total_experiments) for r in table} == {(34 * 60 + 41.84225, 34)}
    assert stages(parsed.of(EventRecord)) == ["completed"]
    assert "0 unparsed lines" in parsed.report


def test_31_startup_resources_and_model_profile_run() -> None:
    parsed = dsmon_parse(31)
    events = parsed.of(EventRecord)
    assert stages(events) == ["resources", "start", "model_info_profile"]
    resources, start, profile = events
    # "active_resources = OrderedDict([('localhost', [0, 1, 2, 3])])"
    assert resources.detail["resources"] == {"localhost": [0, 1, 2, 3]}
    assert resources.ts == "2021-12-09T23:09:43.021"
    assert start.message == "[Start] Running autotuning"
    assert profile.message == "Starting model info profile run."
    assert parsed.of(AutotuneSummaryRecord) == []


def test_32_tune_transcript_with_shell_prompt() -> None:
    parsed = dsmon_parse(32)
    (created,) = [e for e in parsed.of(EventRecord) if e.name == "autotuning"]
    # "Created autotuning experiments directory: autotuning_exps"
    assert created.detail == {
        "stage": "directory",
        "which": "experiments",
        "path": "autotuning_exps",
    }
    assert created.ts == "2025-05-03T09:41:20.467"
    assert created.src.line == 9
    assert "0 unparsed lines" in parsed.report


def test_37_metrics_json_with_the_microsecond_bug() -> None:
    rec = dsmon_parse(37).one(AutotuneExperimentRecord)
    # the engine wrote microseconds under the pre-v0.10.1 names: "forward": 1314155.8837890625
    assert rec.fwd_ms == 1314.1558837890625
    assert rec.bwd_ms == 3941.037841796875
    assert rec.step_ms == 4.5371198654174805
    assert rec.latency_ms == 5259.730845451355
    assert rec.flops_per_s_per_gpu == 70800994.509407  # as printed: the value the PR says is off
    assert rec.throughput_samples_per_s == 0.013308665796185445
    assert rec.name == "37_autotuner_2023_exp_metrics_json_flops_per_gpu_bug"  # saved as a .log
