"""Training curves from whatever the run printed: loss, learning rate, loss scale, memory, speed.

DeepSpeed and the frameworks on top of it print the same quantities in different places: the
learning rate in ``step=`` lines and in Megatron's iteration lines, the loss in Megatron's
iteration lines and in csv_monitor files, memory in ``see_memory_usage`` blocks and in the
ThroughputTimer line. :func:`training_series` puts them into one long frame against the
optimizer step, naming where each point came from, so one chart per quantity shows them all
and a run without engine timers still gets its curves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from dsmon.analysis import groups
from dsmon.analysis.downsample import downsample
from dsmon.model.joined import concat

#: Long-form columns of :func:`training_series`.
SERIES_COLUMNS = ("step", "metric", "value", "source")
#: What makes one trace of the series.
TRACE_KEYS = ["metric", "source"]
GIB = float(1 << 30)
TERA = 1e12

#: Quantities in the order they are drawn, with their unit for the axis.
METRICS: dict[str, str] = {
    "loss": "",
    "learning rate": "",
    "loss scale": "",
    "grad norm": "",
    "samples/s": "samples/s",
    "tokens/s per GPU": "tokens/s",
    "iteration time": "ms",
    "TFLOPS per GPU": "TFLOPS",
    "memory allocated": "GiB",
    "skipped steps": "count",
}

#: The per-rank probe of ``dsmon run`` (``rank_step`` records).
PROBE_SOURCE = "dsmon run's probe"
#: Where a point comes from (a csv_monitor point's source is ``monitor <tag>``).
SOURCES = (
    "ThroughputTimer",
    "iteration line",
    "iteration line (tgs)",
    "loss-scale message",
    "see_memory_usage",
    "step= line",
    "Trainer log",
    "Trainer evaluation",
    PROBE_SOURCE,
)
#: Hugging Face Trainer's dicts (``dsmon.parse.families.trainer``): their ``fmt`` and chart source.
TRAINER_SOURCES = {"trainer": "Trainer log", "trainer_eval": "Trainer evaluation"}


def _labels(value: str, known: Sequence[str], n: int) -> pd.Categorical[str]:
    """``value`` ``n`` times, categorical over every label its column can hold (sorted).

    Categorical because the dashboard groups a million points by metric and source on
    every refresh, which on integer codes costs a fraction of what it does on strings;
    with the same sorted categories in every part, parts join without losing that, and
    groups sort as the strings would.
    """
    categories = sorted({*known, value})
    codes = np.full(n, categories.index(value), dtype=np.intp)  # not n strings hashed
    return pd.Categorical.from_codes(codes, categories=pd.Index(categories))


#: csv_monitor / TensorBoard tags, matched by their last path part.
MONITOR_TAGS = {"train_loss": "loss", "loss": "loss", "lr": "learning rate"}


def _points(
    frame: pd.DataFrame, column: str, metric: str, source: str, scale: float = 1.0
) -> pd.DataFrame:
    """``frame[column]`` against its step, as long-form rows (none when absent)."""
    if frame.empty or column not in frame.columns or "step" not in frame.columns:
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy("float64", na_value=np.nan)
    steps = frame["step"].to_numpy("float64", na_value=np.nan)
    known = ~(np.isnan(steps) | np.isnan(values))
    n = int(known.sum())
    return pd.DataFrame(
        {
            "step": pd.arrays.FloatingArray(steps[known], np.zeros(n, dtype=bool)),
            "value": values[known] * scale,
            "metric": _labels(metric, list(METRICS), n),
            "source": _labels(source, SOURCES, n),
        },
        index=frame.index[known],
    )


def _iteration_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """Megatron/pipeline lines carry their own iteration number: use it where step is unknown."""
    if frame.empty or "iteration" not in frame.columns:
        return frame
    return frame.assign(step=frame["step"].astype("Float64").fillna(frame["iteration"]))


def _first_lr(frame: pd.DataFrame) -> pd.DataFrame:
    """``step=`` lines print one learning rate per param group: the first one is drawn."""
    if frame.empty or "lr" not in frame.columns:
        return frame
    # a comprehension, not Series.map: 0.1 s of a 100k-step run's first look went to map
    first = [v[0] if isinstance(v, tuple | list) and v else None for v in frame["lr"].tolist()]
    return frame.assign(lr0=pd.Series(first, index=frame.index))


def _monitor(frame: pd.DataFrame, train_batch_size: int | None) -> list[pd.DataFrame]:
    """csv_monitor points, whose x is samples seen: turned into steps by the batch size."""
    if frame.empty or not train_batch_size or "tag" not in frame.columns:
        return []
    out = []
    for tag, rows in frame.groupby("tag", sort=False):
        metric = MONITOR_TAGS.get(str(tag).rsplit("/", 1)[-1])
        if metric is None:
            continue
        steps = (rows["samples"].astype("float64") / train_batch_size).round()
        out.append(_points(rows.assign(step=steps), "value", metric, f"monitor {tag}"))
    return out


def training_series(
    frames: Mapping[str, pd.DataFrame], train_batch_size: int | None = None
) -> pd.DataFrame:
    """Every training quantity the run printed, against the optimizer step.

    Args:
        frames: record frames by kind (``step``, ``iteration``, ``monitor``, ``loss_scale``,
            ``memory``, ``throughput``); missing kinds are skipped.
        train_batch_size: samples per optimizer step, to place csv_monitor points (whose x
            is the number of samples seen) on the step axis; without it they are left out.

    Returns:
        Columns :data:`SERIES_COLUMNS`, sorted by metric (in :data:`METRICS` order) and step.
    """
    parts = [kind_series(k, frames[k], train_batch_size) for k in SERIES_KINDS if k in frames]
    return in_metric_order(parts)


#: Record kinds :func:`training_series` reads.
SERIES_KINDS = ("iteration", "monitor", "step", "loss_scale", "throughput", "memory")


def kind_series(
    kind: str, frame: pd.DataFrame, train_batch_size: int | None = None
) -> pd.DataFrame:
    """The points :func:`training_series` takes from one kind's frame, sorted by step.

    Step-local (a step's points come from that step's rows only), so the dashboard keeps it
    per kind and adds the points of new steps only (``dsmon.view.fold``).
    """
    return _sorted_points(_kind_parts(kind, frame, train_batch_size))


#: The probe's per-step figures (``dsmon.analysis.ranks.step_stats`` columns) as metrics.
PROBE_METRICS = {
    "loss": "loss",
    "grad norm": "grad_norm",
    "iteration time": "wall_ms",
    "loss scale": "loss_scale",
    "skipped steps": "skipped_steps",
}


def probe_series(
    stats: pd.DataFrame, metrics: Sequence[str] = tuple(PROBE_METRICS)
) -> pd.DataFrame:
    """The points of the probe's per-step figures (``dsmon.analysis.ranks.step_stats``).

    What the log shows only at INFO: the step's wall time (the slowest rank's, the others
    waited for it), and the engine's skipped-step counter and loss scale. ``metrics``: which.
    """
    if stats.empty or "step" not in stats.columns:
        return _sorted_points([])
    parts = [_points(stats, PROBE_METRICS[m], m, PROBE_SOURCE) for m in metrics]
    return _sorted_points(parts)


def skipped_steps(stats: pd.DataFrame) -> np.ndarray:
    """The steps the engine skipped on overflow, from the probe's per-step figures.

    A step whose ``skipped_steps`` counter is above the one before it (the first step: above
    0) was skipped: fp16's loss scaler (or bf16's check) found non-finite gradients and
    the optimizer did not step.
    """
    if stats.empty or "skipped_steps" not in stats.columns:
        return np.empty(0, dtype=np.float64)
    rows = stats[["step", "skipped_steps"]].dropna().sort_values("step")
    counts = rows["skipped_steps"].to_numpy(dtype=np.float64)
    before = np.concatenate([[0.0], counts[:-1]])
    return rows["step"].to_numpy(dtype=np.float64)[counts > before]


def _sorted_points(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Parts of long-form points in one frame, sorted by step."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    out = concat(parts)[list(SERIES_COLUMNS)]
    return out.sort_values("step", kind="stable").reset_index(drop=True)


def _kind_parts(kind: str, frame: pd.DataFrame, tbs: int | None) -> list[pd.DataFrame]:
    """Each quantity one kind's lines carry, as long-form points."""
    if kind == "iteration":
        return _iteration_parts(_iteration_steps(frame))
    if kind == "step":
        step = _first_lr(frame)
        return [
            _points(step, "lr0", "learning rate", "step= line"),
            _points(step, "skipped", "skipped steps", "step= line"),
        ]
    if kind == "throughput":
        return [
            _points(frame, "samples_per_s", "samples/s", "ThroughputTimer"),
            _points(frame, "mem_allocated_bytes", "memory allocated", "ThroughputTimer", 1 / GIB),
        ]
    if kind == "memory":
        return [_points(frame, "allocated_bytes", "memory allocated", "see_memory_usage", 1 / GIB)]
    if kind == "loss_scale":
        return [_points(frame, "new_scale", "loss scale", "loss-scale message")]
    return _monitor(frame, tbs) if kind == "monitor" else []


