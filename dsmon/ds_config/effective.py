"""A ds_config as DeepSpeed would read it: explicit values, or the default of that version.

Rules must tell "you set overlap_comm to false" from "you left it out and stage 2 defaults to
false", and must follow DeepSpeed's own quirks: ZeRO keys accepted under both their
``stage3_`` alias and field name, ``"auto"`` (the HF Trainer placeholder) meaning the default,
``bfloat16`` as the old spelling of ``bf16``, and ``"zero_optimization": true`` as the
deprecated boolean form. :class:`ConfigView` does that once, so each rule reads one
:class:`Setting` and can cite where its value came from; the sections themselves are read by
:mod:`dsmon.ds_config.read`, the reader the summary, the peak table and the pages share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dsmon.ds_config import schema
from dsmon.ds_config.names import INVENTED
from dsmon.ds_config.read import as_float, ds_bool, zero_stage
from dsmon.ds_config.read import section as ds_section
from dsmon.ds_config.schema import Version
from dsmon.parse.side_files import FileFormatError, load_config_text

_MISSING = object()


#: Where a value came from when the config file said ``"auto"`` and the engine's config (read
#: by dsmon run's probe) holds what the Hugging Face Trainer or Accelerate put there.
FILLED = '"auto" in the config file, filled in by the Trainer'


@dataclass(frozen=True, slots=True)
class Setting:
    """One config value and whether the user set it (``explicit``) or DeepSpeed defaults it.

    ``filled``: the user's file said ``"auto"``; the value is what the engine was given.
    """

    path: str
    value: Any
    explicit: bool
    filled: bool = False

    @property
    def origin(self) -> str:
        """Where the value came from, as evidence cites it: set, default, or filled in."""
        return FILLED if self.filled else ("set" if self.explicit else "default")


class ConfigView:
    """Read access to one ds_config dict with DeepSpeed's defaults filled in.

    Args:
        raw: the ds_config dict (a file, or the ``json = {...}`` block of a log's dump).
        origin: ``file``, ``user_json``, ``engine`` or ``effective`` (records.CONFIG_ORIGINS; the
            autotuner's ``autotune_optimal`` advice never becomes a ConfigView).
        source: where it was read from, for messages (a file name).
        version: the DeepSpeed version the defaults are taken from (None: the newest known).
        filled: dotted paths the user's file left ``"auto"`` that ``raw`` holds a value for.
    """

    def __init__(
        self,
        raw: Mapping[str, Any],
        *,
        origin: str = "file",
        source: str | None = None,
        version: Version | None = None,
        filled: frozenset[str] = frozenset(),
    ) -> None:
        self.raw = raw
        self.origin = origin
        self.source = source
        self.version = version
        self.filled = filled

    def section(self, path: str) -> Mapping[str, Any]:
        """The dict at a dotted section path; {} when absent or not a dict.

        The top-level section is read as DeepSpeed reads it (:func:`dsmon.ds_config.read.section`:
        ``bfloat16`` for ``bf16``, ``"zero_optimization": true`` as stage 1).
        """
        top, *rest = path.split(".")
        node: Any = ds_section(self.raw, top)
        for part in rest:
            node = node.get(part)
            if not isinstance(node, Mapping):
                return {}
        return node

    def has(self, path: str) -> bool:
        """Whether the user's config names this path (section or key) at all."""
        section, _, key = path.rpartition(".")
        holder = self.section(section) if section else self.raw
        return _explicit(holder, section, key, self.version) is not _MISSING

    def get(self, path: str) -> Setting:
        """The value DeepSpeed uses for ``path``: the user's, or the default of the version."""
        section, _, key = path.rpartition(".")
        holder = self.section(section) if section else self.raw
        value = _explicit(holder, section, key, self.version)
        if value is _MISSING or value == "auto":
            return Setting(path, schema.default_for(path, self.version, self.stage), False)
        return Setting(path, value, True, path in self.filled)

    def number(self, path: str) -> float | None:
        """``get(path)`` as a float; None when unset without a default or not a number."""
        return as_float(self.get(path).value)

    @property
    def stage(self) -> int:
        """The ZeRO stage; the deprecated boolean form means stage 1 (true) or 0 (false)."""
        return zero_stage(self.raw)

    def flag(self, path: str) -> bool | None:
        """A boolean setting as DeepSpeed reads it: ``"yes"`` is on (:mod:`dsmon.ds_config.read`).

        Keys of a section DeepSpeed models with pydantic (in this version) are coerced the
        pydantic way; top-level keys and dict-based sections by truthiness. None when the
        value is one DeepSpeed refuses, or unset without a default.
        """
        spec = schema.section(path.rpartition(".")[0], self.version)
        return ds_bool(self.get(path).value, pydantic=spec is not None and spec.pydantic)

    def enabled(self, section: str) -> bool:
        """Whether a section with an ``enabled`` flag (fp16, bf16, flops_profiler...) is on."""
        return self.flag(f"{section}.enabled") is True

    @property
    def offload_optimizer_device(self) -> str | None:
        """``cpu``/``nvme`` when the optimizer state is offloaded, else None."""
        device = self.section("zero_optimization.offload_optimizer").get("device")
        if isinstance(device, str) and device.lower() in {"cpu", "nvme"}:
            return device.lower()
        if self.flag("zero_optimization.cpu_offload") is True:
            return "cpu"  # deprecated spelling, mapped to offload_optimizer by DeepSpeed
        return None


def auto_paths(config: Mapping[str, Any], prefix: str = "") -> frozenset[str]:
    """The dotted paths whose value is ``"auto"`` (the Hugging Face Trainer's placeholder)."""
    found: set[str] = set()
    for key, value in config.items():
        path = f"{prefix}{key}"
        if value == "auto":
            found.add(path)
        elif isinstance(value, Mapping):
            found |= auto_paths(value, f"{path}.")
    return frozenset(found)


def _explicit(holder: Mapping[str, Any], section: str, key: str, version: Version | None) -> Any:
    """The user's value for ``key`` in ``holder``, under either spelling; _MISSING if none."""
    if key in holder:
        return holder[key]
    spec = schema.section(section, version) if section else None
    if spec is None:
        return _MISSING
    field_name = spec.aliases.get(key)
    if field_name is not None and field_name in holder:
        return holder[field_name]
    for alias, name in spec.aliases.items():
        if name == key and alias in holder:
            return holder[alias]
    return _MISSING


#: Effective-dump attributes that are ds_config sections under another name.
_EFFECTIVE_SECTIONS = {
    "zero_config": "zero_optimization",
    "float16_config": "fp16",
    "bfloat16_config": "bf16",
    "flops_profiler_config": "flops_profiler",
    "compile_config": "compile",
}
#: Effective-dump attributes that are top-level ds_config keys of the same name.
_EFFECTIVE_SCALARS = (
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "steps_per_print", "wall_clock_breakdown", "memory_breakdown", "gradient_clipping",
    "log_level", "prescale_gradients", "gradient_allreduce_op", "communication_data_type",
    "dump_state", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer",
)  # fmt: skip


def ds_config_from_effective(effective: Mapping[str, Any]) -> dict[str, Any]:
    """The ds_config an effective config dump stands for, for rules that read settings.

    The dump lists every attribute with its resolved value, under attribute names
    (``zero_config``, ``float16_config``...). Sections are renamed to their ds_config keys;
    activation checkpointing is kept only when a value differs from its defaults, since the
    dump prints that section whether or not the user configured it.
    """
    out: dict[str, Any] = {k: effective[k] for k in _EFFECTIVE_SCALARS if k in effective}
    for attr, key in _EFFECTIVE_SECTIONS.items():
        if isinstance(effective.get(attr), Mapping):
            out[key] = dict(effective[attr])
    if effective.get("optimizer_name"):
        out["optimizer"] = {
            "type": effective["optimizer_name"],
            "params": effective.get("optimizer_params") or {},
        }
    if effective.get("scheduler_name"):
        out["scheduler"] = {
            "type": effective["scheduler_name"],
            "params": effective.get("scheduler_params") or {},
        }
    act = effective.get("activation_checkpointing_config")
    spec = schema.section("activation_checkpointing", None)
    defaults = spec.keys if spec is not None else {}
    if isinstance(act, Mapping) and any(act.get(k, v) != v for k, v in defaults.items()):
        out["activation_checkpointing"] = dict(act)
    return out


class ConfigFileError(ValueError):
    """A file that is not a usable ds_config; the message names the position or the reason."""


def config_from_text(text: str, source: str) -> ConfigView:
    """A ds_config file's text as DeepSpeed would load it (JSON, else HJSON).

    Raises:
        ConfigFileError: an empty file, not JSON/HJSON (with line and column), a duplicated
            key, not an object, or an object with no DeepSpeed key at all (not a ds_config).
    """
    if not text.strip():
        raise ConfigFileError("empty file: nothing to check")
    try:
        raw = load_config_text(text, source)
    except FileFormatError as exc:
        where = f"{source}:{exc.line}: " if exc.line is not None else f"{source}: "
        detail = f"line {exc.line}: " if exc.line is not None else ""
        raise ConfigFileError(_position(text) or detail + str(exc).removeprefix(where)) from None
    names = schema.ever_top_level() | set(INVENTED)
    if raw and not names & set(raw):
        keys = ", ".join(list(map(str, raw))[:5])
        raise ConfigFileError(
            f"not a DeepSpeed config: none of its keys ({keys}) is a DeepSpeed option"
        )
    return ConfigView(raw, origin="file", source=source)


def _position(text: str) -> str | None:
    """``line L column C: reason`` of strict JSON's first error, when JSON is the problem."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return f"line {exc.lineno} column {exc.colno}: not JSON: {exc.msg}"
    return None
