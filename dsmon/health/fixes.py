"""A fix is offered only when applying it changes the config the run really uses.

Rules write their fix as a ds_config fragment for the situation they detect ("turn
overlap_comm on, buckets at 5e8"), without checking every key against the run. Pasting a fix
that changes nothing costs a user a restart and teaches them to ignore the checklist, so every
JSON fix passes through :func:`effective_fix` before any surface shows it: each key whose value
is already in effect is dropped, and so is each ZeRO key the configured stage never reads
(``overlap_comm`` on stage 0). When nothing is left, the rule's verdict stands without a fix.

"In effect" is the effective config DeepSpeed prints at start-up when the run has one (it
holds the resolved values: defaults of that version, ``"auto"`` filled in), else the user's
ds_config with that version's defaults.

A fix is also cut to what the DeepSpeed that ran reads (:mod:`dsmon.ds_config.releases`): a key
that release does not have, or an optimizer or scheduler type it does not build, would be
ignored or fail at ``deepspeed.initialize``, so it is never proposed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dsmon.ds_config import names, schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.read import as_float
from dsmon.ds_config.releases import knowledge
from dsmon.ds_config.schema import Version
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Finding
from dsmon.health.verdicts import fix_json

_ZERO = "zero_optimization"
_ZERO_SECTION = schema.section(_ZERO, None)
#: ZeRO-3's ``stage3_*`` keys and the fields they spell (read by stage 3 only, either way).
_ZERO3_ALIASES: dict[str, str] = dict(_ZERO_SECTION.aliases) if _ZERO_SECTION else {}
#: ZeRO keys only the listed stages read (stage 0 builds no ZeRO optimizer at all); setting
#: one on another stage changes nothing about the run. Keys not listed apply to every stage.
STAGE_ONLY: dict[str, frozenset[int]] = {
    "overlap_comm": frozenset({1, 2, 3}),
    "reduce_bucket_size": frozenset({1, 2, 3}),
    "reduce_scatter": frozenset({1, 2, 3}),
    "allgather_bucket_size": frozenset({1, 2}),
    "allgather_partitions": frozenset({1, 2}),
    "contiguous_gradients": frozenset({2, 3}),
    "sub_group_size": frozenset({3}),
    "zero_hpz_partition_size": frozenset({3}),
    **{name: frozenset({3}) for alias, field in _ZERO3_ALIASES.items() for name in (alias, field)},
}
#: Keys kept beside a changed sibling even when unchanged: they say what the siblings belong to.
_IDENTITY_KEYS = frozenset({"type"})


def read_at_stage(path: str, stage: int) -> bool:
    """Whether DeepSpeed reads a ``zero_optimization`` key (either spelling) at this stage."""
    section, _, key = path.rpartition(".")
    if section != _ZERO:
        return True
    stages = STAGE_ONLY.get(key)
    return stages is None or stage in stages


def in_effect(inputs: HealthInputs) -> ConfigView | None:
    """The config the run uses: its effective dump when printed, else the config read."""
    return inputs.effective or inputs.config


def effective_fix(finding: Finding, inputs: HealthInputs) -> Finding:
    """The finding with its JSON fix reduced to what would change; no fix if nothing would."""
    config = in_effect(inputs)
    if not finding.fix or finding.fix_lang != "json" or config is None:
        return finding
    try:
        fragment = json.loads(finding.fix)
    except json.JSONDecodeError:
        return finding
    if not isinstance(fragment, Mapping):
        return finding
    stage = _stage(fragment, config)
    version = config.version or inputs.facts.ds_version
    kept = _changes(_in_release(fragment, "", version), "", config, stage)
    fix = fix_json(kept) if kept else None
    if fix == finding.fix:
        return finding
    return Finding(
        finding.status, finding.summary, finding.evidence, fix, finding.fix_lang, finding.steps
    )


def _in_release(node: Mapping[str, Any], prefix: str, version: Version | None) -> dict[str, Any]:
    """The part of a fix fragment the release reads: keys it has, types it builds.

    Below a section whose keys dsmon does not check (``optimizer.params``) everything is kept.
    """
    out: dict[str, Any] = {}
    k = knowledge()
    for key, value in node.items():
        path = f"{prefix}{key}"
        if prefix.rstrip(".") in schema.OPAQUE:
            out[key] = value
        elif not k.exists(path, version):
            continue
        elif path in ("optimizer.type", "scheduler.type") and not _builds(path, value, version):
            return {}  # a section whose type the release lacks: none of it applies
        elif isinstance(value, Mapping) and path not in schema.OPAQUE:
            inner = _in_release(value, f"{path}.", version)
            if inner:
                out[key] = inner
        else:
            out[key] = value
    return out


def _builds(path: str, kind: Any, version: Version | None) -> bool:
    """Whether the release builds this optimizer or scheduler type."""
    if path == "optimizer.type":
        ours = names.ds_optimizers(version)
        return str(kind).lower() in ours or kind in names.TORCH_OPTIMIZERS
    return kind in names.ds_schedulers(version) or kind in names.TORCH_SCHEDULERS


def _stage(fragment: Mapping[str, Any], config: ConfigView) -> int:
    """The ZeRO stage after the fix: the fix's own stage when it sets one."""
    zero = fragment.get(_ZERO)
    stage = as_float(zero.get("stage")) if isinstance(zero, Mapping) else None
    return int(stage) if stage is not None else config.stage


def _changes(
    node: Mapping[str, Any], prefix: str, config: ConfigView, stage: int
) -> dict[str, Any]:
    """The part of a fix fragment that differs from ``config``, keys in the fix's order."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            sub = _changes(value, f"{path}.", config, stage)
            if sub:
                out[key] = sub
        elif read_at_stage(path, stage) and not _same(value, config, path):
            out[key] = value
    if out:
        out = {k: out.get(k, node[k]) for k in node if k in out or k in _IDENTITY_KEYS}
    return out


def _same(wanted: Any, config: ConfigView, path: str) -> bool:
    """Whether the fix's value is the one in effect, read the way DeepSpeed reads both."""
    if isinstance(wanted, bool):
        return config.flag(path) is wanted
    current = config.get(path).value
    if isinstance(wanted, int | float):
        number = as_float(current)
        return number is not None and number == float(wanted)
    return bool(wanted == current)
