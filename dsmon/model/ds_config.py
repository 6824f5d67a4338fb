"""A run's ds_config as DeepSpeed reads it: which config record to read, and its booleans.

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

The module depends on the record model only, so that core code (:mod:`dsmon.analysis.peaks`, :mod:`dsmon.analysis.summary`)
and the health rules can share it.
"""

from __future__ import annotations

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


def section_enabled(config: Mapping[str, Any], *sections: str, pydantic: bool = True) -> bool:
    """Whether the first of ``sections`` present in a ds_config dict has ``enabled`` on.

    ``section_enabled(cfg, "bf16", "bfloat16")`` reads bf16 under its current or legacy key,
    as DeepSpeed does (the first key present wins, even when its flag is off).
    """
    for name in sections:
        section = config.get(name)
        if isinstance(section, Mapping):
            return ds_bool(section.get("enabled"), pydantic=pydantic) is True
    return False


#: Config origins in order of preference: the user's keys first, DeepSpeed's dump last.
CONFIG_ORIGINS = ("user_json", "file", "effective")


def preferred_config(configs: Sequence[Record]) -> ConfigRecord | None:
    """The config record to read settings from: the user's JSON, else a file, else the dump.

    A partial record (a dump cut short) is never chosen: a key it lacks would read as unset.
    """
    found = [c for c in configs if isinstance(c, ConfigRecord) and not c.partial]
    for origin in CONFIG_ORIGINS:
        match = [c for c in found if c.origin == origin]
        if match:
            return match[-1]
    return None
