"""One ds_config reader (dsmon.ds_config.read): the checklist, the summary, the peak table and the
autotuner table read a config's sections alike, as DeepSpeed reads them.

DeepSpeed's expected values (deepspeed/runtime/zero/config.py and precision_config.py):
``get_zero_config`` reads ``"zero_optimization": true`` as stage 1 and ``false`` as stage 0
(``read_zero_config_deprecated``, with the top-level ``allgather_size`` as the bucket size);
``get_float16_config`` and ``get_bfloat16_config`` unpack the section (``DeepSpeedFP16Config(**v)``),
so ``"fp16": true`` raises in ``deepspeed.initialize``: nothing trains in fp16 with it. ``bf16``
wins over the old ``bfloat16`` key unless it is absent or null.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from field_logs import FIELD, needs_field_corpus, parse_field
from health_support import DATA, check, config_inputs, corpus_dir, corpus_runs

from dsmon.analysis.autotune import experiments_table
from dsmon.analysis.peaks import training_dtype
from dsmon.analysis.summary import config_highlights
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import refused_sections, section, section_enabled
from dsmon.health import Status
from dsmon.model.records import AutotuneExperimentRecord, ConfigRecord, Source

#: Corpus run -> (ZeRO stage, precision), read by hand from each run's ds_config.json.
CORPUS_SETTINGS = {
    "act_ckpt": (1, "fp32"),
    "bf16_zero0": (0, "bf16"),
    "comms_logger": (2, "fp32"),
    "comms_logger_verbose": (1, "fp32"),
    "crash_rank1_step17": (2, "fp32"),
    "crash_step17": (2, "fp32"),
    "csv_tensorboard": (1, "fp16"),
    "flops_detailed_file": (2, "fp32"),
    "flops_detailed_stdout": (0, "fp32"),
    "fp16_zero0": (0, "fp16"),
    "fp16_zero2": (2, "fp16"),
    "fp16_zero3": (3, "fp16"),
    "grad_accum": (2, "fp32"),
    "jit_fresh_cache": (0, "fp32"),
    "memory_breakdown": (2, "fp32"),
    "pipeline_wallclock_crash": (0, "fp32"),  # no zero_optimization section: stage 0
    "sigkill_all": (2, "fp32"),
    "torchrun": (2, "fp32"),
    "warmup_lr": (2, "fp32"),
    "z0": (0, "fp32"),
    "z0_default_loglevel": (0, "fp32"),
    "z1": (1, "fp32"),
    "z2": (2, "fp32"),
    "z2_offload_optimizer": (2, "fp32"),
    "z3": (3, "fp32"),
    "z3_overlap_false": (3, "fp32"),
    "z3_overlap_true": (3, "fp32"),
}


def readings(raw: dict[str, Any]) -> dict[str, tuple[int | None, str | None]]:
    """(ZeRO stage, precision) as each part of dsmon reads the config; None: does not say."""
    cfg = ConfigView(raw)
    mode = "bf16" if cfg.enabled("bf16") else "fp16" if cfg.enabled("fp16") else "fp32"
    summary = config_highlights(raw)
    exp = AutotuneExperimentRecord(src=Source(run="r"), name="exp", ds_config=raw)
    autotune_stage = experiments_table([exp])["zero_stage"][0]
    return {
        "checklist": (cfg.stage, mode),
        "summary": (int(summary.get("zero_stage", 0)), summary["precision"]),
        "peaks": (None, training_dtype(raw)),
        "autotune": (None if autotune_stage is None else int(autotune_stage), None),
    }


def agree(raw: dict[str, Any], stage: int, precision: str) -> None:
    """Every reader says ``stage`` and ``precision`` where it reads them."""
    for reader, (got_stage, got_precision) in readings(raw).items():
        if got_stage is not None:
            assert got_stage == stage, reader
        if got_precision is not None:
            assert got_precision == precision, reader


def test_the_table_covers_every_corpus_config() -> None:
    assert set(CORPUS_SETTINGS) == corpus_runs()


@pytest.mark.parametrize("run", sorted(CORPUS_SETTINGS))
def test_corpus_configs_read_alike(run: str) -> None:
    raw = json.loads((corpus_dir(run) / "ds_config.json").read_text(encoding="utf-8"))
    agree(raw, *CORPUS_SETTINGS[run])
    assert refused_sections(raw) == []
    if run == "pipeline_wallclock_crash":
        assert readings(raw)["autotune"] == (None, None)  # no stage in the config: none claimed


@pytest.mark.parametrize(
    "path", sorted(DATA.rglob("ds_config.json")), ids=lambda p: str(p.relative_to(DATA))
)
def test_every_test_data_config_reads_alike(path: Path) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    stage, precision = readings(raw)["checklist"]
    agree(raw, stage, precision or "fp32")


@needs_field_corpus
@pytest.mark.parametrize(
    ("number", "stage", "precision"),
    [
        (8, 0, "fp32"),  # 2020 json: optimizer, scheduler, no ZeRO or fp16 section
        (15, 0, "fp16"),  # DS-Chat json: "zero_optimization": {"stage": 0, ...}, fp16 enabled
    ],
)
def test_field_configs_read_alike(number: int, stage: int, precision: str) -> None:
    assert FIELD.is_dir()
    records, _ = parse_field(number)
    users = [r for r in records if isinstance(r, ConfigRecord) and r.origin == "user_json"]
    assert users
    agree(dict(users[-1].config), stage, precision)


@pytest.mark.parametrize(
    ("zero", "stage"), [(True, 1), (False, 0), ({"stage": 2}, 2), ({"stage": "3"}, 3)]
)
def test_zero_optimization_boolean_form_is_read_alike(zero: object, stage: int) -> None:
    raw = {"train_batch_size": 8, "zero_optimization": zero}
    agree(raw, stage, "fp32")
    assert refused_sections(raw) == []


def test_zero_true_takes_the_top_level_allgather_size() -> None:
    raw = {"zero_optimization": True, "allgather_size": 200_000_000}
    assert section(raw, "zero_optimization") == {
        "stage": 1,
        "allgather_bucket_size": 200_000_000,
    }
    got = ConfigView(raw).get("zero_optimization.allgather_bucket_size")
    assert (got.value, got.explicit) == (200_000_000, True)
    assert section({"zero_optimization": True}, "zero_optimization") == {"stage": 1}


@pytest.mark.parametrize(
    ("raw", "refused"),
    [
        ({"fp16": True}, ["fp16"]),
        ({"fp16": "yes"}, ["fp16"]),
        ({"bf16": 1}, ["bf16"]),
        ({"bfloat16": True}, ["bfloat16"]),
        ({"zero_optimization": 2}, ["zero_optimization"]),
        ({"zero_optimization": "3"}, ["zero_optimization"]),
        ({"flops_profiler": True}, ["flops_profiler"]),
    ],
)
def test_a_section_given_as_a_bare_value_is_refused_and_reads_unset(
    raw: dict[str, Any], refused: list[str]
) -> None:
    agree(raw, 0, "fp32")
    assert refused_sections(raw) == refused
    hard = check(config_inputs(ConfigView(raw)), "schema.hard_checks")
    assert hard.status is Status.FAIL
    assert hard.summary == (
        f"{refused[0]} must be a JSON object: deepspeed.initialize raises on a bare value"
    )


def test_bf16_wins_over_bfloat16_unless_null() -> None:
    assert section_enabled({"bf16": {"enabled": "yes"}}, "bf16")
    assert section_enabled({"bfloat16": {"enabled": "on"}}, "bf16")
    assert not section_enabled({"bf16": {"enabled": "no"}, "bfloat16": {"enabled": True}}, "bf16")
    both = {"bf16": None, "bfloat16": {"enabled": True}}
    agree(both, 0, "bf16")
    # a bare bf16 is what DeepSpeed unpacks (and raises on), not the old key behind it
    bare = {"bf16": True, "bfloat16": {"enabled": True}}
    agree(bare, 0, "fp32")
    assert refused_sections(bare) == ["bf16"]
