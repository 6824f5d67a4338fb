"""Build a rule's :class:`HealthInputs` from a store, from parsed records, or from live frames.

The checklist runs in three places (``dsmon check`` on files, ``dsmon check --store``, the
dashboard), each holding its data differently. All three end in :func:`build_inputs`, so a
rule sees the same frames (``dsmon.model.frames.records_frame`` shape, as ``Store.frames.frame`` returns)
and the same facts wherever it runs. Facts (version, device, world size, nodes, GPU models)
are read from the run's own events, config dump, flops profile and NVML samples, and each
remembers where it was learnt so the evidence can say so.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import pandas as pd

from dsmon.analysis import ranks, steps
from dsmon.analysis.step_stats import StatSource
from dsmon.analysis.stragglers import StragglerSummary
from dsmon.ds_config.effective import ConfigView, auto_paths, ds_config_from_effective
from dsmon.ds_config.read import preferred_config
from dsmon.ds_config.schema import Version, parse_version
from dsmon.health.inputs import (
    BREAKDOWN,
    DP_FROM_WORLD,
    KIND_STAMPS,
    LAST_BEATS,
    RANK_PHASES,
    RANK_STATS,
    TIMER_TIMES,
    HealthInputs,
    LazyFrames,
    RunFacts,
)
from dsmon.model.frames import records_frame
from dsmon.model.joined import concat
from dsmon.model.records import ENGINE_INFO, ConfigRecord, Record
from dsmon.store.gpu import buckets
from dsmon.store.store import Store

#: Record kinds the rules read as frames (configs are read as records).
FRAME_KINDS = (
    "timer",
    "step",
    "throughput",
    "iteration",
    "loss_scale",
    "comm_summary",
    "comm_op",
    "flops_profile",
    "event",
    "rank_step",
    "heartbeat",
    "coordinator_event",
    "memory",
)
#: Kinds the rules read through :data:`RANK_STATS` and :data:`LAST_BEATS` only.
_PROBE_KINDS = frozenset({"rank_step", "heartbeat"})
#: The frame key of the per-GPU summary (``Store.gpu.summary``) the GPU rules read.
GPU_SUMMARY = "gpu_summary"
#: Comm backends that only run on accelerators.
_GPU_BACKENDS = frozenset({"nccl", "hccl", "rccl", "xccl"})


def inputs_from_records(
    records: Iterable[Record],
    *,
    run: str | None = None,
    config: ConfigView | None = None,
    now: datetime | None = None,
) -> HealthInputs:
    """Inputs from records in memory (``dsmon check LOG``): frames built like the store's."""
    by_kind: dict[str, list[Record]] = {}
    for rec in records:
        by_kind.setdefault(rec.KIND, []).append(rec)
    frames = {k: records_frame(k, by_kind[k]) for k in FRAME_KINDS if k in by_kind}
    if "gpu" in by_kind:
        grid = buckets.grid_of_samples(records_frame("gpu", by_kind["gpu"]), None)
        frames[GPU_SUMMARY] = buckets.summary(grid.stats, grid.series)
    nodes = {r.src.node for recs in by_kind.values() for r in recs if r.src.node}
    return build_inputs(
        frames, by_kind.get("config", []), run=run, config=config, now=now, node_names=nodes
    )


