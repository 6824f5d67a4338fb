"""The autotuner's results as tables: its summary, its experiments, and the best setup found.

``deepspeed --autotuning run|tune`` writes ``summary.txt`` (the best experiment of each tuning
space) and one folder per experiment with ``metrics.json``; dsmon reads them into
``autotune_summary`` and ``autotune_exp`` records. The autotuner names each experiment after
the settings it tried (``z1_gas1_tmbspg35``: ZeRO stage 1, gradient accumulation 1, micro-batch
35 per GPU), so the ZeRO stage and micro-batch size of a summary row, which carries nothing
else, are read from that name. An experiment's own ds_config, when it was saved, wins over its
name. The page needs no Streamlit here: these are plain functions of records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dsmon.ds_config.read import section
from dsmon.model.records import (
    AutotuneExperimentRecord,
    AutotuneSummaryRecord,
    ConfigRecord,
    Record,
)

#: The origin of the autotuner's ``ds_config_optimal.json`` (see records.CONFIG_ORIGINS).
OPTIMAL_ORIGIN = "autotune_optimal"
#: Parts of an experiment name: the autotuner's abbreviation, then the value.
_STAGE = re.compile(r"^z(\d)(?:_|$)")
_PART = re.compile(r"(?:^|_)(tmbspg|gas|rbs|abs)([0-9.e+-]+)(?=_|$)")
#: Name abbreviations and the ds_config keys they stand for (``zero_optimization`` ones nested).
_KEYS = {
    "tmbspg": ("train_micro_batch_size_per_gpu",),
    "gas": ("gradient_accumulation_steps",),
    "rbs": ("zero_optimization", "reduce_bucket_size"),
    "abs": ("zero_optimization", "allgather_bucket_size"),
}
SUMMARY_COLUMNS = [
    "tuning_space",
    "num_experiments",
    "best_metric_val",
    "best_exp_name",
    "zero_stage",
    "micro_batch",
]
EXPERIMENT_COLUMNS = [
    "name",
    "zero_stage",
    "micro_batch",
    "grad_accum",
    "throughput_samples_per_s",
    "latency_ms",
    "fwd_ms",
    "bwd_ms",
    "step_ms",
    "flops_per_s_per_gpu",
    "num_gpus",
    "num_nodes",
]


@dataclass(frozen=True, slots=True)
class BestConfig:
    """The setup to copy and where it came from (``optimal`` file, ``experiment``, ``name``)."""

    name: str | None
    config: Mapping[str, Any]
    origin: str


def name_settings(name: str) -> dict[str, Any]:
    """The ds_config settings an experiment name spells, as a nested dict (empty if none)."""
    out: dict[str, Any] = {}
    stage = _STAGE.match(name)
    if stage:
        out["zero_optimization"] = {"stage": int(stage.group(1))}
    for abbr, raw in _PART.findall(name):
        try:
            value = int(float(raw))
        except ValueError:
            continue
        *parents, key = _KEYS[abbr]
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[key] = value
    return out


def _stage_and_mbs(name: str | None, config: Mapping[str, Any] | None) -> tuple[Any, Any]:
    """ZeRO stage and micro-batch size: from the ds_config when saved, else from the name."""
    from_name = name_settings(name or "")
    cfg = config or {}
    stage = section(cfg, "zero_optimization").get("stage")
    if not isinstance(stage, int):
        stage = from_name.get("zero_optimization", {}).get("stage")
    mbs = cfg.get("train_micro_batch_size_per_gpu")
    if not isinstance(mbs, int):
        mbs = from_name.get("train_micro_batch_size_per_gpu")
    return stage, mbs


def summary_table(records: Sequence[Record]) -> pd.DataFrame:
    """``summary.txt`` rows with the ZeRO stage and micro-batch of each best experiment."""
    rows = []
    for r in records:
        if isinstance(r, AutotuneSummaryRecord):
            stage, mbs = _stage_and_mbs(r.best_exp_name, None)
            rows.append(
                {
                    "tuning_space": r.tuning_space,
                    "num_experiments": r.num_experiments,
                    "best_metric_val": r.best_metric_val,
                    "best_exp_name": r.best_exp_name,
                    "zero_stage": stage,
                    "micro_batch": mbs,
                }
            )
    return pd.DataFrame(rows, columns=SUMMARY_COLUMNS).convert_dtypes()


def experiments_table(records: Sequence[Record]) -> pd.DataFrame:
    """One row per experiment's ``metrics.json``, highest throughput first."""
    rows = []
    for r in records:
        if not isinstance(r, AutotuneExperimentRecord):
            continue
        stage, mbs = _stage_and_mbs(r.name, r.ds_config)
        gas = (r.ds_config or {}).get("gradient_accumulation_steps")
        if not isinstance(gas, int):
            gas = name_settings(r.name).get("gradient_accumulation_steps")
        row = {c: getattr(r, c, None) for c in EXPERIMENT_COLUMNS}
        rows.append({**row, "zero_stage": stage, "micro_batch": mbs, "grad_accum": gas})
    frame = pd.DataFrame(rows, columns=EXPERIMENT_COLUMNS).convert_dtypes()
    return frame.sort_values("throughput_samples_per_s", ascending=False, ignore_index=True)


