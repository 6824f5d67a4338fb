"""Config rules for optional features that are easy to switch on in the wrong place.

ZeRO++ hierarchical partitioning only pays across nodes; torch.compile with ZeRO-3 and
activation checkpointing has a history of bugs (and DeepSpeed has no ``torch_compile`` key at
all); activation checkpointing has a misspelling DeepSpeed silently ignores and a CPU mode
that moves every checkpoint across PCIe. These rules catch each of those traps.
"""

from __future__ import annotations

from dsmon.ds_config import schema
from dsmon.ds_config.effective import ConfigView
from dsmon.ds_config.releases import knowledge
from dsmon.health import thresholds as th
from dsmon.health.inputs import HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, needs_config, not_applicable

_HPZ = "zero_optimization.zero_hpz_partition_size"


@rule(
    "zeropp.hpz_nodes",
    "ZeRO++ hierarchical partitioning spans several nodes",
    "zero_hpz_partition_size > 1 keeps a secondary parameter copy per node to cut inter-node "
    "all-gathers; on one node it equals plain ZeRO-3 plus an extra wrapper, so it only slows.",
    "config",
)
@needs_config
def check_hpz_nodes(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn on hpZ on a single node (or spanning the whole world), or off ZeRO-3."""
    hpz = cfg.get(_HPZ)
    size = cfg.number(_HPZ) or 1
    if size <= 1:
        return not_applicable("hpZ is off", Evidence.of(hpz))
    facts = inputs.facts
    ev = (
        Evidence.of(hpz),
        Evidence("nodes", facts.nodes or "unknown", facts.sources.get("nodes", "")),
        Evidence("world size", facts.world_size or "unknown", facts.sources.get("world_size", "")),
    )
    fix = fix_json({"zero_optimization": {"zero_hpz_partition_size": 1}})
    if cfg.stage != 3:
        return Finding(Status.WARN, f"hpZ is only used by ZeRO-3 (stage {cfg.stage})", ev, fix)
    if facts.nodes is not None and facts.nodes < th.HPZ_MIN_NODES:
        return Finding(Status.WARN, "hpZ on a single node: no inter-node traffic to save", ev, fix)
    if facts.world_size is not None and size >= facts.world_size:
        return Finding(Status.WARN, "hpZ partition spans the whole world: same as ZeRO-3", ev, fix)
    if facts.nodes is None:
        return Finding(Status.UNKNOWN, "hpZ on; number of nodes unknown", ev)
    return Finding(Status.PASS, f"hpZ across {facts.nodes} nodes", ev)


@rule(
    "compile.zero3_act_ckpt",
    "torch.compile is not mixed with ZeRO-3 and activation checkpointing",
    "torch.compile together with ZeRO-3 and activation checkpointing has known bugs. DeepSpeed "
    "has no torch_compile key: compile is engine.compile() (0.14.4+); the compile section is "
    "DeepCompile (0.16.6+).",
    "config",
)
@needs_config
def check_compile_combo(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn when compile (asked for, one way or another) meets ZeRO-3 + act. checkpointing."""
    invented = cfg.has("torch_compile")
    deepcompile = cfg.flag("compile.deepcompile") is True
    act = cfg.has("activation_checkpointing")
    ev = (
        Evidence("torch_compile key", invented, "set (not a DeepSpeed key)" if invented else ""),
        Evidence.of(cfg.get("compile.deepcompile")),
        Evidence.of(cfg.get("zero_optimization.stage")),
        Evidence("activation_checkpointing section", act),
    )
    if not (invented or deepcompile):
        return not_applicable("no compile in the config (dsmon cannot see engine.compile())", *ev)
    k = knowledge()
    has_compile = k.feature("engine.compile", cfg.version)
    has_deepcompile = k.exists("compile.deepcompile", cfg.version)
    call = 'engine.compile(backend="inductor")' if has_compile else None
    here = schema.version_text(cfg.version)
    how = "call engine.compile()" if has_compile else f"DeepSpeed {here} has no engine.compile()"
    note = f" ('torch_compile' itself does nothing: {how})" if invented else ""
    if cfg.stage == 3 and act:
        lines = [f"{call}  # after deepspeed.initialize"] if call else []
        if has_deepcompile:
            lines += [
                "# and either drop activation checkpointing or let DeepCompile own ZeRO-3:",
                '# "compile": {"deepcompile": true}',
            ]
        return Finding(
            Status.WARN,
            "compile with ZeRO-3 and activation checkpointing: known "
            f"bugs, test on a short run first{note}",
            ev,
            "\n".join(lines) or None,
            "python",
        )
    status = Status.WARN if invented else Status.PASS
    fix2 = call if invented else None
    return Finding(
        status, f"compile without the ZeRO-3 + checkpointing combination{note}", ev, fix2, "python"
    )


@rule(
    "act_ckpt.settings",
    "Activation checkpointing settings take effect",
    "activation_checkpointing is read with dict.get: 'partitioned_activations' (the spelling "
    "in DeepSpeed's help text) is silently ignored; cpu_checkpointing moves every checkpoint "
    "across PCIe and back.",
    "config",
)
@needs_config
def check_act_ckpt(cfg: ConfigView, inputs: HealthInputs) -> Finding:
    """Warn on the ignored misspelling and on CPU checkpointing's transfer cost."""
    if not cfg.has("activation_checkpointing"):
        return not_applicable("no activation_checkpointing section")
    section = cfg.section("activation_checkpointing")
    keys = ("partition_activations", "cpu_checkpointing", "contiguous_memory_optimization")
    ev = [Evidence.of(cfg.get(f"activation_checkpointing.{k}")) for k in keys]
    problems: list[str] = []
    fix: dict[str, object] = {}
    if "partitioned_activations" in section:
        ev.append(
            Evidence(
                "activation_checkpointing.partitioned_activations",
                section["partitioned_activations"],
                "set, ignored",
            )
        )
        problems.append("'partitioned_activations' is ignored (the key is partition_activations)")
        fix["partition_activations"] = section["partitioned_activations"]
    if cfg.flag("activation_checkpointing.cpu_checkpointing") is True:
        problems.append(
            "cpu_checkpointing copies each checkpoint to host memory and back: "
            "use it only when activations do not fit on the GPU"
        )
        fix["cpu_checkpointing"] = False
    if not problems:
        return Finding(
            Status.PASS,
            "activation checkpointing settings take effect "
            "(recomputation costs about 25-35 % more step time)",
            tuple(ev),
        )
    return Finding(
        Status.WARN, "; ".join(problems), tuple(ev), fix_json({"activation_checkpointing": fix})
    )