def inputs_from_store(
    store: Store,
    run: str,
    *,
    config: ConfigView | None = None,
    now: datetime | None = None,
    views: Mapping[str, Callable[[], pd.DataFrame]] | None = None,
    eager: bool = True,
) -> HealthInputs:
    """Inputs for one run of a store (``dsmon check --store PATH --run NAME``).

    Everything the rules read is read now (the caller may close the store next), but the
    probe's records: the rules read the store's per-step figures and newest heartbeats
    instead, never a 64-rank run's millions of probe records. A caller that keeps the store
    open (the server's health watcher) passes ``eager=False``: a frame is then read when a
    rule first asks for it. ``views`` adds frames the caller keeps itself (the watcher's
    :data:`dsmon.health.inputs.NEWEST_TS`, which knows when rows arrived).
    """
    loaders: dict[str, Callable[[], pd.DataFrame]] = {
        k: functools.partial(store.frames.frame, run, k) for k in FRAME_KINDS
    }
    loaders[GPU_SUMMARY] = functools.partial(store.gpu.summary, run)
    loaders[RANK_STATS] = functools.partial(store.ranks.step_stats, run)
    loaders[LAST_BEATS] = functools.partial(store_last_beats, store, run)
    loaders[KIND_STAMPS] = functools.partial(store_kind_stamps, store, run)
    loaders[RANK_PHASES] = functools.partial(store.ranks.phases, run, ranks.WHOLE_RUN)
    loaders.update(views or {})
    info = next((r for r in store.runs() if r.name == run), None)
    counts = info.kinds if info else {}
    frames = LazyFrames(loaders, lambda kind: counts.get(kind, 0) > 0)
    for kind in loaders if eager else ():
        if kind not in _PROBE_KINDS:
            frames[kind]  # noqa: B018  (loaded now, while the store is open)
    nodes = set(info.nodes) if info else set()
    return build_inputs(
        frames, store.records(run, "config"), run=run, config=config, now=now, node_names=nodes
    )


def paged_timer_views(store: Store, run: str) -> dict[str, Callable[[], pd.DataFrame]]:
    """What the run's state reads of the timers, read page by page: never the whole frame.

    The step breakdown (:data:`BREAKDOWN`) with only the columns the state reads (``step``,
    ``rank``, ``total_ms``: the highest step and the step time) and the timers' times
    (:data:`TIMER_TIMES`) hold a few numbers per step; the timer frame holds a column per
    timer of every group. For a caller that judges the state alone (``dsmon import``'s
    summary): a rule reading another column of the breakdown from these inputs finds none
    and says UNKNOWN, and the checklist reads the whole frame anyway.
    """

    def times() -> pd.DataFrame:
        return concat([p[["ts", "step"]] for p in store.frames.pages(run, "timer") if len(p)])

    return {
        BREAKDOWN: lambda: steps.paged_totals(store.frames.pages(run, "timer")),
        TIMER_TIMES: times,
    }


def store_kind_stamps(store: Store, run: str) -> pd.DataFrame:
    """Each frame kind's newest ``ts`` and highest ``step`` (:data:`KIND_STAMPS`), as kept.

    The probe's kinds are left out: the rules read theirs from the per-rank summaries.
    """
    rows = [
        s for s in store.kind_stats(run) if s.kind in FRAME_KINDS and s.kind not in _PROBE_KINDS
    ]
    return pd.DataFrame(
        {
            "ts": pd.to_datetime(
                pd.Series([s.last_ts for s in rows], dtype=object), format="ISO8601"
            ).to_numpy(),
            "step": pd.array([s.last_step for s in rows], dtype="Int64"),
        },
        index=pd.Index([s.kind for s in rows], dtype=object),
    )


def store_last_beats(store: Store, run: str) -> pd.DataFrame:
    """Each rank's newest heartbeat, as the store keeps them."""
    return records_frame("heartbeat", store.ranks.last_heartbeats(run))


def inputs_from_frames(
    frame: Callable[[str], pd.DataFrame],
    configs: Sequence[Record],
    *,
    run: str | None = None,
    now: datetime | None = None,
    node_names: Iterable[str] = (),
    gpu_summary: pd.DataFrame | None = None,
    views: Mapping[str, Callable[[], pd.DataFrame]] | None = None,
    present: Callable[[str], bool] | None = None,
    stats: StatSource | None = None,
    stragglers: Callable[[], StragglerSummary] | None = None,
) -> HealthInputs:
    """Inputs from a frame source such as the dashboard's cached ``RunFrames.frame``.

    Frames are read when a rule first asks (:class:`LazyFrames`); ``views`` gives per-step
    views the caller keeps (``dsmon.health.inputs.BREAKDOWN`` ...) so rules reuse them;
    ``present`` tells whether a kind has rows without reading them; ``stats`` answers for
    the whole-run figures the caller keeps sorted (:attr:`HealthInputs.stats`), and
    ``stragglers`` for the probe's (:attr:`HealthInputs.stragglers`).
    """
    loaders: dict[str, Callable[[], pd.DataFrame]] = {
        k: functools.partial(frame, k) for k in FRAME_KINDS
    }
    loaders.update(views or {})
    if gpu_summary is not None:
        loaders[GPU_SUMMARY] = lambda: gpu_summary
    frames = LazyFrames(loaders, present)
    inputs = build_inputs(frames, configs, run=run, now=now, node_names=set(node_names))
    return dataclasses.replace(inputs, stats=stats, stragglers=stragglers)


