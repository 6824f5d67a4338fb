"""ds_config booleans read the way DeepSpeed reads them (dsmon.ds_config.read), everywhere in dsmon.

Expected values are DeepSpeed's: pydantic's lax bool coercion for DeepSpeedConfigModel
sections (deepspeed/runtime/config_utils.py; pydantic documents the accepted strings 0/off/f/
false/n/no and 1/on/t/true/y/yes, any case, and the numbers 0 and 1), and plain ``if value:``
for values the old dict getters return (get_scalar_param, e.g. get_fp16_enabled < 0.17.1).
"""

from __future__ import annotations

from typing import Any

import pytest
from health_support import check, config_inputs

from dsmon.analysis.peaks import training_dtype
from dsmon.analysis.summary import config_highlights
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import ds_bool, section_enabled
from dsmon.health import Status


@pytest.mark.parametrize(
    ("value", "pydantic", "truthy"),
    [
        (True, True, True),
        (False, False, False),
        ("yes", True, True),
        ("YES", True, True),
        ("on", True, True),
        ("t", True, True),
        ("1", True, True),
        ("True", True, True),
        ("no", False, True),  # a non-empty string: on for an ``if``
        ("false", False, True),
        ("Off", False, True),
        ("0", False, True),
        (1, True, True),
        (0, False, False),
        (1.0, True, True),
        (2, None, True),  # pydantic refuses: deepspeed.initialize fails
        ("maybe", None, True),
        ("", None, False),
        ([], None, False),
    ],
)
def test_ds_bool(value: Any, pydantic: bool | None, truthy: bool) -> None:
    assert ds_bool(value) is pydantic
    assert ds_bool(value, pydantic=False) is truthy


def test_section_enabled_reads_the_flag_of_a_section() -> None:
    assert section_enabled({"fp16": {"enabled": "on"}}, "fp16")
    assert not section_enabled({"fp16": {}}, "fp16")
    assert not section_enabled({"fp16": "yes"}, "fp16")  # not a section


def test_fp16_enabled_yes_is_fp16_everywhere() -> None:
    raw = {
        "train_batch_size": 8,
        "zero_optimization": {"stage": 2, "overlap_comm": "on"},
        "fp16": {"enabled": "yes", "loss_scale_window": 5},
    }
    cfg = ConfigView(raw)
    assert cfg.enabled("fp16") and not cfg.enabled("bf16")
    scaler = check(config_inputs(cfg), "fp16.loss_scaler")  # was "not applicable: fp16 is off"
    assert scaler.status is Status.WARN
    assert scaler.summary.startswith("loss_scale_window 5 < 100")
    bf16 = check(config_inputs(cfg, gpu_names=("NVIDIA A100-SXM4-80GB",)), "precision.bf16")
    assert (bf16.status, bf16.summary) == (
        Status.WARN,
        "fp16 on GPUs with native bf16: switch to bf16",
    )
    overlap = check(config_inputs(cfg), "zero.overlap_comm")
    assert (overlap.status, overlap.summary) == (Status.PASS, "overlap_comm is on")
    assert training_dtype(raw) == "fp16"
    assert config_highlights(raw)["precision"] == "fp16"
    both = ConfigView({**raw, "bf16": {"enabled": "true"}})
    hard = check(config_inputs(both), "schema.hard_checks")
    assert hard.status is Status.FAIL
    assert "fp16 and bf16 cannot both be enabled" in hard.summary


def test_old_dict_getters_use_truthiness() -> None:
    # Before 0.17.1 fp16 was read with get_fp16_enabled (dict.get): "false" is a true string.
    old = ConfigView({"fp16": {"enabled": "false"}}, version=(0, 16, 9))
    assert old.enabled("fp16")
    new = ConfigView({"fp16": {"enabled": "false"}}, version=(0, 19, 8))
    assert not new.enabled("fp16")
    # wall_clock_breakdown is a top-level get_scalar_param: any non-empty string is on.
    wcb = check(
        config_inputs(ConfigView({"wall_clock_breakdown": "no"})), "observe.wall_clock_breakdown"
    )
    assert wcb.status is Status.PASS
