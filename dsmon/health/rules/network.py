"""Runtime rules that read the network: ZeRO-3 parameter fetches and compressed communication.

Both give advice that only holds for some networks, so both look at what the run measured
before advising. The coordinator rule reads DeepSpeed 0.10.0's parameter-coordinator timers
and says which part of fetching parameters dominates, in the order the causes are checked:
waiting for transfers (bandwidth, topology), then the all-gathers, then submission overhead.
The compression rule reads the comms logger's bus bandwidth on multi-node runs: 1-bit / 0/1
Adam and ZeRO++'s quantized collectives pay on a slow inter-node network and cost more than
they save on a fast one. It proposes only what the DeepSpeed that ran ships: the 1-bit
optimizers exist up to 0.19.6 (0/1 Adam from 0.6.1), ZeRO++ from 0.10.0
(:mod:`dsmon.ds_config.releases`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dsmon.analysis import coordinator, network
from dsmon.ds_config import names, schema
from dsmon.ds_config.releases import knowledge
from dsmon.ds_config.schema import Version
from dsmon.health import measures as m
from dsmon.health import thresholds as th
from dsmon.health.fixes import in_effect
from dsmon.health.inputs import COORDINATOR, HealthInputs
from dsmon.health.model import Evidence, Finding, Status
from dsmon.health.registry import rule
from dsmon.health.verdicts import fix_json, not_applicable

_Z = "zero_optimization"
_PREFETCH = f"{_Z}.stage3_prefetch_bucket_size"
_PERSIST = f"{_Z}.stage3_param_persistence_threshold"
_MAX_LIVE = f"{_Z}.stage3_max_live_parameters"
_HPZ = f"{_Z}.zero_hpz_partition_size"
_ADVICE = {
    "wait": (
        "parameters were requested but had not arrived: the all-gathers are not hidden behind "
        "compute, which points at bandwidth or topology (check the inter-node network's busbw); "
        "prefetch earlier with a larger stage3_prefetch_bucket_size, and across nodes ZeRO++ "
        "hpZ (zero_hpz_partition_size = GPUs per node) keeps the gathers inside a node"
    ),
    "gather": (
        "the all-gathers themselves take the time: compare the all-gather busbw with the link; "
        "ZeRO++ qwZ (zero_quantized_weights) halves the bytes gathered, hpZ keeps them in a node"
    ),
    "submission": (
        "submitting fetches takes the time: many small submissions. Fewer, larger ones: raise "
        "stage3_prefetch_bucket_size; keep small parameters resident (stage3_param_persistence_"
        "threshold) and released ones live longer (stage3_max_live_parameters) to cut re-fetches"
    ),
}


def _setting(inputs: HealthInputs, path: str) -> Evidence:
    """A config value as evidence (the user's config: it says what was set), or a placeholder."""
    config = inputs.config or in_effect(inputs)
    if config is None:
        return Evidence(path, "unknown", "no config")
    return Evidence.of(config.get(path))


def _number(inputs: HealthInputs, path: str, default: float) -> float:
    """A numeric setting in effect, DeepSpeed's default when unknown."""
    config = in_effect(inputs)
    value = config.number(path) if config is not None else None
    return default if value is None else value


def _gpus_per_node(inputs: HealthInputs) -> int | None:
    """Ranks per node when the run spans several nodes evenly; None otherwise."""
    nodes, world = inputs.facts.nodes, inputs.facts.world_size
    if nodes is None or world is None or nodes < 2 or world % nodes:
        return None
    return world // nodes


def _coordinator_fix(inputs: HealthInputs, lead: str) -> str:
    """The ds_config change for the leading part (keys that change nothing are dropped later)."""
    low, high = th.PREFETCH_BUCKET_SUGGEST
    prefetch = min(max(2 * _number(inputs, _PREFETCH, low), low), high)
    zero: dict[str, Any] = {}
    if lead in ("wait", "submission"):
        zero["stage3_prefetch_bucket_size"] = int(prefetch)
    if lead == "gather":
        zero["zero_quantized_weights"] = True
    per_node = _gpus_per_node(inputs)
    if lead in ("wait", "gather") and per_node is not None:
        zero["zero_hpz_partition_size"] = per_node
    if lead == "submission":
        persist = _number(inputs, _PERSIST, th.PERSISTENCE_DEFAULT)
        live = _number(inputs, _MAX_LIVE, th.MAX_LIVE_DEFAULT)
        zero["stage3_param_persistence_threshold"] = int(max(persist, th.PERSISTENCE_DEFAULT))
        zero["stage3_max_live_parameters"] = int(max(live, th.MAX_LIVE_DEFAULT))
    return fix_json({_Z: zero})


def _coordinator_evidence(
    s: coordinator.CoordinatorSummary, inputs: HealthInputs
) -> tuple[Evidence, ...]:
    """The shares, the fetch time against compute, the submissions, and the settings."""
    where = f"{m.range_text(s.step_range)}, rank 0"
    ev = [
        Evidence(f"{p} share of fetch time", f"{s.share(p):.1%}", where) for p in coordinator.PARTS
    ]
    ev.append(Evidence("fetch time p50", f"{s.coordinator_ms:.2f} ms", where))
    if s.fetch_share is not None:
        ev.append(Evidence("fetch time / (fwd + bwd) p50", f"{s.fetch_share:.1%}", where))
    if s.submissions_per_step is not None:
        ev.append(Evidence("submissions per step p50", f"{s.submissions_per_step:g}", where))
    if s.numel_per_submission is not None:
        ev.append(Evidence("elements per submission p50", f"{s.numel_per_submission:.3g}", where))
    ev += [_setting(inputs, _PREFETCH), _setting(inputs, _HPZ)]
    return tuple(ev)


@rule(
    "zero3.coordinator",
    "ZeRO-3 parameter fetches stay off the critical path",
    "DeepSpeed 0.10.0's parameter-coordinator timers: fetch time (wait + submit) against "
    "fwd + bwd, and which part leads: waiting (bandwidth/topology), then all-gather, then "
    "submission.",
    "runtime",
    page="communication",
)
def check_coordinator(inputs: HealthInputs) -> Finding:
    """Say which part of the parameter fetch time dominates, and warn when it is large."""
    per = m.step_view(inputs, COORDINATOR, coordinator.coordinator_steps)
    if per.empty:
        return not_applicable(
            "no ZeRO-3 coordinator timer lines (only DeepSpeed 0.10.0 printed them, "
            "with wall_clock_breakdown on)"
        )
    summary = coordinator.summarize(
        per, m.all_steps(inputs), inputs.frame("coordinator_event"), th.WARMUP_STEPS
    )
    if summary is None:
        return Finding(Status.UNKNOWN, "the coordinator timer lines hold no time")
    lead = coordinator.leading_part(summary, th.COORD_WAIT_LEADS)
    ev = _coordinator_evidence(summary, inputs)
    rng = summary.step_range
    head = f"{lead} leads the parameter fetch time ({summary.share(lead):.1%})"
    if summary.fetch_share is None:
        return Finding(Status.UNKNOWN, f"{head}; no engine timers to weigh it against", ev)
    weight = f"fetches take {summary.fetch_share:.1%} of fwd + bwd"
    if summary.fetch_share <= th.COORD_FETCH_SHARE_WARN:
        return Finding(Status.PASS, f"{weight}; {head}", ev, steps=rng)
    return Finding(
        Status.WARN,
        f"{weight} (> {th.COORD_FETCH_SHARE_WARN:.0%}); {head}: {_ADVICE[lead]}",
        ev,
        _coordinator_fix(inputs, lead),
        steps=rng,
    )


def _compression_in_use(inputs: HealthInputs) -> list[str]:
    """What of the config compresses communication: a 1-bit optimizer, ZeRO++ qwZ / qgZ."""
    config = in_effect(inputs)
    if config is None:
        return []
    used = []
    kind = str(config.section("optimizer").get("type") or "")
    if kind.lower() in names.COMPRESSED_OPTIMIZERS:
        used.append(f"optimizer {kind}")
    if config.stage == 3:
        for key in ("zero_quantized_weights", "zero_quantized_gradients"):
            if config.flag(f"{_Z}.{key}") is True:
                used.append(key)
    return used


def _version(inputs: HealthInputs) -> Version | None:
    """The DeepSpeed release the advice must hold for (None: the newest known)."""
    config = in_effect(inputs)
    return config.version if config is not None and config.version else inputs.facts.ds_version


@dataclass(frozen=True, slots=True)
class _Compression:
    """What compressed communication the release offers: 1-bit optimizers, ZeRO++."""

    one_bit: tuple[str, ...]
    zeropp: bool
    hpz: bool

    @property
    def words(self) -> str:
        """The offer as the advice words it (only what this release has)."""
        parts = []
        if self.one_bit:
            spelled = " or ".join(names.spelled(n) for n in self.one_bit)
            parts.append(f"{spelled} without ZeRO, their convergence verified with fp16")
        if self.zeropp:
            parts.append("ZeRO++ qwZ/qgZ with ZeRO-3")
        return "; ".join(parts)


def _offer(version: Version | None) -> _Compression:
    """The compression this release ships (0/1 Adam preferred to 1-bit Adam)."""
    ours = names.ds_optimizers(version)
    one_bit = tuple(n for n in ("zerooneadam", "onebitadam") if n in ours)
    k = knowledge()
    return _Compression(
        one_bit,
        k.exists(f"{_Z}.zero_quantized_weights", version),
        k.exists(f"{_Z}.zero_hpz_partition_size", version),
    )


def _compress_fix(inputs: HealthInputs, offer: _Compression) -> str | None:
    """Compressed communication that fits the configured ZeRO stage and the release.

    The 1-bit optimizers refuse ZeRO (the engine asserts it is off) and are gone from 0.19.7;
    ZeRO++ needs stage 3 (0.10.0+). None when the release has nothing that fits.
    """
    config = in_effect(inputs)
    stage = config.stage if config is not None else 0
    if stage == 0 and offer.one_bit:
        return fix_json({"optimizer": {"type": names.spelled(offer.one_bit[0])}})
    if not offer.zeropp:
        return None
    zero: dict[str, Any] = {"stage": 3, "zero_quantized_weights": True}
    zero["zero_quantized_gradients"] = True
    per_node = _gpus_per_node(inputs)
    if per_node is not None and offer.hpz:
        zero["zero_hpz_partition_size"] = per_node
    return fix_json({_Z: zero})


def _decompress_fix(used: list[str]) -> str:
    """Plain communication: Adam for a 1-bit optimizer, quantized collectives off."""
    out: dict[str, Any] = {}
    if any(u.startswith("optimizer") for u in used):
        out["optimizer"] = {"type": "Adam"}
    zero = {u: False for u in used if u.startswith("zero_quantized")}
    if zero:
        out[_Z] = zero
    return fix_json(out)


@rule(
    "network.compression",
    "Compressed communication matches the measured inter-node bandwidth",
    "Multi-node runs: the comms logger's busbw of the largest collective messages. At about "
    f"{th.LOW_INTERNODE_GBPS:g} Gbps and under, 1-bit / 0/1 Adam (DeepSpeed <= 0.19.6) or "
    "ZeRO++ qwZ/qgZ (0.10.0+) pay, as far as the DeepSpeed that ran ships them; on a fast "
    "network they cost more than they save.",
    "runtime",
    page="communication",
)
def check_compression(inputs: HealthInputs) -> Finding:
    """Suggest compression on a slow inter-node network; warn about it on a fast one."""
    nodes = inputs.facts.nodes
    used = _compression_in_use(inputs)
    node_ev = Evidence("nodes", nodes or "unknown", inputs.facts.sources.get("nodes", ""))
    known = in_effect(inputs) is not None
    in_use = Evidence(
        "compression in use", ", ".join(used) or ("none" if known else "unknown"), "config"
    )
    if nodes is None or nodes < 2:
        why = "one node" if nodes == 1 else "number of nodes unknown"
        return not_applicable(f"{why}: no inter-node network to judge", node_ev, in_use)
    rows = inputs.frame("comm_summary")
    bw = network.measured_bandwidth(rows if not rows.empty else inputs.frame("comm_op"))
    if bw is None:
        return Finding(
            Status.UNKNOWN,
            "no all-gather, reduce-scatter or all-reduce bandwidth from the comms logger: add a "
            "comms_logger section for one diagnostic run",
            (node_ev, in_use),
        )
    mib = f"{bw.min_bytes / (1 << 20):.3g}-{bw.max_bytes / (1 << 20):.3g} MiB"
    where = f"comms logger: {bw.ops}, {mib}, {bw.calls} calls, median weighted by calls"
    measured = Evidence("busbw of the largest messages", f"{bw.busbw_gbps:.2f} Gbps", where)
    ev = (measured, node_ev, in_use)
    if bw.busbw_gbps > th.FAST_INTERNODE_GBPS and used:
        return Finding(
            Status.WARN,
            f"{', '.join(used)} on a {bw.busbw_gbps:.0f} Gbps network: compression costs "
            "more than it saves here",
            ev,
            _decompress_fix(used),
        )
    if not bw.large:
        return Finding(
            Status.UNKNOWN,
            "the logged collectives are all under 1 MiB: latency-bound, they do not show "
            "what the network carries",
            ev,
        )
    if bw.busbw_gbps <= th.LOW_INTERNODE_GBPS and not used:
        version = _version(inputs)
        offer = _offer(version)
        slow = f"the network carries {bw.busbw_gbps:.1f} Gbps (<= {th.LOW_INTERNODE_GBPS:g})"
        shipped = Evidence(
            "DeepSpeed", schema.version_text(version), offer.words or "no compression"
        )
        if not offer.words:
            return Finding(
                Status.WARN,
                f"{slow}: compressed communication would pay, but DeepSpeed "
                f"{schema.version_text(version)} ships neither the 1-bit optimizers nor ZeRO++",
                (*ev, shipped),
            )
        return Finding(
            Status.WARN,
            f"{slow}: compressed communication pays here ({offer.words})",
            (*ev, shipped),
            _compress_fix(inputs, offer),
        )
    state = "in use" if used else "not needed"
    return Finding(Status.PASS, f"{bw.busbw_gbps:.1f} Gbps between nodes: compression {state}", ev)