def build_inputs(
    frames: Mapping[str, pd.DataFrame],
    configs: Sequence[Record],
    *,
    run: str | None = None,
    config: ConfigView | None = None,
    now: datetime | None = None,
    node_names: set[str] | None = None,
) -> HealthInputs:
    """Join frames, the run's facts and its config into one HealthInputs.

    ``config`` (a file the user named) wins over a config recovered from the log; its
    version is the run's when the log names one.
    """
    events = _event_details(frames.get("event", pd.DataFrame()))
    version = _version(events)
    effective = _latest(configs, "effective")
    facts = _facts(frames, events, effective, version, node_names or set())
    if config is None:
        config = config_from_records(configs, version)
    elif config.version is None and version is not None:
        config = ConfigView(config.raw, origin=config.origin, source=config.source, version=version)
    in_effect = None
    if effective is not None:
        in_effect = ConfigView(
            ds_config_from_effective(effective.config),
            origin="effective",
            source=effective.src.file,
            version=version,
        )
    return HealthInputs(
        config=config,
        effective=in_effect,
        facts=facts,
        frames=frames if isinstance(frames, LazyFrames) else dict(frames),
        now=now,
        run=run,
    )


def config_from_records(configs: Sequence[Record], version: Version | None) -> ConfigView | None:
    """The config rules read: the user's JSON, else a ds_config file, else the effective dump.

    When the file said ``"auto"`` where the engine's config (which the Trainer filled in) has
    a value, the view knows, so the evidence says where the number came from.
    """
    chosen = preferred_config(configs)
    if chosen is None:
        return None
    raw: Mapping[str, Any] = chosen.config
    if chosen.origin == "effective":
        raw = ds_config_from_effective(raw)
    file = _latest(configs, "file")
    filled = auto_paths(file.config) if file is not None and chosen.origin != "file" else None
    return ConfigView(
        raw,
        origin=chosen.origin,
        source=chosen.src.file,
        version=version,
        filled=filled or frozenset(),
    )


def _latest(configs: Sequence[Record], origin: str) -> ConfigRecord | None:
    """The last config record of one origin."""
    found = [c for c in configs if isinstance(c, ConfigRecord) and c.origin == origin]
    return found[-1] if found else None


#: Event details by event name, in log order (:func:`_event_details`).
EventDetails = Mapping[str, list[Mapping[str, Any]]]


def _event_details(events: pd.DataFrame) -> EventDetails:
    """The ``detail`` dicts of the run's events by name, in log order: read in one pass.

    The run's facts ask for four names; filtering the frame once a name cost every health
    check (and every page's status line) a comparison and a copy of the frame each.
    """
    if events.empty or "name" not in events.columns or "detail" not in events.columns:
        return {}
    out: dict[str, list[Mapping[str, Any]]] = {}
    for name, detail in zip(events["name"].tolist(), events["detail"].tolist(), strict=True):
        if isinstance(detail, Mapping):
            out.setdefault(name, []).append(detail)
    return out


def _version(events: EventDetails) -> Version | None:
    """The DeepSpeed version from ``DeepSpeed info: version=...`` (the last one wins).

    Without that line (hidden at the default log level), the version dsmon's probe read from
    the engine.
    """
    for name in ("deepspeed_version", ENGINE_INFO):
        found = [parse_version(str(d.get("version"))) for d in events.get(name, [])]
        found = [v for v in found if v is not None]
        if found:
            return found[-1]
    return None


