"""Every collective the probe measured: wire time, waiting, and bandwidth as nccl-tests has it.

``dsmon run``'s probe sums each rank's collective calls per optimizer step, op, power-of-two
size bucket and group size (:class:`dsmon.model.records.CollectiveStat`). Across the ranks of
a step, one such group of calls is the same calls on every rank, and the ranks leave a
collective together: a rank that arrives early waits inside it for the last one. So, per
step and group of calls:

- ``wire_ms``, the least time any rank spent in them, is the collectives' own time: the rank
  that arrived last at them waited for no one (exact when one rank is last at every call of
  the group; never more than the wire time otherwise);
- ``max_ms - wire_ms`` is the arrival skew: how long the first rank to arrive waited for the
  last. Summed over a step's groups, ``coll_wire_ms`` is the step's wire time in collectives,
  and a rank's own time in them (``coll_ms``) less that is its waiting for other ranks.

Bandwidth follows nccl-tests (its doc/PERFORMANCE.md), from the message sizes the probe
counts as nccl-tests does and the wire time: algorithm bandwidth ``algbw = bytes / time``,
bus bandwidth ``busbw = algbw x`` 2(n-1)/n for an all-reduce, (n-1)/n for an all-gather,
reduce-scatter or all-to-all, 1 for a broadcast or reduce, with n the group's size. DeepSpeed's
comms logger prints the same bus bandwidth, but its ``algbw`` of an all-reduce is twice
nccl-tests' (it counts the data sent and received), and its time holds the waiting: it is
compared with the least-waiting figure only on the rank that arrived last.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

#: Long-form columns of :func:`collective_rows`: one row per rank, step and group of calls.
ROW_COLUMNS = (
    "step", "rank", "op", "bucket_bytes", "group_size", "calls", "msg_bytes", "time_ms",
)  # fmt: skip
#: Columns of :func:`comm_steps`: the store's ``rank_comm`` table, from records.
STEP_COLUMNS = (
    "step", "op", "bucket_bytes", "group_size", "calls", "msg_bytes", "wire_ms", "max_ms",
)  # fmt: skip
#: A size bucket or group size the probe could not tell (the store's key cannot be NULL).
UNKNOWN = -1

#: nccl-tests' bus-bandwidth factor of each op family, as a function of the group size n.
_BUS_FACTORS = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
}
#: ``deepspeed.comm`` function -> the op family nccl-tests names it by.
FAMILIES = {
    "all_reduce": "all_reduce",
    "inference_all_reduce": "all_reduce",
    "all_reduce_coalesced": "all_reduce",
    "all_gather": "all_gather",
    "all_gather_into_tensor": "all_gather",
    "allgather_fn": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_fn": "reduce_scatter",
    "all_to_all": "all_to_all",
    "all_to_all_single": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}


def bus_factor(op: str, group_size: float) -> float:
    """nccl-tests' bus-bandwidth factor of ``op`` in a group of ``group_size`` ranks.

    NaN for a barrier (no data), an op nccl-tests has no figure for, or an unknown group.
    """
    family = FAMILIES.get(op)
    n = float(group_size)
    if family is None or not n >= 1:
        return float("nan")
    return float(_BUS_FACTORS[family](n))


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "op" else "float64") for c in columns})


def collective_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The ``collectives`` of ``rank_step`` rows, one row per rank, step and group of calls.

    ``table``: rows with ``step``, ``rank`` and ``collectives`` (records' tuples of
    :class:`~dsmon.model.records.CollectiveStat`, or their JSON objects); a step of a rank
    stored twice should be dropped first (:func:`dsmon.analysis.ranks.rank_step_table`).
    """
    if table.empty or "collectives" not in table.columns:
        return _empty(ROW_COLUMNS)
    out: dict[str, list[object]] = {c: [] for c in ROW_COLUMNS}
    steps, ranks_ = table["step"].tolist(), table["rank"].tolist()
    for step, rank, items in zip(steps, ranks_, table["collectives"].tolist(), strict=True):
        for item in items if isinstance(items, tuple | list) else ():
            get = item.get if isinstance(item, dict) else lambda k, i=item: getattr(i, k, None)
            out["step"].append(step)
            out["rank"].append(rank)
            for col in ROW_COLUMNS[2:]:
                out[col].append(get(col))
    frame = pd.DataFrame(out)
    for col in ROW_COLUMNS:
        if col != "op":
            frame[col] = pd.to_numeric(frame[col], errors="coerce").astype("float64")
    frame["op"] = frame["op"].astype(str)
    return frame


def comm_steps(rows: pd.DataFrame) -> pd.DataFrame:
    """Per step and group of calls, across ranks: what the store keeps in ``rank_comm``.

    From :func:`collective_rows`: the timed groups only; ``calls`` and ``msg_bytes`` the most
    any rank saw (all alike), ``wire_ms`` the least time a rank spent in them, ``max_ms`` the
    most. An unknown size bucket or group size is :data:`UNKNOWN`.
    """
    timed = rows.dropna(subset=["time_ms"]) if not rows.empty else rows
    if timed.empty:
        return _empty(STEP_COLUMNS)
    keyed = timed.assign(
        bucket_bytes=timed["bucket_bytes"].fillna(UNKNOWN),
        group_size=timed["group_size"].fillna(UNKNOWN),
    )
    by = keyed.groupby(["step", "op", "bucket_bytes", "group_size"], sort=True)
    out = by.agg(
        calls=("calls", "max"),
        msg_bytes=("msg_bytes", "max"),
        wire_ms=("time_ms", "min"),
        max_ms=("time_ms", "max"),
    ).reset_index()
    return out[list(STEP_COLUMNS)]


