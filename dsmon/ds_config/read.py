"""A run's ds_config as DeepSpeed reads it: which config record to read, its sections, its flags.

A run's output can hold several configs (the user's ds_config.json, a file the collector
was pointed at, DeepSpeed's start-up dump): :func:`preferred_config` is the one choice every
reader makes (pages, the run summary, the health checklist).

A user who writes ``"fp16": {"enabled": "yes"}`` trains in fp16: DeepSpeed does not require a
JSON ``true``. It reads a flag in one of two ways, and dsmon must read it the same way or it
judges a run that is not the one that ran:

- Sections modelled by ``DeepSpeedConfigModel`` (``deepspeed/runtime/config_utils.py``, a
  pydantic ``BaseModel`` in lax mode) coerce the value with pydantic's bool rules: ``true`` /
  ``false``, the integers 0 and 1 (and floats 0.0 / 1.0), and the strings ``1 on t true y
  yes`` / ``0 off f false n no`` in any case. Anything else is a validation error at
  ``deepspeed.initialize``. ZeRO (0.7+), fp16/bf16 (0.17.1+, #6976), the monitors, the comms
  logger and the flops profiler are read this way.
- The older dict-based getters (``get_scalar_param``, e.g. ``get_fp16_enabled`` before 0.17.1,
  ``wall_clock_breakdown``, activation checkpointing) return the value as written, and the
  engine tests it with ``if``: Python truthiness. There ``"false"`` and ``"no"`` are on, since
  every non-empty string is true.

A section is read the way DeepSpeed's getters read it (:func:`section`): ``bfloat16`` is the
old key of ``bf16`` (used when ``bf16`` is absent or null); ``"zero_optimization": true`` is
the deprecated boolean form, stage 1 (``false``: stage 0), with the top-level ``allgather_size``
as its bucket (``get_zero_config``/``read_zero_config_deprecated``); any other section written as
a bare boolean, number or string (``"fp16": true``) is not a dict, and ``deepspeed.initialize``
raises on it (``DeepSpeedFP16Config(**True)``): it reads as unset, and :func:`refused_sections`
names it.

The module depends on the record model only, so that core code (:mod:`dsmon.analysis.peaks`,
:mod:`dsmon.analysis.summary`, :mod:`dsmon.analysis.autotune`) and the health rules can share it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dsmon.model.records import ConfigRecord, Record

#: Strings pydantic's lax bool validator accepts (compared lower-cased).
_TRUE_STRINGS = frozenset({"1", "on", "t", "true", "y", "yes"})
_FALSE_STRINGS = frozenset({"0", "off", "f", "false", "n", "no"})


def pydantic_bool(value: Any) -> bool | None:
    """The bool pydantic makes of a config value; None where it raises a validation error."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return True if value == 1 else False if value == 0 else None
    if isinstance(value, str):
        low = value.lower()
        if low in _TRUE_STRINGS:
            return True
        if low in _FALSE_STRINGS:
            return False
    return None


def ds_bool(value: Any, *, pydantic: bool = True) -> bool | None:
    """A ds_config flag as DeepSpeed reads it.

    Args:
        value: the value as written in the config (None: absent, no default known).
        pydantic: True for a key of a ``DeepSpeedConfigModel`` section, False for one read
            with ``dict.get`` and tested with ``if``.

    Returns:
        The flag, or None when DeepSpeed would refuse the value (pydantic) or it is None.
    """
    if value is None:
        return None
    return pydantic_bool(value) if pydantic else bool(value)


#: Sections DeepSpeed also reads under an older key, in the order it looks them up.
_KEYS = {"bf16": ("bf16", "bfloat16")}
#: Sections whose getter unpacks the value as a dict (``Model(**value)``, ``value.get(...)``),
#: so that a bare boolean, number or string raises in ``deepspeed.initialize``.
_DICT_SECTIONS = (
    "zero_optimization", "fp16", "bf16", "flops_profiler", "tensorboard", "csv_monitor", "wandb",
    "comet",
)  # fmt: skip
_ZERO = "zero_optimization"


def _written(config: Mapping[str, Any], name: str) -> tuple[str, Any]:
    """The key a section is written under and its value: the first key present and not null."""
    keys = _KEYS.get(name, (name,))
    for key in keys:
        if config.get(key) is not None:
            return key, config[key]
    return keys[0], None


def section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The dict DeepSpeed reads a top-level section from; {} when absent or refused.

    ``"zero_optimization": true`` becomes ``{"stage": 1}`` (with ``allgather_bucket_size``
    from the top-level ``allgather_size`` when set) and ``false`` ``{"stage": 0}``, as
    DeepSpeed's ``read_zero_config_deprecated`` builds them.
    """
    value = _written(config, name)[1]
    if name == _ZERO and isinstance(value, bool):
        if not value:
            return {"stage": 0}
        size = config.get("allgather_size")
        return {"stage": 1} if size is None else {"stage": 1, "allgather_bucket_size": size}
    return value if isinstance(value, Mapping) else {}


def refused_sections(config: Mapping[str, Any]) -> list[str]:
    """The keys of sections written as something DeepSpeed cannot read as a dict.

    ``"fp16": true`` or ``"zero_optimization": 2`` raise in ``deepspeed.initialize``; only
    ``zero_optimization`` has a boolean form.
    """
    out = []
    for name in _DICT_SECTIONS:
        key, value = _written(config, name)
        if value is None or isinstance(value, Mapping):
            continue
        if not (name == _ZERO and isinstance(value, bool)):
            out.append(key)
    return out


def as_float(value: Any) -> float | None:
    """A config number as float (JSON ints, floats, numeric strings); None otherwise."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            out = float(value)
        except ValueError:
            return None
        return out if math.isfinite(out) else None
    return None


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage DeepSpeed runs: 0 when unset, ``"auto"`` or not a number."""
    stage = as_float(section(config, _ZERO).get("stage"))
    return int(stage) if stage is not None else 0


def section_enabled(config: Mapping[str, Any], name: str, *, pydantic: bool = True) -> bool:
    """Whether a section's ``enabled`` flag is on, read as DeepSpeed reads it.

    ``section_enabled(cfg, "bf16")`` also reads the legacy ``bfloat16`` key, as DeepSpeed
    does (``bf16`` wins when both are present, even when its flag is off).
    """
    return ds_bool(section(config, name).get("enabled"), pydantic=pydantic) is True


#: The config records a run's settings are read from, in order of preference: the user's keys
#: first, DeepSpeed's dump last (every origin: :data:`dsmon.model.records.CONFIG_ORIGINS`).
PREFERRED_ORIGINS = ("user_json", "engine", "file", "effective")


def preferred_config(configs: Sequence[Record]) -> ConfigRecord | None:
    """The config record to read settings from: the user's JSON, else a file, else the dump.

    A partial record (a dump cut short) is never chosen: a key it lacks would read as unset.
    """
    found = [c for c in configs if isinstance(c, ConfigRecord) and not c.partial]
    for origin in PREFERRED_ORIGINS:
        match = [c for c in found if c.origin == origin]
        if match:
            return match[-1]
    return None