def throughput_points(experiments: pd.DataFrame, summary: pd.DataFrame) -> pd.DataFrame:
    """Throughput at each micro-batch size per ZeRO stage, for the chart.

    Every experiment with a throughput is a point (``source`` "experiment"); each summary row
    of one stage adds its best (``source`` "best of tuning space"). A best of 0 is the
    autotuner's way of saying no experiment of that space ran, so it is left out.
    """
    cols = ["zero_stage", "micro_batch", "throughput_samples_per_s", "name", "source"]
    exp = experiments[cols[:-1]].assign(source="experiment")
    best = summary[summary["tuning_space"] != "global"].rename(
        columns={"best_metric_val": "throughput_samples_per_s", "best_exp_name": "name"}
    )[cols[:-1]]
    best = best.assign(source="best of tuning space")
    both = pd.concat([exp, best], ignore_index=True) if not best.empty else exp
    keep = both["zero_stage"].notna() & both["micro_batch"].notna()
    keep &= both["throughput_samples_per_s"].fillna(0) > 0
    out = both[keep].astype({"zero_stage": int, "micro_batch": int})
    return out.sort_values(["zero_stage", "micro_batch", "source"], ignore_index=True)


def best_config(
    records: Sequence[Record], summary: pd.DataFrame, experiments: pd.DataFrame
) -> BestConfig | None:
    """The best setup: the autotuner's ``ds_config_optimal.json``, else the best experiment's.

    Without the file, the best experiment is the summary's global best (else the highest
    throughput measured); its saved ds_config is used, else the settings its name spells.
    """
    optimal = [r for r in records if isinstance(r, ConfigRecord) and r.origin == OPTIMAL_ORIGIN]
    name = _best_name(summary, experiments)
    if optimal:
        return BestConfig(name, dict(optimal[-1].config), "optimal")
    if name is None:
        return None
    saved = [
        r.ds_config
        for r in records
        if isinstance(r, AutotuneExperimentRecord) and r.name == name and r.ds_config
    ]
    if saved:
        return BestConfig(name, dict(saved[-1]), "experiment")
    settings = name_settings(name)
    return BestConfig(name, settings, "name") if settings else None


def _best_name(summary: pd.DataFrame, experiments: pd.DataFrame) -> str | None:
    """The global best experiment of the summary, else the fastest experiment measured."""
    glob = summary[summary["tuning_space"] == "global"]["best_exp_name"].dropna()
    if not glob.empty:
        return str(glob.iloc[-1])
    measured = experiments.dropna(subset=["throughput_samples_per_s"])
    return None if measured.empty else str(measured["name"].iloc[0])