def _iteration_parts(it: pd.DataFrame) -> list[pd.DataFrame]:
    """A framework's iteration lines; Trainer's dicts apart, under sources of their own."""
    fmt = it["fmt"] if "fmt" in it.columns else pd.Series("", index=it.index)
    trainer = fmt.isin(list(TRAINER_SOURCES))
    parts = _framework_parts(it[~trainer]) if not trainer.all() else []
    for name, source in TRAINER_SOURCES.items():
        rows = it[fmt == name]
        parts.append(_points(rows, "loss", "loss", source))
        if name == "trainer":
            parts.append(_points(rows, "lr", "learning rate", source))
            parts.append(_points(rows, "grad_norm", "grad norm", source))
    return parts


def _framework_parts(it: pd.DataFrame) -> list[pd.DataFrame]:
    """Megatron's and the pipeline engine's iteration lines."""
    return [
        _points(it, "loss", "loss", "iteration line"),
        _points(it, "lr", "learning rate", "iteration line"),
        _points(it, "loss_scale", "loss scale", "iteration line"),
        _points(it, "grad_norm", "grad norm", "iteration line"),
        _points(it, "samples_per_s", "samples/s", "iteration line"),
        _points(it, "tokens_per_gpu_per_s", "tokens/s per GPU", "iteration line (tgs)"),
        _points(it, "elapsed_ms", "iteration time", "iteration line"),
        _points(it, "flops_per_s_per_gpu", "TFLOPS per GPU", "iteration line", 1 / TERA),
    ]


