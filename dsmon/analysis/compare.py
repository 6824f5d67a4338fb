"""Two or more runs side by side: their per-step curves on one axis, and how their configs differ.

A change to the config (ZeRO stage, bucket sizes, precision) is judged by running again and
comparing. The comparison reads every run exactly as its own pages do: the step time is the
engine's ``fwd + bwd + step`` of the slowest rank (:func:`dsmon.analysis.comm.per_step`), the
exposed communication share is :func:`dsmon.analysis.comm.comm_share` (rank 0's timers, any
wait for a slower rank included) and, with ``dsmon run``'s probe, the wire time is
:func:`dsmon.analysis.waiting.comm_split`'s, throughput and loss come from
:func:`dsmon.analysis.training.training_series`. The config of each run is its
preferred config (:func:`dsmon.ds_config.read.preferred_config`: the user's keys first),
flattened to dotted keys so a table can list only the keys whose values differ.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pandas as pd

from dsmon.analysis.comm import comm_share, per_step
from dsmon.analysis.ranks import STATS_KEY, step_wall_ms
from dsmon.analysis.steps import step_breakdown
from dsmon.analysis.training import training_series
from dsmon.analysis.waiting import comm_split, held_in_collectives
from dsmon.ds_config.read import section

ZERO = "zero_optimization"

#: The quantities overlaid, in drawing order, with their axis titles.
METRICS = {
    "step time": "step time (ms)",
    "samples/s": "samples/s",
    "exposed comm": "exposed comm, rank 0's timers (% of step)",
    "wire time": "wire time, every rank (% of step)",
    "loss": "loss",
}
COLUMNS = ("run", "metric", "step", "value")
#: How a key a run's config lacks is shown in the differences table.
ABSENT = "(not set)"


def _rows(values: pd.Series, metric: str) -> pd.DataFrame:
    """A per-step Series as long-form rows."""
    frame = pd.DataFrame(
        {"metric": metric, "step": values.index.astype("float64"), "value": values.to_numpy()}
    )
    return frame.dropna(subset=["step", "value"])


def _one_source(series: pd.DataFrame, metric: str) -> pd.Series:
    """One metric of ``training_series``, from the source with the most points (one line)."""
    rows = series[series["metric"] == metric]
    if rows.empty:
        return pd.Series(dtype="float64")
    source = rows["source"].value_counts().index[0]
    chosen = rows[rows["source"] == source]
    return chosen.groupby("step")["value"].mean().astype("float64")


def run_series(
    frames: Mapping[str, pd.DataFrame], train_batch_size: int | None = None
) -> pd.DataFrame:
    """One run's compared quantities against the optimizer step (columns without ``run``).

    Args:
        frames: the run's record frames by kind (``timer`` and the kinds of
            :func:`dsmon.analysis.training.training_series`; the probe's per-step figures
            under ``dsmon.analysis.ranks.STATS_KEY`` for the step time of a run without
            timer lines).
        train_batch_size: to place csv_monitor points on the step axis.
    """
    breakdown = step_breakdown(frames.get("timer", pd.DataFrame()))
    training = training_series(frames, train_batch_size)
    stats = frames.get(STATS_KEY, pd.DataFrame())
    step_time = per_step(breakdown, "total_ms")
    if step_time.empty:
        step_time = step_wall_ms(stats)
    split = comm_split(stats)
    wire = split.set_index("step")["wire_share"] * 100.0 if held_in_collectives(split) else None
    parts = [
        _rows(step_time, "step time"),
        _rows(_one_source(training, "samples/s"), "samples/s"),
        _rows(per_step(comm_share(breakdown), "comm_share") * 100.0, "exposed comm"),
        _rows(wire if wire is not None else pd.Series(dtype="float64"), "wire time"),
        _rows(_one_source(training, "loss"), "loss"),
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS[1:]))
    return pd.concat(parts, ignore_index=True)


def overlay(by_run: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The runs' :func:`run_series` in one long frame, in the order the runs were picked."""
    parts = [s.assign(run=run) for run, s in by_run.items() if not s.empty]
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(parts, ignore_index=True)[list(COLUMNS)]


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config sections as dotted keys (``zero_optimization.stage``)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _shown(value: Any) -> str:
    """A config value as the table shows it: as JSON writes it (``true``, ``5e8`` kept)."""
    return value if isinstance(value, str) else json.dumps(value)


def as_read(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """The config with ZeRO's boolean form written as the section DeepSpeed builds from it.

    ``"zero_optimization": true`` is ZeRO stage 1 (``dsmon.ds_config.read.section``): two
    runs that both ran stage 1 must not show as different for how they wrote it.
    """
    if isinstance(config.get(ZERO), bool):
        return {**config, ZERO: dict(section(config, ZERO))}
    return config


def config_diff(configs: Mapping[str, Mapping[str, Any] | None]) -> pd.DataFrame:
    """The keys whose values differ between the runs' configs, one column per run.

    A run without a config is left out (nothing is known of its settings, so it cannot
    differ); a key one config lacks shows :data:`ABSENT`.
    """
    known = {run: flatten(as_read(c)) for run, c in configs.items() if c is not None}
    keys = sorted({k for flat in known.values() for k in flat})
    rows = []
    for key in keys:
        values = {run: _shown(flat[key]) if key in flat else ABSENT for run, flat in known.items()}
        if len(set(values.values())) > 1:
            rows.append({"key": key, **values})
    return pd.DataFrame(rows, columns=["key", *known])
