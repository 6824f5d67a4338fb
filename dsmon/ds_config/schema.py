"""DeepSpeed's ds_config schema for one version: keys per section, strict or lenient, defaults.

A misspelled key costs a user either a crash at ``deepspeed.initialize`` or, worse, nothing at
all: DeepSpeed reads the top level and the older sections with ``dict.get`` and never looks at
leftover keys, while its pydantic sections (``extra="forbid"``) reject them. Which of the two
happens, which keys exist and what they default to all depend on the release, so this module
answers per version from :mod:`dsmon.ds_config.releases` (the data generated from every
release's source). What is policy rather than DeepSpeed's source stays here: the sections whose
inner keys dsmon does not check (:data:`OPAQUE`), ``overlap_comm``'s stage-dependent default, and
the workers' default log level.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from dsmon.ds_config.releases import knowledge

Version = tuple[int, int, int]

#: The newest DeepSpeed whose schema dsmon knows (the newest release in the generated data).
LATEST_KNOWN: Version = knowledge().newest


#: DeepSpeed before its first public release (0.1.0, 2020): the builds of early 2020 print
#: ``DeepSpeed info: version=2.1`` (two numbers, the "DeepSpeedLight" engine). Every release
#: since prints three numbers and is still 0.x, so that 2.1 is older than all of them.
PRE_RELEASE: Version = (0, 0, 0)


def parse_version(text: str | None) -> Version | None:
    """``"0.19.8"`` / ``"0.10.1+abc"`` -> (0, 19, 8); None for anything else.

    A two-number version above 1 (``"2.1"``) is the early-2020 build, :data:`PRE_RELEASE`:
    read as 2.1.0 it would be judged newer than every release.
    """
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    if m[3] is None and int(m[1]) >= 1:
        return PRE_RELEASE
    return int(m[1]), int(m[2]), int(m[3] or 0)


def version_text(v: Version | None) -> str:
    """How evidence names a version; None is judged as the newest known one."""
    if v == PRE_RELEASE:
        return "before 0.1 (an early-2020 build)"
    return ".".join(map(str, v)) if v else f"unknown (judged as {version_text(LATEST_KNOWN)})"


@dataclass(frozen=True, slots=True)
class Section:
    """One config section as one release reads it: its keys with defaults, how it is read.

    ``pydantic``: the release models it with pydantic, so values are coerced the pydantic way;
    ``strict``: its model forbids extra keys (an unknown key makes ``deepspeed.initialize``
    fail), else an unknown key is silently ignored. ``aliases`` maps accepted alternative
    spellings to the field name (``populate_by_name``).
    """

    path: str
    keys: Mapping[str, Any]
    pydantic: bool = False
    strict: bool = False
    aliases: Mapping[str, str] = field(default_factory=dict)

    def known(self) -> set[str]:
        """Every accepted spelling of every key."""
        return set(self.keys) | set(self.aliases)


#: Top-level sections whose inner keys dsmon does not check: free-form, or read in ways too
#: varied to list (their existence per release is still checked).
_FREE_FORM_SECTIONS = (
    "amp",
    "torch_autocast",
    "eigenvalue",
    "progressive_layer_drop",
    "sparse_attention",
    "elasticity",
    "compression_training",
    "data_efficiency",
    "curriculum_learning",
    "expert_parallel",
    "datastates_ckpt",
    "quantize_training",
    "nebula",
)

#: Sections whose inner keys dsmon does not check (their schemas are large or free-form).
OPAQUE = frozenset(
    {
        "optimizer.params",
        "scheduler.params",
        *_FREE_FORM_SECTIONS,
        "autotuning.arg_mappings",
        "autotuning.model_info",
        "zero_optimization.leaf_module.classes",
        "zero_optimization.zeropp_loco_param",
        "checkpoint.parallel_write",
        "checkpoint.writer",
        "tensor_parallel.tensor_parallel",
        "weight_quantization.quantized_initialization",
        "weight_quantization.post_init_quant",
        "comet",
        "wandb",
    }
)

#: The workers' logger level by default: INFO up to 0.17.5, WARNING from 0.17.6 (#7526). Not a
#: config key (``utils/logging.py``), so not in the generated data.
LOGGER_DEFAULT_LEVEL: tuple[tuple[Version, str], ...] = (
    ((0, 0, 0), "info"),
    ((0, 17, 6), "warning"),
)


def by_version(table: tuple[tuple[Version, Any], ...], version: Version | None) -> Any:
    """The entry of a versioned table in force for ``version`` (None: the newest)."""
    v = version or LATEST_KNOWN
    value = table[0][1]
    for since, val in table:
        if v >= since:
            value = val
    return value


def judged_as(version: Version | None) -> Version:
    """The known release a version is judged as (None: the newest known)."""
    return knowledge().judged_as(version)


def section(path: str, version: Version | None) -> Section | None:
    """A section as the release reads it; None when the release reads no such section.

    ``bfloat16`` (the old spelling) is read as ``bf16`` where the release has ``bf16``.
    """
    index = knowledge().at(version)
    if path == "bfloat16" and knowledge().exists("bf16", knowledge().releases[index]):
        path = "bf16"
    return _section(path, index)


@cache
def _section(path: str, index: int) -> Section | None:
    k = knowledge()
    version = k.releases[index]
    children = k.children(path, version)
    if not children and not k.exists(path, version):
        return None
    keys: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    prefix = f"{path}."
    for key in children:
        target = k.alias_of(f"{prefix}{key}", version)
        if target is not None and target.startswith(prefix):
            aliases[key] = target[len(prefix) :]
        else:
            keys[key] = k.default(f"{prefix}{key}", version)
    return Section(path, keys, k.pydantic(path, version), k.strict(path, version), aliases)


def top_level(version: Version | None) -> set[str]:
    """The top-level keys the release reads (``bfloat16`` included where it does)."""
    return set(knowledge().children("", version))


def ever_top_level() -> set[str]:
    """The top-level keys any known release reads: what makes a JSON file a ds_config."""
    return knowledge().ever_children("")


def default_for(path: str, version: Version | None = None, stage: int | None = None) -> Any:
    """DeepSpeed's default for a dotted config path in ``version``; None when it has none.

    ``zero_optimization.overlap_comm`` depends on the stage (a validator: True for stage 3
    only, from 0.7.0; False before). A key the release does not read takes the default of the
    nearest release that does.
    """
    if path == "zero_optimization.overlap_comm" and judged_as(version) >= (0, 7, 0):
        return stage == 3
    section_path, _, key = path.rpartition(".")
    if section_path == "bfloat16":
        path = f"bf16.{key}"
    return knowledge().default(path, version)


def first_release(path: str) -> Version | None:
    """The first release that reads a dotted key; None when none does."""
    found = knowledge().first_last(path)
    return found[0] if found else None


def nearest_key(key: str, known: set[str] | frozenset[str]) -> str | None:
    """The real key a typo most likely meant, or None when nothing is close."""
    hits = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return hits[0] if hits else None