def joined(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Points of several kinds in one frame, in the order given (columns :data:`SERIES_COLUMNS`)."""
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    return concat(parts)[list(SERIES_COLUMNS)]


def in_metric_order(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Points of several kinds in one frame, by metric (:data:`METRICS` order), then step."""
    out = joined(parts)
    if out.empty:
        return out
    order = {m: i for i, m in enumerate(METRICS)}
    rank = out["metric"].astype(str).map(order)
    out = out.assign(_o=rank).sort_values(["_o", "step"], kind="stable")
    return out.drop(columns="_o").reset_index(drop=True)


def varying(series: pd.DataFrame) -> pd.DataFrame:
    """The traces whose value changes: a loss scale that stayed put, no skipped step, say nothing."""
    if series.empty:
        return series
    moves = series.groupby(TRACE_KEYS, observed=True)["value"].transform("nunique") > 1
    return series[moves].reset_index(drop=True)


def only_metrics(series: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """The points of these quantities (a Trainer's loss is no speed for the Steps page)."""
    return series[series["metric"].astype(str).isin(metrics)].reset_index(drop=True)


def train_batch_size(config: Mapping[str, object] | None) -> int | None:
    """``train_batch_size`` of a config, when it holds a positive whole number."""
    value = (config or {}).get("train_batch_size")
    try:
        n = int(str(value))
    except (TypeError, ValueError):
        return None
    return n if n > 0 else None


def latest(series: pd.DataFrame) -> pd.DataFrame:
    """The newest point of each quantity and source: ``metric, source, step, value``.

    Of two points at the same step, the later row. No sort of the whole series: at a
    million steps it cost a third of a second on each refresh.
    """
    if series.empty:
        return _latest_table(series)
    return _latest_table(series.iloc[groups.newest(series, TRACE_KEYS, "step")])


def _latest_table(newest: pd.DataFrame) -> pd.DataFrame:
    """The newest rows as the "Latest values" table: names as text, in metric order."""
    cols = ["metric", "source", "step", "value"]
    if newest.empty:
        return pd.DataFrame(columns=cols)
    out = newest[cols].astype({"metric": str, "source": str})  # a table of names, not codes
    order = {m: i for i, m in enumerate(METRICS)}
    return out.sort_values(
        ["metric", "source"], key=lambda c: c.map(order) if c.name == "metric" else c
    ).reset_index(drop=True)


def traces_and_latest(
    parts: Sequence[pd.DataFrame], grouped: Sequence[list[np.ndarray] | None] = ()
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The chart's points (downsampled per metric and source) and :func:`latest` of ``parts``.

    ``parts`` are :func:`kind_series` of each kind; the answer is that of :func:`joined`
    parts, without the join. A metric and source come from one kind only (each kind names
    its own sources), so each part is grouped on its own, once for both uses: on a live
    refresh of a long run the grouping is most of the cost, and joining a million points
    first cost as much again. ``grouped``: each part's ``groups.positions`` by
    :data:`TRACE_KEYS` where the caller keeps them (None, or absent: grouped here).
    """
    shown, newest = [], []
    for i, part in enumerate(parts):
        if part.empty:
            continue
        kept = grouped[i] if i < len(grouped) else None
        pos = kept if kept is not None else groups.positions(part, TRACE_KEYS)
        shown.append(downsample(part, "step", ["value"], by=TRACE_KEYS, grouped=pos))
        newest.append(part.iloc[groups.newest(part, TRACE_KEYS, "step", pos)])
    if not shown:
        return pd.DataFrame(columns=list(SERIES_COLUMNS)), _latest_table(pd.DataFrame())
    together = joined(shown)
    order = np.argsort(groups.codes(together, TRACE_KEYS), kind="stable")
    return together.iloc[order].reset_index(drop=True), _latest_table(joined(newest))