#: Columns of :func:`bucketed` (the store's ``ranks.comm``).
BUCKET_COLUMNS = (
    "step", "op", "bucket_bytes", "group_size", "steps", "calls", "msg_bytes", "wire_ms",
    "max_ms",
)  # fmt: skip


def bucketed(per_step: pd.DataFrame, width: int) -> pd.DataFrame:
    """:func:`comm_steps` rows summed per bucket of ``width`` steps (``step``: its first).

    What the store's ``ranks.comm`` reads from ``rank_comm``: ``steps`` counts the steps of
    the bucket that made such calls; the other figures are sums.
    """
    if per_step.empty:
        return _empty(BUCKET_COLUMNS)
    keyed = per_step.assign(step=(per_step["step"] // width) * width, steps=1.0)
    by = keyed.groupby(["step", "op", "bucket_bytes", "group_size"], sort=True)
    out = by[["steps", "calls", "msg_bytes", "wire_ms", "max_ms"]].sum().reset_index()
    return out[list(BUCKET_COLUMNS)]


def step_wire_ms(rows: pd.DataFrame) -> pd.Series:
    """Each step's wire time in collectives (ms): the sum of its groups' ``wire_ms``."""
    per = comm_steps(rows)
    if per.empty:
        return pd.Series(dtype="float64", name="coll_wire_ms")
    return per.groupby("step")["wire_ms"].sum().rename("coll_wire_ms")


#: Columns of :func:`bandwidth`.
BANDWIDTH_COLUMNS = (
    "step", "op", "bucket_bytes", "group_size", "size", "calls", "msg_bytes", "wire_ms",
    "skew_ms", "algbw_gbps", "busbw_gbps",
)  # fmt: skip


def size_label(bucket_bytes: float) -> str:
    """``64 KiB-128 KiB`` for the bucket whose floor is 64 KiB; ``unknown`` for -1."""
    if not bucket_bytes >= 0:
        return "size unknown"
    if bucket_bytes == 0:
        return "0 B"
    return f"{_binary(bucket_bytes)}-{_binary(2 * bucket_bytes)}"


def _binary(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:g} {unit}"
        n /= 1024
    return f"{n:g} TiB"


def bandwidth(comm: pd.DataFrame) -> pd.DataFrame:
    """Algorithm and bus bandwidth (Gbit/s) of each row of per-step (or bucketed) collectives.

    ``comm``: :func:`comm_steps` rows, or the store's bucketed ``rank_comm`` sums (the same
    columns, each summed over a bucket of steps): bandwidth is their bytes over their wire
    time, so a bucket's is its bytes-weighted mean. ``skew_ms`` is the arrival skew per call
    (``(max_ms - wire_ms) / calls``). Rows without a positive wire time or any bytes (a
    barrier) get NaN bandwidths.
    """
    if comm.empty:
        return _empty(BANDWIDTH_COLUMNS)
    wire = comm["wire_ms"].to_numpy(dtype=np.float64)
    nbytes = comm["msg_bytes"].to_numpy(dtype=np.float64)
    calls = comm["calls"].to_numpy(dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        alg = np.where((wire > 0) & (nbytes > 0), nbytes * 8.0 / (wire * 1e6), np.nan)
        skew = np.where(
            calls > 0, (comm["max_ms"].to_numpy(dtype=np.float64) - wire) / calls, np.nan
        )
    factors = np.array(
        [bus_factor(op, n) for op, n in zip(comm["op"], comm["group_size"], strict=True)],
        dtype=np.float64,
    )
    out = comm.assign(
        size=[size_label(b) for b in comm["bucket_bytes"].to_numpy(dtype=np.float64)],
        skew_ms=skew,
        algbw_gbps=alg,
        busbw_gbps=alg * factors,
    )
    return out[list(BANDWIDTH_COLUMNS)].reset_index(drop=True)


#: Columns of :func:`run_table`.
RUN_COLUMNS = (
    "op", "size", "group_size", "steps", "calls_per_step", "mib_per_step", "wire_ms_per_step",
    "skew_ms", "algbw_gbps", "busbw_gbps",
)  # fmt: skip


def run_table(buckets: pd.DataFrame) -> pd.DataFrame:
    """Each op, size bucket and group over the run, most wire time first.

    Per step, its calls, bytes and wire time; the arrival skew per call; its bandwidths
    (bytes-weighted over the run).
    From :func:`bucketed` (or the store's ``ranks.comm``) rows of any width.
    """
    if buckets.empty:
        return _empty(RUN_COLUMNS)
    keys = ["op", "bucket_bytes", "group_size"]
    sums = buckets.groupby(keys, sort=True)[["steps", "calls", "msg_bytes", "wire_ms", "max_ms"]]
    whole = sums.sum().reset_index()
    bw = bandwidth(whole.assign(step=0.0))
    steps = whole["steps"].where(whole["steps"] > 0)
    out = pd.DataFrame(
        {
            "op": whole["op"],
            "size": bw["size"],
            "group_size": whole["group_size"],
            "steps": whole["steps"],
            "calls_per_step": whole["calls"] / steps,
            "mib_per_step": whole["msg_bytes"] / steps / (1 << 20),
            "wire_ms_per_step": whole["wire_ms"] / steps,
            "skew_ms": bw["skew_ms"],
            "algbw_gbps": bw["algbw_gbps"],
            "busbw_gbps": bw["busbw_gbps"],
        }
    )
    return out.sort_values("wire_ms_per_step", ascending=False).reset_index(drop=True)