def _first(details: list[Mapping[str, Any]], key: str) -> Any:
    """The first value of ``key`` among event details that have it."""
    return next((d[key] for d in details if d.get(key) is not None), None)


def _gpu_names(frames: Mapping[str, pd.DataFrame]) -> tuple[str, ...]:
    """Distinct GPU model names NVML reported, sorted."""
    gpu = frames.get(GPU_SUMMARY, pd.DataFrame())
    if gpu.empty or "name" not in gpu.columns:
        return ()
    return tuple(sorted({str(n) for n in gpu["name"].dropna()}))


def _facts(
    frames: Mapping[str, pd.DataFrame],
    events: EventDetails,
    effective: ConfigRecord | None,
    version: Version | None,
    node_names: set[str],
) -> RunFacts:
    """What the run's own output says about where it runs."""
    sources: dict[str, str] = {}
    world = events.get("world_info", [])
    engine = events.get(ENGINE_INFO, [])
    backend = _first(events.get("dist_backend", []), "backend") or _first(engine, "backend")
    names = _gpu_names(frames)
    device = _device(backend, names, sources)
    world_size = _int(_first(world, "dist_world_size"))
    if world_size is not None:
        sources["world_size"] = "launcher dist_world_size"
    elif (world_size := _int(_first(engine, "world_size"))) is not None:
        sources["world_size"] = "the engine (dsmon probe)"
    nodes = _nodes(world, node_names, sources)
    dp = _dp_size(frames, effective, world_size, sources)
    return RunFacts(
        ds_version=version,
        device=device,
        backend=backend,
        world_size=world_size,
        dp_size=dp,
        nodes=nodes,
        gpu_names=names,
        sources=sources,
    )


def _device(backend: Any, names: tuple[str, ...], sources: dict[str, str]) -> str | None:
    """``gpu`` when NVML saw GPUs or the backend is an accelerator one; ``cpu`` for gloo/ccl."""
    if names:
        sources["device"] = "NVML samples"
        return "gpu"
    if backend is None:
        return None
    sources["device"] = f"comm backend {backend}"
    return "gpu" if str(backend).lower() in _GPU_BACKENDS else "cpu"


def _nodes(
    world: list[Mapping[str, Any]], node_names: set[str], sources: dict[str, str]
) -> int | None:
    """Host count: the launcher's world info, else the distinct node names of the records."""
    info = _first(world, "world_info")
    if isinstance(info, Mapping) and info:
        sources["nodes"] = "launcher WORLD INFO DICT"
        return len(info)
    nnodes = _int(_first(world, "nnodes"))
    if nnodes is not None:
        sources["nodes"] = "launcher nnodes"
        return nnodes
    if node_names:
        sources["nodes"] = "node names of the records"
        return len(node_names)
    return None


def _dp_size(
    frames: Mapping[str, pd.DataFrame],
    effective: ConfigRecord | None,
    world_size: int | None,
    sources: dict[str, str],
) -> int | None:
    """DeepSpeed's data-parallel size: its config dump, the flops profile, or the world size."""
    dp = _int(effective.config.get("world_size")) if effective else None
    if dp is not None:
        sources["dp_size"] = "config dump world_size"
        return dp
    prof = frames.get("flops_profile", pd.DataFrame())
    if not prof.empty and "data_parallel_size" in prof.columns:
        dp = (
            _int(prof["data_parallel_size"].dropna().iloc[-1])
            if prof["data_parallel_size"].notna().any()
            else None
        )
        if dp is not None:
            sources["dp_size"] = "flops profiler data parallel size"
            return dp
    if world_size is not None:
        sources["dp_size"] = DP_FROM_WORLD
    return world_size


def _int(value: Any) -> int | None:
    """An integer fact, or None for anything that is not one."""
    try:
        return None if value is None or pd.isna(value) else int(value)
    except (TypeError, ValueError):
        return None
