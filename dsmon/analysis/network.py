"""The network rate a run's collectives reached, from the comms logger, per message size.

Advice that depends on the network (compressed-communication optimizers, ZeRO++ quantized
collectives) needs a measured rate, not a link's nominal one. The comms logger prints the
bus bandwidth of each collective (busbw: the rate each link carried, corrected for the
collective's traffic pattern). Small messages are latency-bound and reach little of any
link. The rate taken is that of the largest messages the run moved (within half of the largest
size, at least :data:`MIN_MSG_BYTES`): in a data-parallel run these are the gradient buckets,
reduced across every rank and so held to the slowest link, the inter-node one. The median over
those rows, weighted by calls, keeps one odd row from deciding.

The logger cannot tell group sizes apart: a large collective that stays inside one node
(tensor-parallel all-reduces, hpZ's secondary all-gather) reaches intra-node rates and pulls
the figure up, so the evidence names the collectives it came from.
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from dsmon.analysis.comm import comm_by_size

#: Messages smaller than this are latency-bound: their busbw says nothing about the link.
MIN_MSG_BYTES = 1 << 20
#: Collectives of the training step whose busbw reflects the data-parallel links.
COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


class Bandwidth(NamedTuple):
    """The bus bandwidth of the run's largest collective messages, and where it came from.

    ``large`` is False when no message reached :data:`MIN_MSG_BYTES`: then the figure comes
    from latency-bound messages and only bounds the link from below.
    """

    busbw_gbps: float
    ops: str
    min_bytes: int
    max_bytes: int
    calls: int
    large: bool


def measured_bandwidth(rows: pd.DataFrame) -> Bandwidth | None:
    """The busbw of the run's largest collective messages (summary table or verbose lines).

    Args:
        rows: a ``comm_summary`` or ``comm_op`` frame.

    Returns:
        None when the logger recorded no training collective with a bandwidth.
    """
    table = comm_by_size(rows)
    if table.empty:
        return None
    table = table[table["op"].astype(str).str.startswith(COLLECTIVES)]
    table = table.dropna(subset=["busbw_gbps", "msg_size_bytes"])
    table = table[table["busbw_gbps"] > 0]
    if table.empty:
        return None
    largest = float(table["msg_size_bytes"].max())
    top = table[table["msg_size_bytes"] >= largest / 2]
    calls = top["count"].astype("float64").fillna(1.0).clip(lower=1.0)
    return Bandwidth(
        busbw_gbps=_weighted_median(top["busbw_gbps"].astype("float64"), calls),
        ops=", ".join(sorted(top["op"].astype(str).unique())),
        min_bytes=int(top["msg_size_bytes"].min()),
        max_bytes=int(largest),
        calls=int(calls.sum()),
        large=largest >= MIN_MSG_BYTES,
    )


def _weighted_median(values: pd.Series, weights: pd.Series) -> float:
    """The value below which half of the total weight lies."""
    order = values.sort_values(kind="stable").index
    cumulative = weights.loc[order].cumsum()
    half = float(weights.sum()) / 2
    return float(values.loc[order][cumulative >= half].iloc[0])
